"""python -m arm64_emulation check|ensure [--binfmt-dir DIR]: exit 0 when arm64 programs run
here as the arm64 targets need them; else one line (what is missing, the command that
supplies it) and exit 5. 'ensure' first does what root can do about it ('make deps' runs it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import BINFMT_DIR, ensure, missing

CANNOT = 5  # the same code as the image tool's "a tool or the arm64 emulation is missing"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="arm64_emulation", description=__doc__)
    parser.add_argument("action", choices=("check", "ensure"))
    parser.add_argument("--binfmt-dir", type=Path, default=BINFMT_DIR)
    parser.add_argument("--quiet", action="store_true", help="say only what is missing")
    args = parser.parse_args(argv)
    found = (ensure if args.action == "ensure" else missing)(args.binfmt_dir)
    if found is None:
        if not args.quiet:
            print("arm64 emulation: arm64 programs run here (binfmt_misc, qemu-aarch64, flag F)")
        return 0
    print(found.line(), file=sys.stderr)
    return CANNOT


if __name__ == "__main__":
    sys.exit(main())
