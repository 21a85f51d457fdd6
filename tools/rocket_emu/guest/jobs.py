"""Runs inside the emulated board, after init: npuctl's .debs under test installed with dpkg,
npuctl doctor, npuctl's golden check on each case the host sent (/lab/cases/cases.json), and
npuctl serve for the host's requests. Every result is one console line
"LAB-RESULT <kind> <json>"; the host reads them."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

CASES = Path("/lab/cases")
DEBS = Path("/lab/debs")
MODELS = CASES / "models"
TEFLON = "/usr/lib/teflon/libteflon.so"
PORT = 8000
WORKERS = 3  # the RK3588's NPU cores
CHILD_SECONDS = 900
ENVIRONMENT = {**os.environ, "NPUCTL_MODELS": str(MODELS), "NPUCTL_DOCTOR_CHILD_TIMEOUT": "900"}
# The execution plan after Teflon took what it runs: which ops are left to the CPU.
# The graph's nodes once the interpreter is ready: a delegate that took ops adds a DELEGATE
# node. The CPU reference runs without TFLite's default (XNNPACK) delegate.
PLANS = """
import json, sys
from npuctl.platforms.rocket.litert import load_module
litert = load_module()
for model in sys.argv[2:]:
    plans = {"model": model}
    for side, options in (
        ("plan", {"experimental_delegates": [litert.load_delegate(sys.argv[1])]}),
        ("cpu_plan", {"experimental_op_resolver_type":
            litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}),
    ):
        loaded = litert.Interpreter(model_path=model, **options)
        loaded.allocate_tensors()
        plans[side] = [op["op_name"] for op in loaded._get_ops_details()]
        del loaded
    print("PLANS " + json.dumps(plans), flush=True)
"""


def result(kind: str, document: object) -> None:
    print(f"LAB-RESULT {kind} {json.dumps(document, separators=(',', ':'))}", flush=True)


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


def doctor() -> None:
    code, out, err, seconds = child(["npuctl", "doctor", "--json"])
    try:
        report = json.loads(out)
    except ValueError:
        report = None
    result("doctor", {"exit": code, "report": report, "stderr": err[-800:], "seconds": seconds})


def cases() -> None:
    """Every case's two plans from one interpreter process (each process start costs the
    emulated board seconds), then npuctl's golden check of each, in its own child as the
    doctor runs it."""
    listed = json.loads((CASES / "cases.json").read_text())
    models = [str(CASES / case["file"]) for case in listed]
    _, out, err, _ = child([sys.executable, "-c", PLANS, TEFLON, *models])
    plans = {}
    for line in out.splitlines():
        if line.startswith("PLANS "):
            found = json.loads(line[len("PLANS ") :])
            plans[found["model"]] = found
    for case, model in zip(listed, models, strict=True):
        golden_code, golden_out, golden_err, golden_seconds = child(
            [sys.executable, "-m", "npuctl.platforms.rocket.probe", "golden", model, TEFLON]
        )
        result(
            "case",
            {
                "name": case["name"],
                "plan": plans.get(model, {}).get("plan"),
                "cpu_plan": plans.get(model, {}).get("cpu_plan"),
                "plan_stderr": err[-600:],
                "golden": last_json(golden_out),
                "golden_exit": golden_code,
                "golden_stderr": golden_err[-400:],
                "seconds": golden_seconds,
            },
        )


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


def serve() -> None:
    """npuctl serve with one NPU owner per core, as on the board (npuctl serve --workers 3)."""
    command = [
        "npuctl", "serve", "--host", "0.0.0.0", "--port", str(PORT),
        "--models", "mobilenet,mobilenet-v2,ssdlite", "--workers", str(WORKERS),
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
    install()
    doctor()
    cases()
    serve()
