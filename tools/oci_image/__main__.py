"""make image: the container images of images/*.yaml for arm64 and amd64, from Debian's archive
and PyPI only, as OCI archives in dist/images; 'push' sends each image's architectures to a
registry under one name (a manifest list)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pipeline.errors import BuildError
from pipeline.npuctl_package import npuctl_version

from . import workspace
from .build import build, preflight
from .definition import ARCHITECTURES, image_names, load
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
    pushed = commands.add_parser("push", help="push the images in DIST/images to a registry")
    pushed.add_argument("--registry", required=True, help="host[:port][/path]")
    pushed.add_argument(
        "--no-tls-verify", action="store_true", help="plain HTTP (a registry on this machine)"
    )
    return parser


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        definitions = [load(name) for name in _list(args.images) or image_names()]
        wanted = _architectures(args.architectures)
        version = npuctl_version()
        if args.command == "build":
            preflight(
                [(d, a) for d in definitions for a in d.architectures if not wanted or a in wanted],
                args.dist,
            )
        for definition in definitions:
            architectures = [a for a in definition.architectures if not wanted or a in wanted]
            if args.command == "build":
                for architecture in architectures:
                    print(f"image: building {definition.name} ({architecture})", file=sys.stderr)
                    summary = build(definition, architecture, args.dist, args.work).summary()
                    print(
                        f"image: {summary['image']} ({architecture}) -> {summary['archive']}: "
                        f"{_megabytes(summary['uncompressed_bytes'])}, "
                        f"{_megabytes(summary['compressed_bytes'])} compressed",
                        file=sys.stderr,
                    )
                print(f"localhost/{definition.name}:{version}")  # for npuctl k8s render --image
            else:
                archives = []
                for architecture in architectures:
                    stem = definition.stem(version, architecture)
                    archive = args.dist / "images" / f"{stem}.oci.tar"
                    if not archive.is_file():
                        raise ImageError(
                            f"{archive} is missing: build it first ('make image')", ExitCode.INPUT
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
