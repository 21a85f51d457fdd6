"""The size of each container image 'make image' built, against its bound in
images/<name>.yaml (uncompressed, as a node stores it). A size is a count, not a time: the
verdict is the same whatever else the machine does. This measures what dist/images holds and
builds nothing: an image that is not there is a row not run, with the command that makes it,
and no verdict (an image not built is not a benchmark this machine could not run: 'make bench'
on a fresh clone exits 0 when every other target is met)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import arm64_emulation
from bench.report import not_run, print_rows, status
from oci_image.definition import image_names, load
from oci_image.rootfs import HOST_ARCHITECTURES
from pipeline.npuctl_package import npuctl_version

BENCH = "image-size"
UNIT = "MB uncompressed"


def _absent(stem: str, architecture: str) -> str:
    reason = f"dist/images has no {stem} image: 'make deb image' builds it"
    foreign = HOST_ARCHITECTURES.get(platform.machine()) != architecture
    if foreign and (missing := arm64_emulation.missing()):
        reason += f" once {missing.line()}"
    return reason


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.image_size", description=__doc__)
    parser.add_argument("--dist", type=Path, default=Path("dist"))
    args = parser.parse_args(argv)
    rows = []
    version = npuctl_version()
    for name in image_names():
        definition = load(name)
        limit = definition.size_limit_mb
        for architecture in definition.architectures:
            row_name, target = f"{name} image ({architecture})", f"<= {limit} MB"
            stem = definition.stem(version, architecture)
            path = args.dist / "images" / f"{stem}.json"
            if not path.is_file():
                rows.append(not_run(row_name, UNIT, target, _absent(stem, architecture)))
                continue
            summary = json.loads(path.read_text(encoding="utf-8"))
            size = summary["uncompressed_bytes"] / 1e6
            print(
                f"image-size: {name} ({architecture}): {size:.0f} MB, "
                f"{summary['compressed_bytes'] / 1e6:.0f} MB compressed, "
                f"built from {(summary.get('revision') or 'an unrecorded revision')[:12]}"
            )
            rows.append(
                {
                    "name": row_name,
                    "ours": size,
                    "reference": float(limit),
                    "ratio": size / limit,
                    "target": target,
                    "ok": size <= limit,
                    "unit": UNIT,
                }
            )
    print_rows(rows, BENCH)
    return status([row for row in rows if "not_run" not in row])


if __name__ == "__main__":
    sys.exit(main())
