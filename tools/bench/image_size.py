"""The size of each container image 'make image' builds, against its bound in images/<name>.yaml
(uncompressed, as a node stores it). A size is a count, not a time: the verdict is the same
whatever else the machine does. Images missing from dist/images are built first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.report import print_rows
from oci_image.definition import image_names, load
from pipeline.npuctl_package import npuctl_version

DIST = Path("dist")


def _summary(name: str, architecture: str) -> dict | None:
    path = DIST / "images" / f"{load(name).stem(npuctl_version(), architecture)}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _build(name: str, architecture: str) -> bool:
    command = [sys.executable, "-m", "oci_image", "--images", name]
    command += ["--architectures", architecture, "--dist", str(DIST), "build"]
    return subprocess.run(command, check=False).returncode == 0


def main() -> int:
    rows = []
    for name in image_names():
        definition = load(name)
        for architecture in definition.architectures:
            summary = _summary(name, architecture)
            if summary is None and _build(name, architecture):
                summary = _summary(name, architecture)
            if summary is None:
                print(f"image-size: {name} ({architecture}) could not be built", file=sys.stderr)
                return 1
            size = summary["uncompressed_bytes"] / 1e6
            print(
                f"image-size: {name} ({architecture}): {size:.0f} MB, "
                f"{summary['compressed_bytes'] / 1e6:.0f} MB compressed, "
                f"built from {(summary.get('revision') or 'an unrecorded revision')[:12]}"
            )
            limit = definition.size_limit_mb
            rows.append(
                {
                    "name": f"{name} image ({architecture})",
                    "ours": size,
                    "reference": float(limit),
                    "ratio": size / limit,
                    "target": f"<= {limit} MB",
                    "ok": size <= limit,
                    "unit": "MB uncompressed",
                }
            )
    return 0 if print_rows(rows, "image-size") else 1


if __name__ == "__main__":
    sys.exit(main())
