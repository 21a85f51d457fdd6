"""make image: the container images of images/*.yaml for arm64 and amd64, from Debian's archive
and PyPI only, as OCI archives in dist/images; 'push' sends each image's architectures to a
registry under one name (a manifest list)."""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from pipeline.errors import BuildError
from pipeline.npuctl_package import npuctl_version

from . import workspace
from .build import build, preflight
from .definition import ARCHITECTURES, Definition, image_names, load
from .errors import ExitCode, ImageError
from .push import push


def _list(value: str) -> list[str]:
    return [item for item in value.replace(",", " ").split() if item]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oci_image", description=__doc__)
    parser.add_argument("--images", default="", help="names from images/ (default: all)")
    parser.add_argument(
        "--architectures", default="", help=f"of {', '.join(ARCHITECTURES)} (default: all)"
    )
    parser.add_argument("--dist", type=Path, default=Path("dist"))
    commands = parser.add_subparsers(dest="command", required=True)
    built = commands.add_parser("build", help="build the images into DIST/images")
    built.add_argument("--work", type=Path, default=Path("build/images"))
    built.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        help="builds at a time (default: one a CPU)",
    )
    pushed = commands.add_parser("push", help="push the images in DIST/images to a registry")
    pushed.add_argument("--registry", required=True, help="host[:port][/path]")
    pushed.add_argument(
        "--no-tls-verify", action="store_true", help="plain HTTP (a registry on this machine)"
    )
    return parser


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count of builds (1 or more)")
    return int(value)


def _architectures(value: str) -> list[str]:
    wanted = _list(value)
    unknown = set(wanted) - set(ARCHITECTURES)
    if unknown:
        raise ImageError(
            f"unknown architectures {sorted(unknown)}: choose from {', '.join(ARCHITECTURES)}",
            ExitCode.USAGE,
        )
    return wanted


def _megabytes(count: object) -> str:
    return f"{int(str(count)) / 1e6:.0f} MB"


def _build_one(definition: Definition, architecture: str, dist: Path, work: Path) -> None:
    print(f"image: building {definition.name} ({architecture})", file=sys.stderr)
    summary = build(definition, architecture, dist, work).summary()
    print(
        f"image: {summary['image']} ({architecture}) -> {summary['archive']}: "
        f"{_megabytes(summary['uncompressed_bytes'])}, "
        f"{_megabytes(summary['compressed_bytes'])} compressed",
        file=sys.stderr,
    )


def build_all(wanted: list[tuple[Definition, str]], dist: Path, work: Path, jobs: int) -> None:
    """Each image for each architecture, ``jobs`` at a time. The first failure, or a stop,
    abandons the others: each one running undoes its mounts before this returns."""
    if jobs == 1 or len(wanted) == 1:  # in this thread, where a signal reaches the build
        for definition, architecture in wanted:
            _build_one(definition, architecture, dist, work)
        return
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="image") as pool:
        builds = [pool.submit(_build_one, d, a, dist, work) for d, a in wanted]
        try:
            done, _ = wait(builds, return_when=FIRST_EXCEPTION)
            for finished in builds:  # in order: the first failure named is the first listed
                if finished in done and (error := finished.exception()) is not None:
                    raise error
        except BaseException:
            for queued in builds:
                queued.cancel()
            workspace.abandon_groups()
            wait(builds)
            raise


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        definitions = [load(name) for name in _list(args.images) or image_names()]
        wanted = _architectures(args.architectures)
        version = npuctl_version()
        chosen = {
            definition.name: [a for a in definition.architectures if not wanted or a in wanted]
            for definition in definitions
        }
        if args.command == "build":
            pairs = [(d, a) for d in definitions for a in chosen[d.name]]
            preflight(pairs, args.dist)
            build_all(pairs, args.dist, args.work, args.jobs)
            for definition in definitions:  # for npuctl k8s render --image
                print(f"localhost/{definition.name}:{version}")
        else:
            for definition in definitions:
                architectures = chosen[definition.name]
                archives = []
                for architecture in architectures:
                    stem = definition.stem(version, architecture)
                    archive = args.dist / "images" / f"{stem}.oci.tar"
                    if not archive.is_file():
                        raise ImageError(
                            f"{archive} is missing: build it first ('make image')",
                            ExitCode.INPUT,
                        )
                    archives.append(archive)
                name = f"{args.registry.rstrip('/')}/{definition.name}:{version}"
                push(name, archives, tls_verify=not args.no_tls_verify)
                print(f"image: pushed {', '.join(architectures)} as one list", file=sys.stderr)
                print(name)
    except BuildError as error:  # an ImageError, or a program that failed or hung
        print(f"image: {error}", file=sys.stderr)
        return error.code
    except (KeyboardInterrupt, workspace.Stopped) as stopped:
        return workspace.said_stop("image", stopped)
    return ExitCode.OK


if __name__ == "__main__":
    os.umask(0o022)
    workspace.stop_on_signals()
    sys.exit(main())
