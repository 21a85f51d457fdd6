"""docs/emulated-board-results.md from the JSON report of 'make check-rocket-emu'
(dist/rocket-emu.json), never edited by hand. Usage:
python -m rocket_emu.tables REPORT OUTPUT"""

from __future__ import annotations

import sys

from pipeline.report_page import generate

REPORT_SCHEMA = 7


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def _verdict(case: dict | None) -> str:
    if case is None:
        return "not run"
    golden = case["golden"] or {}
    verdict = golden.get("verdict") or golden.get("error") or "no result"
    if golden.get("max_difference") is not None and "element difference" not in verdict:
        verdict += f"; by Mesa's measure, largest element difference {golden['max_difference']}"
    return f"{case['expect']}; {'passed' if golden.get('passed') else 'failed'}: {verdict}"


def _hex(values: list[int | str]) -> str:
    """Register values in hex; a buffer's digest as it is."""
    return ", ".join(f"0x{value:x}" if isinstance(value, int) else value for value in values)


def _against_boards(verdicts: dict) -> str:
    """The boards' verdict / this run's, with the largest difference where measured."""
    cell = f"{verdicts['boards']} / {verdicts['emulated'] or 'not run'}"
    difference = verdicts.get("difference")
    return cell if difference is None else f"{cell}, largest difference {difference:g}"


def _hardware_lines(hardware: dict | None, names: list[str]) -> list[str]:
    """The cases that stand for Mesa's tests on real RK3588 boards, both verdicts per Teflon."""
    if not hardware:
        return []
    lines = [
        "",
        "Held to real boards: each case that stands for one of Mesa's Teflon tests (which Mesa's",
        "CI runs on real RK3588 boards; npuctl/src/npuctl/platforms/rocket/hardware.yaml), the",
        "boards' verdict under each Teflon's release beside this run's, by Mesa's method on the",
        f"published files (every element within {hardware['tolerance']} of the CPU's; a float",
        "output in Mesa's 1/33 steps), with the largest element difference measured, and by",
        "npuctl's golden check on a lookalike. A published operation is described as the file",
        "has it. Where they part, the blind spots the case names (emulation/rk3588.yaml:",
        "blind_spots) say why.",
        "",
        "| case | Mesa's test | what it runs | "
        + " | ".join(f"boards / emulated, {name}" for name in names)
        + " | blind spots |",
        "|---|---|---|" + "---|" * len(names) + "---|",
    ]
    for row in hardware["rows"]:
        cells = [_against_boards(row["teflons"][name]) for name in names]
        spots = sorted({s for name in names for s in row["teflons"][name]["blind_spots"]})
        runs = ("lookalike: " if row["lookalike"] else "published: ") + row["runs"]
        lines.append(
            f"| {row['case']} | `{row['test']}` | {runs} | "
            + " | ".join(cells)
            + f" | {', '.join(spots) or '-'} |"
        )
    return lines


def _kept(detections: list[dict]) -> str:
    """Detections as Frigate keeps them: class, score, and what the score reaches."""
    if not detections:
        return "none"
    reached = {(True, True): "true positive", (True, False): "counted", (False, False): "kept"}
    return "; ".join(
        f"class {found['class']} {found['score']:.3f} "
        f"({reached[found['counted'], found['true_positive']]})"
        for found in detections
    )


def _photograph_lines(photographs: list[dict] | None, names: list[str]) -> list[str]:
    """The published detector on a photograph: npuctl's verdict and Frigate's view per Teflon."""
    if not photographs:
        return []
    lines = [
        "",
        "On a photograph: each case that runs a published detector on one, per Teflon, npuctl's",
        "detection check (NPU against the CPU interpreter) and the detections as Frigate keeps",
        "them for a frame (rows from a score of 0.4; counted from its min_score 0.5, a true",
        "positive from its threshold 0.7), the NPU's beside the CPU's, and whether the objects",
        "Frigate counts are the same (class, true positive or not, box IoU at least 0.9).",
        "",
        "| case | Teflon | npuctl's check | Frigate's objects, NPU | Frigate's objects, CPU "
        "| the same objects |",
        "|---|---|---|---|---|---|",
    ]
    for row in photographs:
        for name in names:
            found = row["teflons"].get(name) or {}
            frigate = found.get("frigate")
            check = f"{'passed' if found.get('passed') else 'failed'}: {found.get('verdict')}"
            if frigate is None:
                lines.append(f"| {row['case']} | {name} | {check} | not run | not run | - |")
                continue
            same = "yes" if frigate["same"] else "no"
            lines.append(
                f"| {row['case']} ({row['picture']}) | {name} | {check} | {_kept(frigate['npu'])} "
                f"| {_kept(frigate['cpu'])} | {same}, largest score difference "
                f"{frigate['largest_score_difference']} |"
            )
    return lines


def _peer_lines(peer: dict | None) -> list[str]:
    """A peer's hardware-validated gates on this board: how many passed, and each verdict."""
    if not peer or not peer["ran"]:
        return [
            "",
            "A peer's hardware-validated gates (librocketnpu) were not run: they are built when",
            "`make check-rocket-emu` is given PEER_GIT.",
        ]
    lines = [
        "",
        f"A peer's hardware-validated gates: librocketnpu ({peer['repository']} at",
        f"{peer['commit'][:12]}), whose authors run each bit-exact on real RK3588 boards,",
        "built for arm64 and run on this board through the same rocket driver:",
        f"{peer['passed']} of {len(peer['gates'])} passed. A gate's verdict is its own exit (0",
        "pass, 2 skip, any other fail); the lines are the last it judged by.",
        "",
        "| gate | what it checks | expected | verdict | seconds | its lines |",
        "|---|---|---|---|---|---|",
    ]
    for gate in peer["gates"]:
        said = "<br>".join(line.replace("|", "\\|") for line in gate["findings"][-8:])
        lines.append(
            f"| {gate['name']} | {gate['description']} | {gate['expect']} | {gate['verdict']} "
            f"| {gate['seconds']} | {said or '-'} |"
        )
    if peer.get("captures"):
        lines += [
            "",
            "A real board's own output: a model Teflon ran on a real board, with the input it",
            "gave that board (the peer's fixtures), run here under each Teflon on the same input.",
            "Each side's elements that differ from the board's output, and the largest difference",
            "in quantized steps; the expectation is emulation/rk3588.yaml's (board: the same).",
            "",
            "| capture | Teflon | expected | this board's NPU | the CPU interpreter |",
            "|---|---|---|---|---|",
        ]
        for capture in peer["captures"]:
            for name, found in capture["teflons"].items():
                if not found.get("ran"):
                    lines.append(
                        f"| {capture['name']} | {name} | {found['expect']} | not run | - |"
                    )
                    continue
                sides = [
                    f"{found[side]['differ']} of {found['elements']} differ, largest "
                    f"{found[side]['largest']}"
                    + (
                        ", only where the kernel reads padding, in channels "
                        + ", ".join(map(str, found[side]["channels"]))
                        if found[side]["differ"] and found[side].get("at_border_only")
                        else ""
                    )
                    for side in ("npu", "cpu")
                ]
                lines.append(
                    f"| {capture['name']} ({capture['description']}) | {name} | {found['expect']} "
                    f"| {sides[0]} | {sides[1]} |"
                )
    return lines


def _pad_lane_lines(pad_lanes: dict | None) -> list[str]:
    """Each reading of CNA_PAD_CON1's second byte against the boards' verdicts."""
    if not pad_lanes:
        return []
    readings = pad_lanes["readings"]
    rows = [row for model in pad_lanes["models"] for row in model["operations"]]
    lines = [
        "",
        "Which convolutions the NPU pads with CNA_PAD_CON1's second byte, tried against real",
        "boards (tools/rocket_emu/pad_lanes.py): every padded convolution of Mesa's published",
        "test models whose pad value, as Mesa writes it, has two low bytes that differ,",
        "computed on the host under each reading against the CPU interpreter. A cell is the",
        f"elements beyond Mesa's tolerance ({pad_lanes['tolerance']} steps), then the largest",
        f"difference; QEMU patch 0013 models the reading `{pad_lanes['modelled']}`. Models with",
        "no such convolution: "
        + (", ".join(m["model"] for m in pad_lanes["models"] if not m["operations"]) or "none")
        + ".",
        "",
        "| model | operation | shape | zero point | CNA_PAD_CON1 | real boards | "
        + " | ".join(readings)
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(readings),
    ]
    agree = dict.fromkeys(readings, 0)
    for model in pad_lanes["models"]:
        for row in model["operations"]:
            boards = " / ".join(f"{release}: {v}" for release, v in row["boards"].items())
            failing = set(row["boards"].values()) == {"fail"}
            cells = []
            for reading in readings:
                found = row["readings"][reading]
                agree[reading] += (found["beyond"] > 0) == failing
                cells.append(f"{found['beyond']} ({found['largest']})")
            lines.append(
                f"| {model['model']} | {row['operation']} {row['kind']} | {row['shape']} "
                f"| {row['zero_point']} | {row['pad_value']} | {boards} | "
                + " | ".join(cells)
                + " |"
            )
    lines += [
        "",
        "Rows where a reading puts the operation beyond the tolerance exactly where the boards",
        "fail it: "
        + "; ".join(f"{reading}: {agree[reading]} of {len(rows)}" for reading in readings)
        + ".",
    ]
    return lines


def render(report: dict, source: str) -> str:
    qemu, guest, boot = (
        report["qemu_build_seconds"],
        report["guest_build_seconds"],
        report["boot_seconds"],
    )
    cold = None if qemu is None or guest is None else qemu + guest + boot
    teflons: dict[str, dict] = report["teflons"]
    names = list(teflons)
    lines = [
        "# The emulated board: results",
        "",
        f"Generated by `make emu-tables` from `{source}` (schema {report['schema']}), written by",
        f"`make check-rocket-emu` at {report['generated']} on kernel {report['kernel']}. What is",
        "built and checked is in [emulated-board.md](emulated-board.md).",
        "",
        "| part | seconds |",
        "|---|---|",
        f"| QEMU build (cached after the first run) | {_minutes(qemu)} |",
        f"| root file system: mmdebstrap, DKMS build (cached) | {_minutes(guest)} |",
        f"| one boot: install, each Teflon's doctor and cases, serve | {_minutes(boot)} |",
        *(f"| of which: {part} | {_minutes(took)} |" for part, took in report["phases"].items()),
        f"| a cold run (the three above) | {_minutes(cold)} |",
        f"| a cached run (the boot) | {_minutes(boot)} |",
        "",
        "Seconds are the host's, from QEMU's start to each part's last line on the console.",
        "",
        "Every case runs under each Teflon in turn (`mesa-teflon-delegate`):",
        "",
        *(f"- {name}" for name in names),
        "",
        "A cell is the case's expectation under that Teflon (emulation/rk3588.yaml), then",
        "npuctl's golden check (NPU against the CPU interpreter, Mesa's tolerance). Seconds",
        "are the host's for the case under each Teflon, in turn.",
        "",
        "| case | " + " | ".join(f"Teflon {name}" for name in names) + " | seconds |",
        "|---|" + "---|" * len(names) + "---|",
    ]
    every_case = list(
        dict.fromkeys(case for teflon in teflons.values() for case in teflon["cases"])
    )
    for case in every_case:
        cells = [_verdict(teflons[name]["cases"].get(case)) for name in names]
        seconds = " / ".join(
            str((teflons[name]["cases"].get(case) or {}).get("host_seconds")) for name in names
        )
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {seconds} |")
    differences = report.get("register_differences") or {}
    if len(names) > 1:
        lines += [
            "",
            "What the two Teflons program differently for the same graph (from the NPU model's",
            "log of every job's register commands; addresses left out): each register whose",
            "value differs in some task, in how many tasks, and up to four of its values under",
            f"{names[0]} and under {names[-1]}. The full listings are in",
            "`dist/rocket-emu-registers/<Teflon>/<case>.txt`.",
            "",
            "| case | register | tasks | " + f"{names[0]} | {names[-1]} |",
            "|---|---|---|---|---|",
        ]
        for case, found in differences.items():
            if not found:
                lines.append(f"| {case} | the same registers | | | |")
            for entry in found:
                before, after = entry["values"]
                lines.append(
                    f"| {case} | {entry['register']} | {entry['tasks']} | "
                    f"{_hex(before)} | {_hex(after)} |"
                )
        lines += [
            "",
            "| Teflon | installed at boot | doctor: Teflon | doctor: mobilenet-v2 |",
            "|---|---|---|---|",
        ]
        for name in names:
            installed = teflons[name].get("installed")
            doctor = teflons[name].get("doctor") or {}
            how = (
                "in the cached root"
                if installed is None
                else f"dpkg exit {installed['exit']}, {_minutes(installed['seconds'])}"
            )
            said = doctor.get("teflon.version", doctor.get("teflon.installed"))
            lines.append(f"| {name} | {how} | {said} | {doctor.get('golden.mobilenet-v2')} |")
    lines += _hardware_lines(report.get("hardware"), names)
    lines += _pad_lane_lines(report.get("pad_lanes"))
    lines += _photograph_lines(report.get("photographs"), names)
    lines += _peer_lines(report.get("peer_suite"))
    served = report["served"]
    cores = served["core_jobs"]
    lines += [
        "",
        f"`npuctl serve --workers 3` under Teflon {served.get('teflon')} with the served model",
        f'({served["model"]}): the doctor\'s golden check says "{served["golden"]}". Of its',
        f"{served['answers']} answers to the same input (one at a time, then three clients at",
        f"once), the largest element difference from the first is {served['largest_difference']}.",
        "Jobs each core ran meanwhile (its interrupts):",
        "",
        "| " + " | ".join(f"core {core}" for core in cores) + " |",
        "|" + "---|" * len(cores),
        "| " + " | ".join(str(count) for count in cores.values()) + " |",
    ]
    v2 = report.get("mobilenet_v2")
    if v2:
        lines += [
            "",
            f"MobileNetV2 ({v2['model']}, built as the `{v2['case']}` case), served beside it:",
            f"the doctor's golden check says \"{v2['golden']}\". A Triton client's request",
            "against the CPU interpreter's scores for the same tensor: "
            f"{'passed' if v2['served']['passed'] else 'failed'}, {v2['served']['verdict']}.",
        ]
    detector = report.get("detector")
    if detector:
        served_detections = detector["served"]
        lines += [
            "",
            f"The served detector ({detector['model']}, built as the `{detector['case']}`",
            f"case): the doctor's golden check says \"{detector['golden']}\". Frigate's",
            "DeepStack detection request, against the CPU interpreter's answer for the frame:",
            f"{'passed' if served_detections['passed'] else 'failed'}, "
            f"{served_detections['verdict']}.",
        ]
        zmq = detector.get("frigate_zmq")
        if zmq:
            lines += [
                "Frigate's zmq detector (`npuctl serve --zmq`), its model request and a frame at",
                "the detector's input size, against the CPU interpreter's detections of that",
                f"frame: {'passed' if zmq['passed'] else 'failed'}, {zmq['verdict']}.",
            ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    return generate("rocket_emu.tables", argv, REPORT_SCHEMA, "make check-rocket-emu", render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
