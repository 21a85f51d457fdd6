"""The System view of an image made without root: its inode table gives device nodes and
owners; a table that is not one is a one-line error."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from npuctl.errors import ExitCode, NpuctlError
from npuctl.system import INODE_TABLE, System

from .board_image import BoardImage


def test_the_inode_table_gives_type_owner_mode_and_device(tmp_path: Path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/aipu").write_text("")
    (tmp_path / INODE_TABLE).write_text(
        json.dumps(
            {"/dev/aipu": {"type": "char", "mode": "0660", "uid": 0, "gid": 109, "rdev": "10:123"}}
        )
    )
    system = System(tmp_path)
    info = system.stat("/dev/aipu")
    assert info is not None and stat.S_ISCHR(info.st_mode) and system.is_char_device("dev/aipu")
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o660, 0, 109)
    assert (os.major(info.st_rdev), os.minor(info.st_rdev)) == (10, 123)
    plain = system.stat("/dev")  # not in the table: the file's own
    assert plain is not None and stat.S_ISDIR(plain.st_mode)


def test_a_listed_file_that_is_absent_is_absent(tmp_path: Path):
    (tmp_path / INODE_TABLE).write_text(
        '{"/dev/aipu": {"type": "char", "mode": "0660", "uid": 0, "gid": 0}}'
    )
    assert System(tmp_path).stat("/dev/aipu") is None


def test_the_real_machine_never_reads_a_table():
    assert System(Path("/")).inode_table == {}


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        '["/dev/aipu"]',
        '{"/dev/aipu": {"type": "fifo", "mode": "0660", "uid": 0, "gid": 0}}',
        '{"/dev/aipu": {"type": "char", "mode": "rw", "uid": 0, "gid": 0}}',
        '{"/dev/aipu": {"type": "char", "mode": "0660", "uid": 0}}',
        '{"/dev/aipu": {"type": "char", "mode": "0660", "uid": 0, "gid": 0, "rdev": "10"}}',
    ],
)
def test_a_table_that_is_not_one_says_so(tmp_path: Path, text: str):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/aipu").write_text("")
    (tmp_path / INODE_TABLE).write_text(text)
    with pytest.raises(NpuctlError) as raised:
        System(tmp_path).stat("/dev/aipu")
    assert raised.value.code == ExitCode.USAGE
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / INODE_TABLE} is not an inode table")
    assert "\n" not in message and "fix it or remove it" in message


def test_doctor_on_an_image_with_a_bad_table_is_one_line(board, tmp_path: Path):
    image = BoardImage(tmp_path / "root")
    (image.root / INODE_TABLE).write_text("{not json")
    result = board.npuctl("doctor", extra_env={"NPUCTL_ROOT": str(image.root)})
    assert result.returncode == ExitCode.USAGE, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not an inode table" in lines[0], result.stderr
