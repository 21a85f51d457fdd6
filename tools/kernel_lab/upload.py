"""A Debian upload set: a .changes file and every file it names, all beside it."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.errors import BuildError, ExitCode


def upload_set(changes: Path) -> list[Path]:
    """The .changes and every file it names (as dcmd lists them); all must be beside it. A
    .deb given instead is a binary package built on its own (no source upload): itself."""
    if changes.suffix == ".deb":
        return [changes]
    names = re.findall(r"^ [0-9a-f]{32} \d+ \S+ \S+ (\S+)$", changes.read_text(), re.MULTILINE)
    files = [changes, *(changes.parent / name for name in names)]
    missing = [path.name for path in files if not path.exists()]
    if missing:
        raise BuildError(
            f"{changes.name} names {', '.join(missing)}, which is not beside it: "
            "the upload set is incomplete",
            ExitCode.BUILD,
        )
    return files
