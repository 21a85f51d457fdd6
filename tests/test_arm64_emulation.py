"""make deps leaves arm64 emulation working wherever it can (tools/arm64_emulation).

Each scenario runs in a user namespace with a binfmt_misc of its own (Linux 6.7 and newer
give one to each user namespace that mounts it): the machine's own emulation is neither read
nor changed, and a state the scenario sets up (unmounted, switched off, entry missing,
disabled, registered without flag F) is what the step finds."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from oci_image import definition
from pipeline.npuctl_package import npuctl_version

REPO = Path(__file__).resolve().parents[1]
BINFMT = "/proc/sys/fs/binfmt_misc"
ENTRY = f"{BINFMT}/qemu-aarch64"
STEP = f"{shlex.quote(sys.executable)} -m arm64_emulation"
# A fresh binfmt_misc of the namespace's own; the scenario's set-up follows.
OWN_INSTANCE = f"mount -t binfmt_misc binfmt_misc {BINFMT}"
# The entry as Debian's qemu-user-static describes it, registered without flag F.
WITHOUT_F = (
    r"printf '%s' ':qemu-aarch64:M:0:\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00"
    r"\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff"
    rf"\xfe\xff\xff\xff:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:P' > {BINFMT}/register"
)
# What an unprivileged container is: no capability to mount.
NO_MOUNT = "setpriv --bounding-set -sys_admin --inh-caps -sys_admin"


def in_namespace(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-euc", script],
        capture_output=True,
        text=True,
        cwd=REPO / "tools",
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module", autouse=True)
def scratch_binfmt_misc() -> None:
    if not Path("/usr/share/binfmts/qemu-aarch64").is_file():
        pytest.skip("qemu-user-static is not installed: run 'make deps'")
    for tool in ("unshare", "setpriv", "update-binfmts"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is needed: run 'make deps'")
    probe = in_namespace(OWN_INSTANCE)
    if probe.returncode != 0:
        pytest.skip(
            "this kernel gives a user namespace no binfmt_misc of its own (Linux 6.7 and "
            f"newer do): {probe.stderr.strip()}"
        )


def entry_after(setup: str, *, step: str = "ensure") -> tuple[subprocess.CompletedProcess, str]:
    """Run the set-up, then the step; the entry's text (or 'absent') afterwards. The step's
    own output stays in the result's stdout, before a line '=='."""
    script = (
        f"{setup}\n{STEP} {step} && status=0 || status=$?\n"
        f"echo ==\ncat {ENTRY} 2>/dev/null || echo absent\nexit $status"
    )
    result = in_namespace(script)
    said, _, entry = result.stdout.rpartition("==\n")
    result.stdout = said
    return result, entry


def assert_working(result: subprocess.CompletedProcess[str], entry: str) -> None:
    assert result.returncode == 0, result.stderr
    assert entry.splitlines()[0] == "enabled"
    assert "F" in next(line for line in entry.splitlines() if line.startswith("flags:"))
    assert "arm64 programs run here" in result.stdout


def test_unmounted_binfmt_misc_is_mounted_and_the_entry_enabled():
    # A tmpfs over the namespace's own instance: the folder is there, nothing is mounted.
    result, entry = entry_after(f"{OWN_INSTANCE}\nmount -t tmpfs none {BINFMT}")
    assert_working(result, entry)


def test_a_missing_entry_is_registered_with_flag_f():
    result, entry = entry_after(OWN_INSTANCE)
    assert_working(result, entry)


def test_a_disabled_entry_is_enabled():
    # update-binfmts --enable leaves a disabled entry disabled ("already enabled in kernel").
    result, entry = entry_after(
        f"{OWN_INSTANCE}\nupdate-binfmts --enable qemu-aarch64\necho 0 > {ENTRY}"
    )
    assert_working(result, entry)


def test_an_entry_without_flag_f_is_registered_again_with_it():
    result, entry = entry_after(f"{OWN_INSTANCE}\n{WITHOUT_F}")
    assert_working(result, entry)


def test_binfmt_misc_switched_off_is_switched_on():
    result, entry = entry_after(
        f"{OWN_INSTANCE}\nupdate-binfmts --enable qemu-aarch64\necho 0 > {BINFMT}/status"
    )
    assert_working(result, entry)


def test_working_emulation_is_left_as_it_is():
    # Registered by hand with flags F and P: a rewrite by the step would change the text.
    with_f = WITHOUT_F.replace(":P'", ":FP'")
    result = in_namespace(
        f"{OWN_INSTANCE}\n{with_f}\nbefore=$(cat {ENTRY})\n{STEP} ensure\n"
        f'[ "$before" = "$(cat {ENTRY})" ] && echo same'
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "same"


def test_each_missing_piece_is_named_with_its_command_by_check():
    cases = {
        f"{OWN_INSTANCE}\nmount -t tmpfs none {BINFMT}": (
            f"binfmt_misc is not mounted at {BINFMT}: mount -t binfmt_misc binfmt_misc {BINFMT}"
            " && update-binfmts --enable qemu-aarch64"
        ),
        OWN_INSTANCE: "qemu-aarch64 is not registered with binfmt_misc: "
        "update-binfmts --enable qemu-aarch64",
        f"{OWN_INSTANCE}\nupdate-binfmts --enable qemu-aarch64\necho 0 > {ENTRY}": (
            f"qemu-aarch64 is disabled in binfmt_misc: echo 1 | tee {ENTRY}"
        ),
        f"{OWN_INSTANCE}\n{WITHOUT_F}": "qemu-aarch64 is registered without flag F",
    }
    for setup, said in cases.items():
        result, _ = entry_after(setup, step="check")
        assert result.returncode == 5, setup
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("arm64 emulation: "), result.stderr
        assert said in lines[0], (setup, lines[0])


def test_where_binfmt_misc_cannot_be_mounted_one_line_gives_the_host_command():
    setup = f"{OWN_INSTANCE}\nmount -t tmpfs none {BINFMT}"
    mounted, _ = entry_after(setup, step="ensure")
    assert mounted.returncode == 0  # the control: root in its namespace mounts it
    script = f"{setup}\nexec {NO_MOUNT} {STEP} ensure"
    refused = in_namespace(script)
    assert refused.returncode == 5
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "binfmt_misc cannot be mounted here" in lines[0]
    assert lines[0].endswith(
        f"on the host: sudo apt-get install qemu-user-static binfmt-support && "
        f"sudo mount -t binfmt_misc binfmt_misc {BINFMT} && "
        "sudo update-binfmts --enable qemu-aarch64"
    )
    assert "Traceback" not in refused.stderr


def test_the_image_tool_stops_with_the_same_line(tmp_path: Path):
    """A target that needs emulation says what 'check' says, before it builds anything."""
    version = npuctl_version()
    for name in definition.load("npuctl").debs:  # present, so emulation is what stops it
        (tmp_path / f"{name}_{version}_all.deb").write_bytes(b"")
    setup = f"{OWN_INSTANCE}\nmount -t tmpfs none {BINFMT}"
    checked = in_namespace(f"{setup}\nexec {STEP} check")
    work = tmp_path / "w"
    image = in_namespace(
        f"{setup}\ncd {REPO}\nexec {shlex.quote(sys.executable)} -m oci_image --dist "
        f"{tmp_path} --images npuctl --architectures arm64 build --work {work}"
    )
    assert checked.returncode == 5
    assert image.returncode == 5, image.stderr
    assert image.stderr.strip() == f"image: {checked.stderr.strip()}"
    assert not work.exists() or not any(work.iterdir())
