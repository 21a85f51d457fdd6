"""Runs inside the emulated board, after init: npuctl's .debs under test installed with dpkg;
then for each Teflon of /lab/teflons.json in turn (each after the first installed over the
one before with dpkg, as an upgrade), npuctl doctor and npuctl's golden check on each case
the host sent (/lab/cases/cases.json); then npuctl serve for the host's requests, under the
last Teflon. Every result is one console line "LAB-RESULT <kind> <json>", and each part
starts with a line "LAB: phase <name>"; the host reads them."""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

CASES = Path("/lab/cases")
DEBS = Path("/lab/debs")
TEFLONS = Path("/lab/teflons.json")
MODELS = CASES / "models"
TEFLON = "/usr/lib/teflon/libteflon.so"
PORT = 8000
ZMQ_PORT = 5555  # emulation/rk3588.yaml's machine ports
WORKERS = 3  # the RK3588's NPU cores
CHILD_SECONDS = 900
ENVIRONMENT = {**os.environ, "NPUCTL_MODELS": str(MODELS), "NPUCTL_DOCTOR_CHILD_TIMEOUT": "900"}
# Each case in turn, in one interpreter process (each process start costs the emulated board
# seconds): the execution plan after Teflon took what it runs (the graph's nodes once the
# interpreter is ready: a delegate that took ops adds a DELEGATE node; the CPU reference runs
# without TFLite's default XNNPACK delegate), then npuctl's golden check, the probe's own
# function, as the doctor's child runs it (on the case's photograph where it names one,
# LAB_CASE_PICTURES: model -> picture). One "CASE <json>" line each, with the NPU jobs the
# case ran: the board's count of them (one interrupt each) before it and after it.
CASES_CHILD = """
import json, os, sys, time
from npuctl.platforms.rocket.litert import load_module
from npuctl.platforms.rocket.probe import golden
litert = load_module()
library = sys.argv[1]
pictures = json.loads(os.environ.get("LAB_CASE_PICTURES") or "{}")

def npu_jobs():
    total = 0
    for line in open("/proc/interrupts").read().splitlines()[1:]:
        if "npu" in line or "rocket" in line:
            total += sum(int(field) for field in line.split()[1:] if field.isdigit())
    return total

for model in sys.argv[2:]:
    started = time.monotonic()
    found = {"model": model, "jobs": [npu_jobs()]}
    for side, options in (
        ("plan", {"experimental_delegates": [litert.load_delegate(library)]}),
        ("cpu_plan", {"experimental_op_resolver_type":
            litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}),
    ):
        try:
            loaded = litert.Interpreter(model_path=model, **options)
            loaded.allocate_tensors()
            found[side] = [op["op_name"] for op in loaded._get_ops_details()]
            del loaded
        except Exception as error:
            found[side + "_error"] = str(error)
    try:
        found["golden"] = golden(model, library, pictures.get(model))
    except Exception as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        found["golden"] = {"ok": False, "stage": "model", "error": lines[0]}
    found["jobs"].append(npu_jobs())
    found["seconds"] = round(time.monotonic() - started, 1)
    print("CASE " + json.dumps(found), flush=True)
"""


# Frigate's teflon_tfl detector as Frigate builds it (frigate/detectors/plugins/teflon_tfl.py:
# its __init__ and detect_raw), on Frigate's own functions (detector_utils.py, from the host
# in /lab/cases/frigate), with the served SSDLite and the frame the host sent (uint8, NHWC).
FRIGATE_CHILD = """
import json, sys, types
import numpy as np
sys.path[:0] = ["/lab/cases/frigate"]
from npuctl.platforms.rocket.litert import load_module
load_module()  # ai-edge-litert where npuctl provision puts it, on the path
import detector_utils
config = types.SimpleNamespace(model=types.SimpleNamespace(path=sys.argv[1]))
detector = types.SimpleNamespace()
interpreter = detector_utils.tflite_load_delegate_interpreter(
    "/usr/lib/teflon/libteflon.so", config, {})
detector_utils.tflite_init(detector, interpreter)
rows = detector_utils.tflite_detect_raw(detector, np.load(sys.argv[2]))
print("ROWS " + json.dumps(rows.tolist()), flush=True)
"""


# A model Teflon ran on a real board, on the input that board had (/lab/cases/captures.json,
# from the host): the NPU's output here, and the CPU interpreter's, for the host to hold to
# the board's.
CAPTURE_CHILD = """
import json, sys
import numpy as np
from npuctl.platforms.rocket.litert import load_module
litert = load_module()
model, tensor = sys.argv[1], np.load(sys.argv[2])
outputs = {}
for side, options in (
    ("npu", {"experimental_delegates": [litert.load_delegate(sys.argv[3])]}),
    ("cpu", {"experimental_op_resolver_type":
        litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}),
):
    interpreter = litert.Interpreter(model_path=model, **options)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], tensor)
    interpreter.invoke()
    found = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    outputs[side] = found.astype(int).ravel().tolist()
print("OUTPUTS " + json.dumps(outputs), flush=True)
"""


def board_captures(teflon: str) -> None:
    for capture in json.loads((CASES / "captures.json").read_text()):
        code, out, err, seconds = child(
            [sys.executable, "-c", CAPTURE_CHILD, str(CASES / capture["model"]),
             str(CASES / capture["input"]), TEFLON]
        )  # fmt: skip
        outputs = next(
            (json.loads(line[8:]) for line in out.splitlines() if line.startswith("OUTPUTS ")),
            None,
        )
        result(
            "board-capture",
            {"name": capture["name"], "teflon": teflon, "exit": code, "outputs": outputs,
             "stderr": err[-800:], "seconds": seconds},
        )  # fmt: skip


def result(kind: str, document: object) -> None:
    print(f"LAB-RESULT {kind} {json.dumps(document, separators=(',', ':'))}", flush=True)


def phase(name: str) -> None:
    print(f"LAB: phase {name}", flush=True)


def child(command: list[str]) -> tuple[int, str, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=ENVIRONMENT, timeout=CHILD_SECONDS
        )
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {CHILD_SECONDS} s", time.monotonic() - started
    return done.returncode, done.stdout, done.stderr, round(time.monotonic() - started, 1)


def last_json(text: str) -> object:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def frigate_teflon(teflon: str) -> None:
    """Frigate's teflon_tfl detector in process on the served SSDLite: its 20 rows."""
    model = MODELS / "ssdlite_mobiledet_coco_qat_postprocess.tflite"
    code, out, err, seconds = child(
        [sys.executable, "-c", FRIGATE_CHILD, str(model), str(CASES / "frame.npy")]
    )
    rows = next(
        (json.loads(line[5:]) for line in out.splitlines() if line.startswith("ROWS ")), None
    )
    result(
        "frigate-teflon",
        {"teflon": teflon, "exit": code, "rows": rows, "stderr": err[-800:], "seconds": seconds},
    )


def peer_gates() -> None:
    """A peer's own gates (/lab/cases/peer/gates.json, built by the host), each a program that
    drives the NPU through the same driver and judges itself: 0 pass, 1 fail, 2 skip."""
    peer = CASES / "peer"
    for gate in json.loads((peer / "gates.json").read_text()):
        code, out, err, seconds = child([str(peer / gate["program"])])
        lines = (out + err).strip().splitlines()
        result(
            "peer-gate",
            {"name": gate["name"], "exit": code, "seconds": seconds, "lines": lines[-200:]},
        )


def install() -> None:
    """npuctl's .debs under test, over the ones the cached root was built with."""
    debs = sorted(str(deb) for deb in DEBS.glob("*.deb"))
    started = time.monotonic()
    done = subprocess.run(
        ["dpkg", "--force-confdef", "--force-confold", "-i", *debs],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
    )  # fmt: skip
    names = [Path(deb).name.split("_")[0] for deb in debs]
    query = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n", *names],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    installed = {
        fields[0]: fields[1]
        for fields in (line.split() for line in query.stdout.splitlines())
        if len(fields) == 3 and fields[2] == "ii"
    }
    result(
        "install",
        {
            "exit": done.returncode,
            "debs": [Path(deb).name for deb in debs],
            "installed": installed,
            "output": (done.stdout + done.stderr)[-1500:],
            "seconds": round(time.monotonic() - started, 1),
        },
    )


def switch_teflon(teflon: dict) -> None:
    """The Teflon's .debs installed over the one before, as 'apt install' would unpack them."""
    started = time.monotonic()
    done = subprocess.run(
        ["dpkg", "-i", *teflon["debs"]],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False,
    )  # fmt: skip
    query = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "mesa-teflon-delegate"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    result(
        "teflon",
        {
            "teflon": teflon["version"],
            "exit": done.returncode,
            "installed": query.stdout.strip(),
            "output": (done.stdout + done.stderr)[-1500:],
            "seconds": round(time.monotonic() - started, 1),
        },
    )


def doctor(teflon: str) -> None:
    code, out, err, seconds = child(["npuctl", "doctor", "--json"])
    try:
        report = json.loads(out)
    except ValueError:
        report = None
    result(
        "doctor",
        {"teflon": teflon, "exit": code, "report": report, "stderr": err[-800:],
         "seconds": seconds},
    )  # fmt: skip


def run_cases(
    names: dict[str, str], teflon: str, pictures: dict[str, str] | None = None
) -> tuple[set[str], int, str]:
    """CASES_CHILD on the models (model -> case name; a model's photograph, if any, in
    ``pictures``), each case reported as its line comes (the host times the cases by them):
    the models done, the child's exit, stderr's end."""
    done: set[str] = set()
    environment = {**ENVIRONMENT, "LAB_CASE_PICTURES": json.dumps(pictures or {})}
    with tempfile.TemporaryFile("w+") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CASES_CHILD, TEFLON, *names],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=environment,
        )  # fmt: skip
        timer = threading.Timer(CHILD_SECONDS, child.kill)  # a hung case ends the child
        timer.start()
        assert child.stdout is not None
        for line in child.stdout:
            if not line.startswith("CASE "):
                continue
            found = json.loads(line[len("CASE ") :])
            done.add(found["model"])
            result(
                "case",
                {
                    "name": names[found["model"]],
                    "teflon": teflon,
                    "jobs": found.get("jobs"),
                    "plan": found.get("plan"),
                    "cpu_plan": found.get("cpu_plan"),
                    "plan_stderr": found.get("plan_error", "") + found.get("cpu_plan_error", ""),
                    "golden": found["golden"],
                    "golden_exit": 0,
                    "golden_stderr": "",
                    "seconds": found["seconds"],
                },
            )
        code = child.wait()
        timer.cancel()
        stderr.seek(0)
        return done, code, stderr.read()[-600:]


def cases(teflon: str) -> None:
    """Every case in one child (CASES_CHILD). When a case ends that child (a crash, a hang),
    the case is reported with the child's exit and stderr, and the cases after it run in a
    new child."""
    listed = json.loads((CASES / "cases.json").read_text())
    waiting = {str(CASES / case["file"]): case["name"] for case in listed}
    pictures = {
        str(CASES / case["file"]): str(CASES / case["picture"]) for case in listed
        if case.get("picture")
    }  # fmt: skip
    while waiting:
        done, code, stderr = run_cases(waiting, teflon, pictures)
        left = [model for model in waiting if model not in done]
        if left:  # the case the child ended on
            result("case", {"name": waiting[left[0]], "teflon": teflon, "jobs": None,
                            "golden": None, "golden_exit": code, "golden_stderr": stderr,
                            "plan": None, "cpu_plan": None, "plan_stderr": stderr,
                            "seconds": None})  # fmt: skip
        waiting = {model: waiting[model] for model in left[1:]}


def npu_interrupts() -> dict[str, int]:
    """Each NPU interrupt line's count (one per job its core ran), keyed "IRQ NAME" as
    /proc/interrupts names it (rocket names a core's line after its device)."""
    counts = {}
    for line in Path("/proc/interrupts").read_text().splitlines():
        fields = line.split()
        if fields and fields[0].endswith(":") and ("npu" in line or "rocket" in line):
            counts[f"{fields[0][:-1]} {fields[-1]}"] = sum(
                int(field) for field in fields[1:] if field.isdigit()
            )
    return counts


def accel_files(pid: int) -> dict[str, object]:
    """A process's open accel files (each one the kernel schedules for on its own) and their
    DRM client ids where fdinfo gives them."""
    files, clients = 0, set()
    for link in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if not str(link.readlink()).startswith("/dev/accel/"):
                continue
            info = Path(f"/proc/{pid}/fdinfo/{link.name}").read_text()
        except OSError:
            continue
        files += 1
        clients.update(
            line.split()[-1] for line in info.splitlines() if line.startswith("drm-client-id")
        )
    return {"files": files, "clients": sorted(clients)}


def serve(teflon: str) -> None:
    """npuctl serve with one NPU owner per core, as on the board (npuctl serve --workers 3)."""
    command = [
        "npuctl", "serve", "--host", "0.0.0.0", "--port", str(PORT),
        "--models", "mobilenet,mobilenet-v2,ssdlite", "--workers", str(WORKERS),
        "--zmq", f"tcp://*:{ZMQ_PORT}",
    ]  # fmt: skip
    server = subprocess.Popen(command, env=ENVIRONMENT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + CHILD_SECONDS
    ready = False
    while time.monotonic() < deadline and server.poll() is None and not ready:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/ready", timeout=30) as answer:
                ready = answer.status == 200
        except (urllib.error.URLError, OSError):
            time.sleep(1)
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    files: dict[str, object] = {}
    if ready:
        before = npu_interrupts()
        print("LAB: serve ready", flush=True)
        sys.stdin.readline()  # the host writes a line when its requests are done
        after = npu_interrupts()
        files = accel_files(server.pid)
    server.terminate()
    try:
        _, stderr = server.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        _, stderr = server.communicate()
    jobs = {core: after[core] - before.get(core, 0) for core in after}
    result(
        "serve",
        {
            "teflon": teflon,
            "ready": ready,
            "exit": server.returncode,
            "stderr": stderr[-1500:],
            "core_jobs": jobs,
            "accel_files": files,
        },
    )


def mounts() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for source, target, kind in (
        ("proc", "/proc", "proc"),
        ("sysfs", "/sys", "sysfs"),
        ("devtmpfs", "/dev", "devtmpfs"),
        ("tmpfs", "/run", "tmpfs"),
        ("tmpfs", "/tmp", "tmpfs"),
    ):
        Path(target).mkdir(exist_ok=True)
        if libc.mount(source.encode(), target.encode(), kind.encode(), 0, None) != 0:
            print(f"LAB: mount {target}: {os.strerror(ctypes.get_errno())}", flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["mounts"]:
    mounts()
elif __name__ == "__main__":
    # The cores' interrupts before any job (their probe's): NPU job N ran at interrupt count
    # N plus these, so the host finds a case's jobs in the NPU model's log.
    result("interrupts-before-jobs", {"count": sum(npu_interrupts().values())})
    phase("installing npuctl's .debs")
    install()
    if (CASES / "peer" / "gates.json").is_file():
        phase("the peer's gates")
        peer_gates()
    teflons = json.loads(TEFLONS.read_text())
    for teflon in teflons:
        if teflon["debs"]:
            phase(f"Teflon {teflon['version']}: installing it")
            switch_teflon(teflon)
        phase(f"Teflon {teflon['version']}: npuctl doctor")
        doctor(teflon["version"])
        phase(f"Teflon {teflon['version']}: every case")
        cases(teflon["version"])
        if (CASES / "captures.json").is_file():
            phase(f"Teflon {teflon['version']}: a real board's capture")
            board_captures(teflon["version"])
        phase(f"Teflon {teflon['version']}: Frigate's teflon_tfl detector")
        frigate_teflon(teflon["version"])
    phase("npuctl serve starting")
    serve(teflons[-1]["version"])
