"""python -m kernel_lab matrix: the kernel matrix report (text table and JSON).
python -m kernel_lab lint [--suite S] CHANGES...: the newest lintian and appstreamcli (a .deb built
without an upload of its own, as the arm64 library packages, is given as itself).
python -m kernel_lab autopkgtest [--suite S] CHANGES: the package's autopkgtest, for real.
python -m kernel_lab piuparts [--suite S] --log FILE DEB...: install, purge, no leftovers.
python -m kernel_lab rebuild [--suite S] --workdir DIR --out DIR DSC: dpkg-source -x and a
cross dpkg-buildpackage -a arm64 of a source package in a clean chroot, then lintian.
python -m kernel_lab trial --suite S --package P --dist D --workdir W --json F: the guarded
first load in QEMU (kernel_lab.trial)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path

from pipeline.config import load_package
from pipeline.errors import BuildError, ExitCode

from . import autopkgtest, piuparts
from .drivers import DRIVERS
from .lint import lint
from .matrix import Packages, format_table, report_ok, run_matrix, write_report
from .suites import PLANS, SUITES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernel-lab")
    commands = parser.add_subparsers(dest="command", required=True)
    matrix = commands.add_parser("matrix", help="run the kernel matrix")
    matrix.add_argument("--suites", default=",".join(PLANS), help="comma-separated suites")
    matrix.add_argument(
        "--packages",
        default=",".join(DRIVERS),
        help="comma-separated driver packages (first: lead; default: every package of dkms/)",
    )
    matrix.add_argument("--dist", type=Path, required=True, help="where version N's debs are")
    matrix.add_argument("--next-dist", type=Path, required=True, help="version N+1's debs")
    matrix.add_argument("--next-suffix", required=True, help="N+1 is <version>+SUFFIX")
    matrix.add_argument("--src-dir", type=Path, required=True, help="patched trees by package")
    matrix.add_argument("--workdir", type=Path, required=True)
    matrix.add_argument("--json", type=Path, required=True)
    matrix.add_argument("--jobs", type=int, default=2)
    matrix.add_argument(
        "--kernels",
        default="",
        help="comma-separated headers packages: test only these, in the suites carrying them",
    )
    linting = commands.add_parser("lint", help="lintian and appstreamcli of a newer suite")
    linting.add_argument("--suite", default="trixie", choices=sorted(SUITES))
    linting.add_argument("--workdir", type=Path, required=True)
    linting.add_argument("changes", type=Path, nargs="+")
    testing = commands.add_parser("autopkgtest", help="autopkgtest with arm64 headers")
    testing.add_argument("--suite", default="trixie", choices=sorted(SUITES))
    testing.add_argument("--workdir", type=Path, required=True)
    testing.add_argument("changes", type=Path)
    piu = commands.add_parser("piuparts", help="piuparts install/purge of the packages")
    piu.add_argument("--suite", default="trixie", choices=sorted(SUITES))
    piu.add_argument("--log", type=Path, required=True)
    piu.add_argument(
        "--previous", type=Path, action="append", default=[], help="a version N deb (repeat)"
    )
    piu.add_argument("debs", type=Path, nargs="+")
    again = commands.add_parser("rebuild", help="rebuild a source package in a clean chroot")
    again.add_argument("--suite", default="trixie", choices=sorted(SUITES))
    again.add_argument("--workdir", type=Path, required=True)
    again.add_argument("--out", type=Path, required=True, help="where the built .debs go")
    again.add_argument("dsc", type=Path)
    trying = commands.add_parser("trial", help="the guarded first load, booted in QEMU")
    trying.add_argument(
        "--suite",
        default="",
        choices=["", *sorted(SUITES)],
        help="default: each package's own test suite (kernel.test_suite of its description)",
    )
    trying.add_argument("--packages", default=",".join(DRIVERS))
    trying.add_argument("--dist", type=Path, required=True, help="where the packages' debs are")
    trying.add_argument("--workdir", type=Path, required=True)
    trying.add_argument("--json", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = {
        "piuparts": piuparts_command,
        "lint": lint_command,
        "autopkgtest": autopkgtest_command,
        "matrix": matrix_command,
        "rebuild": rebuild_command,
        "trial": trial_command,
    }[args.command]
    return command(args)


def trial_command(args: argparse.Namespace) -> int:
    """Every package's proof; exit 1 when a boot did not do what it must."""
    import json

    from .trial import TRIAL_SCHEMA, run_trials

    reports = []
    for name in (name for name in args.packages.split(",") if name):
        if name not in DRIVERS:
            raise BuildError(f"unknown package {name}; known: {', '.join(DRIVERS)}", ExitCode.USAGE)
        config = load_package(name)
        deb = args.dist / f"{name}_{config.debian_version}_all.deb"
        report = run_trials(
            args.suite or config.kernel_test_suite,
            DRIVERS[name],
            deb if deb.exists() else None,
            args.workdir.resolve(),
        )
        reports.append(report)
        for boot in report["boots"]:
            print(f"{name} {report['kernel']} {boot['boot']}: {boot['status']} ({boot['detail']})")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "schema": TRIAL_SCHEMA,
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "trials": reports,
    }
    args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    failed = any(boot["status"] != "ok" for r in reports for boot in r["boots"])
    return 1 if failed else 0


def piuparts_command(args: argparse.Namespace) -> int:
    try:
        result = piuparts.run(SUITES[args.suite].release, args.debs, args.log, args.previous)
    except BuildError as error:
        print(f"kernel-lab: error: {error}", file=sys.stderr)
        return int(error.code)
    ok = result.ok and (result.upgraded or not args.previous)
    tests = "install, upgrade, purge" if result.upgraded else "install, purge"
    verdict = "passed" if ok else "FAILED"
    print(f"piuparts {verdict} in {args.suite} ({tests}; exit {result.returncode})")
    print(f"log: {args.log}")
    return 0 if ok else 1


def matrix_command(args: argparse.Namespace) -> int:
    names = [name for name in args.suites.split(",") if name]
    unknown = [name for name in names if name not in PLANS]
    if unknown:
        print(
            f"kernel-lab: unknown suite {', '.join(unknown)}; known: {', '.join(PLANS)}",
            file=sys.stderr,
        )
        return 2
    asked = tuple(name for name in args.kernels.split(",") if name)
    malformed = [name for name in asked if not name.startswith("linux-headers-")]
    if malformed:
        print(
            f"kernel-lab: {', '.join(malformed)} is not a headers package name; "
            "give e.g. linux-headers-7.3.4+deb13-arm64-16k",
            file=sys.stderr,
        )
        return 2
    try:
        packages = packages_under_test(args)
    except BuildError as error:
        print(f"kernel-lab: {error}", file=sys.stderr)
        return 2
    plans = [dataclasses.replace(PLANS[name], kernels=asked) for name in names]
    report = run_matrix(
        plans, packages, args.workdir.resolve(), jobs=args.jobs, kernels_asked=asked
    )
    write_report(report, args.json)
    print(format_table(report))
    print(f"report: {args.json}")
    return 0 if report_ok(report) else 1


def packages_under_test(args: argparse.Namespace) -> list[Packages]:
    """Version N, N+1 and the patched tree of each driver package, from the build output."""
    builds = []
    for name in (name for name in args.packages.split(",") if name):
        if name not in DRIVERS:
            raise BuildError(f"unknown package {name}; known: {', '.join(DRIVERS)}", ExitCode.USAGE)
        config = load_package(name)
        following = config.with_local_suffix(args.next_suffix)
        deb = args.dist / f"{name}_{config.debian_version}_all.deb"
        next_deb = args.next_dist / f"{name}_{following.debian_version}_all.deb"
        tree = args.src_dir / name
        missing = [str(path) for path in (deb, next_deb, tree) if not path.exists()]
        if missing:
            raise BuildError(
                f"{', '.join(missing)} missing: run 'make check-kernels'", ExitCode.USAGE
            )
        builds.append(
            Packages(
                deb.resolve(),
                config.version,
                next_deb.resolve(),
                following.version,
                tree.resolve(),
                DRIVERS[name],
                config.kernel_config_gate,
                config.kernel_regex,
                tuple(board_file.installed_path for board_file in config.board_files),
            )
        )
    return builds


def autopkgtest_command(args: argparse.Namespace) -> int:
    try:
        result = autopkgtest.run(SUITES[args.suite], args.changes, args.workdir.resolve())
    except BuildError as error:
        print(f"kernel-lab: error: {error}", file=sys.stderr)
        return int(error.code)
    log = args.workdir / "autopkgtest.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.output, encoding="utf-8")
    for kernel, outcome in sorted(result.verdicts.items()):
        print(f"  dkms-autopkgtest: {outcome} {kernel}")
    verdict = "passed" if result.ok else "FAILED"
    print(
        f"autopkgtest {verdict} in {args.suite} (exit {result.returncode}); the module was "
        f"built for: {', '.join(result.built_for) or 'no kernel'} (arm64 kernel: {result.kernel}); "
        f"log: {log}"
    )
    return 0 if result.ok else 1


def lint_command(args: argparse.Namespace) -> int:
    try:
        results = lint(SUITES[args.suite], args.changes, args.workdir.resolve())
    except BuildError as error:
        print(f"kernel-lab: error: {error}", file=sys.stderr)
        return int(error.code)
    for result in results:
        verdict = "clean" if result.ok else "NOT CLEAN"
        print(f"{result.changes}: {verdict} ({args.suite}: {result.lintian_version})")
        for line in (result.lintian_output + "\n" + result.appstream_output).splitlines():
            if line.strip() and not line.startswith("N:"):
                print(f"  {line}")
    return 0 if all(result.ok for result in results) else 1


def rebuild_command(args: argparse.Namespace) -> int:
    from .rebuild import rebuild

    try:
        result = rebuild(
            SUITES[args.suite], args.dsc.resolve(), args.workdir.resolve(), args.out.resolve()
        )
    except BuildError as error:
        print(f"kernel-lab: error: {error}", file=sys.stderr)
        return int(error.code)
    print(f"{result.dsc}: {'rebuilt' if result.build_ok else 'BUILD FAILED'} in {args.suite}")
    for deb in result.debs:
        print(f"  {deb}")
    if not result.build_ok:
        print(result.build_tail)
    print(f"lintian ({'clean' if result.lintian_ok else 'NOT CLEAN'}):")
    for line in result.lintian.splitlines():
        print(f"  {line}")
    print("lintian --pedantic (for review):")
    for line in result.pedantic.splitlines():
        print(f"  {line}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
