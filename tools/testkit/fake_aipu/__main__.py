"""python -m testkit.fake_aipu fetch: put the files the driver-line map needs into the cache
(the pinned libnoe .deb of driver_pairs.yaml, the UAPI headers of zhouyi_lines.yaml that no
driver package builds), each from its repository at its pinned commit, verified by sha256.
The git source given for the driver package whose upstream is the file's repository
(UPSTREAM_GIT_AIPU_DKMS for aipu-dkms's, UPSTREAM_GIT_AIPU_COMPASS_DKMS for Arm China's; else
UPSTREAM_GIT) is tried before that repository itself.
Exit 0 when every file is cached, 1 otherwise (one line per missing file)."""

from __future__ import annotations

import sys

from pipeline.sources import git_source_for_repository
from testkit.zhouyi_uapi import PinnedFile, cache, pinned_files

from .fetch import fetch_blob


def _fetch(pinned: PinnedFile) -> bool:
    if pinned.cached() is not None:
        return True
    sources = [git_source_for_repository(pinned.repository), pinned.repository]
    try:
        content = fetch_blob(sources, pinned.commit, pinned.path, pinned.sha256)
    except RuntimeError as error:
        print(f"fake_aipu: {error}", file=sys.stderr)
        return False
    print(cache(pinned, content))
    return True


def main() -> int:
    if sys.argv[1:] != ["fetch"]:
        print("usage: python -m testkit.fake_aipu fetch", file=sys.stderr)
        return 2
    results = [_fetch(pinned) for pinned in pinned_files()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
