"""python -m testkit.fake_aipu fetch: put the files the driver-line map needs into the cache
(the pinned libnoe .deb of driver_pairs.yaml, the UAPI headers of zhouyi_lines.yaml that no
driver package builds), each from its repository at its pinned commit, verified by sha256.
UPSTREAM_GIT (a local clone or a URL) is tried before each file's own repository.
Exit 0 when every file is cached, 1 otherwise (one line per missing file)."""

from __future__ import annotations

import os
import sys

from testkit.zhouyi_uapi import PinnedFile, cache, pinned_files

from .fetch import fetch_blob


def _fetch(pinned: PinnedFile) -> bool:
    if pinned.cached() is not None:
        return True
    sources = [os.environ.get("UPSTREAM_GIT", ""), pinned.repository]
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
