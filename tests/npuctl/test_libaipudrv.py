"""npuctl driving the Zhouyi through Arm China's libaipudrv (the same API as libnoe's under
the prefix aipu_) as well as through libnoe: the CLI against the double built as each library,
and which of the two npuctl uses when none is named. (The doctor's verdicts on libaipudrv
are in test_doctor.py.)"""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path

import numpy as np

from npuctl.platforms.zhouyi.facts import DEFAULT_LIBRARY, LIBAIPUDRV_LIBRARY
from npuctl.platforms.zhouyi.user_space import installed_library


def _embeddings(board, library: Path) -> np.ndarray:
    result = board.npuctl(
        "run", "clip-text", "a photo of a cat", "--json", extra_env={"NPUCTL_LIBNOE": str(library)}
    )
    assert result.returncode == 0, result.stderr
    return np.array(json.loads(result.stdout)["embeddings"][0]["embedding"])


def test_run_answers_the_same_through_either_library(board, vocab_in, libaipudrv_double):
    board.clip_text()
    through_libnoe = _embeddings(board, board.library)
    through_libaipudrv = _embeddings(board, libaipudrv_double)
    np.testing.assert_array_equal(through_libnoe, through_libaipudrv)
    calls = board.calls()
    assert calls.count("deinit") == calls.count("init") >= 2
    # The second library has Arm China's names only: npuctl spoke its dialect.
    exported = ctypes.CDLL(str(libaipudrv_double))
    assert hasattr(exported, "aipu_finish_job") and not hasattr(exported, "noe_init_context")


def test_the_library_npuctl_uses_is_the_one_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUCTL_ROOT", str(tmp_path))

    def install(path: str) -> None:
        (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.lstrip("/")).write_bytes(b"")

    assert installed_library() == tmp_path / DEFAULT_LIBRARY.lstrip("/")  # nothing: libnoe's
    install(LIBAIPUDRV_LIBRARY)
    assert installed_library() == tmp_path / LIBAIPUDRV_LIBRARY.lstrip("/")  # libaipudrv alone
    install(DEFAULT_LIBRARY)
    assert installed_library() == tmp_path / DEFAULT_LIBRARY.lstrip("/")  # both: libnoe
    shutil.rmtree(tmp_path / "usr")


def test_the_library_version_is_learned_before_any_command(tmp_path, libaipudrv_double):
    from npuctl.errors import NpuError
    from npuctl.platforms.zhouyi.noe.binding import NoeLibrary

    assert NoeLibrary(libaipudrv_double).command("GET_VERSION") == 273
    unnamed = tmp_path / "libaipudrv.so"
    shutil.copyfile(libaipudrv_double.resolve(), unnamed)
    library = NoeLibrary(unnamed)
    assert library.version == ""
    try:
        library.command("GET_VERSION")
    except NpuError as refused:
        assert "libaipudrv 6.0, 6.1 only" in str(refused)
    else:
        raise AssertionError("a libaipudrv of unknown version was given a command number")
