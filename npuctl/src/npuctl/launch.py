"""The program's entry point. It imports nothing heavy itself, so a Ctrl-C while Python is
still importing npuctl's modules ends with one line and exit 130, not a traceback."""

from __future__ import annotations

import os
import sys
import warnings

INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    if not os.environ.get("NPUCTL_DEBUG"):
        # Library warnings (Pillow, numpy) are not for users: npuctl reports problems itself.
        warnings.simplefilter("ignore")
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("npuctl: interrupted\n")
        return INTERRUPTED
    return cli_main(argv)
