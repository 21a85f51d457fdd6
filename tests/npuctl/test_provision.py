"""npuctl provision against a board image: each action applied, idempotent, dry-run, undo."""

import subprocess
from pathlib import Path

import pytest
import yaml

from .board_image import BoardImage
from .test_cli_run import one_line_error
from .test_models import MODEL_BYTES, VOCAB_BYTES, Server

# The files provision installs, as the project keeps them.
SITE_FILES = Path(__file__).resolve().parents[2] / "npuctl/src/npuctl/platforms/zhouyi/site-files"


@pytest.fixture
def image(tmp_path):
    image = BoardImage(tmp_path / "root")
    image.write("sys/bus/platform/devices/CIXH4000:00/power/control", "auto")
    # gpasswd edits the image's /etc/group; the others record how they were called
    image.command(
        "gpasswd",
        r"""f="$NPUCTL_ROOT/etc/group"
case "$1" in
  -a) sed -i "s/^\($3:[^:]*:[^:]*:\)\(.*\)$/\1\2,$2/; s/:,/:/" "$f";;
  -d) sed -i "s/^\($3:[^:]*:[^:]*:\)\(.*\)$/\1\2/; /^$3:/s/\(:\|,\)$2\(,\|$\)/\1/; s/,$//" "$f";;
esac""",
    )
    for name in ("ldconfig", "apt-get"):
        image.command(name, f'echo "{name} $*" >> "$NPUCTL_ROOT/fixture/calls"')
    image.command("dpkg-query", 'cat "$NPUCTL_ROOT/fixture/umd-status" 2>/dev/null || exit 1')
    image.write("etc/group", "root:x:0:\nrender:x:109:\n")
    return image


@pytest.fixture
def hub(board, tmp_path):
    serving = Server({"model.cix": MODEL_BYTES, "vocab.gz": VOCAB_BYTES})
    manifest = {
        "schema": 1,
        "platform": "zhouyi",
        "models": {
            "clip-text": {
                "file": "clip_txt.cix",
                "url": serving.url("model.cix"),
                "sha256": None,
                "needs": ["clip-bpe-vocab"],
            }
        },
        "assets": {
            "clip-bpe-vocab": {"file": "bpe.txt.gz", "url": serving.url("vocab.gz"), "sha256": None}
        },
    }
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(manifest))
    board.env["NPUCTL_MANIFEST"] = str(path)
    yield serving
    serving.close()


def provision(board, image, *args, env=None):
    return board.npuctl(
        "provision",
        "--user",
        "opi",
        *args,
        extra_env={"NPUCTL_ROOT": str(image.root), **(env or {})},
    )


def calls(image):
    path = image.root / "fixture" / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_dry_run_changes_nothing(board, image, hub):
    before = (image.root / "etc/group").read_text()
    result = provision(board, image, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("[would do]") == 2
    assert (image.root / "etc/group").read_text() == before
    assert not list(board.models.iterdir())


def test_provision_then_again_then_undo(board, image, hub):
    first = provision(board, image)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("[done]") == 2
    assert "render:x:109:opi" in (image.root / "etc/group").read_text()
    assert (board.models / "clip_txt.cix").read_bytes() == MODEL_BYTES

    again = provision(board, image)
    assert again.returncode == 0 and again.stdout.count("[already]") == 2

    undone = provision(board, image, "--undo")
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.count("[undone]") == 2
    assert "render:x:109:\n" in (image.root / "etc/group").read_text()
    assert not board.models.exists()


def test_linker_path_is_an_explicit_action(board, image):
    result = provision(board, image, "--only", "ld-path")
    assert result.returncode == 0, result.stderr
    conf = image.root / "etc/ld.so.conf.d/cix-noe.conf"
    assert conf.read_bytes() == (SITE_FILES / "cix-noe.conf").read_bytes()
    assert conf.stat().st_mode & 0o777 == 0o644
    assert calls(image) == ["ldconfig "]
    provision(board, image, "--only", "ld-path", "--undo")
    assert not conf.exists()


def _vendor_deb(tmp_path):
    root = tmp_path / "umd"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "usr/share/cix/lib").mkdir(parents=True)
    (root / "usr/share/cix/lib/libnoe.so").write_text("not really a library")
    (root / "DEBIAN/control").write_text(
        "Package: cix-noe-umd\nVersion: 2.0.2\nArchitecture: arm64\nMaintainer: x <x@x>\n"
        "Description: test stand-in\n"
    )
    postinst = root / "DEBIAN/postinst"
    postinst.write_text(
        "#!/bin/sh\nset -e\nldconfig\npip3 install /usr/share/cix/pypi/*.whl\n"
        "python3 -m pip install NOE_Engine\n"
    )
    postinst.chmod(0o755)
    deb = tmp_path / "cix-noe-umd_2.0.2_arm64.deb"
    subprocess.run(["dpkg-deb", "-b", str(root), str(deb)], check=True, capture_output=True)
    return deb


def test_vendor_umd_is_installed_without_its_pip_postinst(board, image, tmp_path):
    deb = _vendor_deb(tmp_path)
    result = provision(board, image, "--only", "umd", "--umd-deb", str(deb))
    assert result.returncode == 0, result.stderr
    [call] = calls(image)
    assert call.startswith("apt-get install -y ")
    repacked = call.split()[-1]
    extracted = tmp_path / "x"
    subprocess.run(["dpkg-deb", "-e", repacked, str(extracted)], check=True)
    postinst = (extracted / "postinst").read_text()
    assert "ldconfig" in postinst
    assert not [
        line
        for line in postinst.splitlines()
        if "pip" in line and not line.startswith(": # removed")
    ]


def test_not_a_vendor_deb(board, image, tmp_path):
    bogus = tmp_path / "bogus.deb"
    bogus.write_text("no")
    result = provision(board, image, "--only", "umd", "--umd-deb", str(bogus))
    assert "not a Debian package" in one_line_error(result, 3)


def test_dry_run_for_a_platform_this_machine_lacks_warns(board, tmp_path):
    empty = BoardImage(tmp_path / "not-a-board")
    empty.remove("sys/bus/acpi/devices/CIXH4000:00")
    result = provision(board, empty, "--dry-run", env={"NPUCTL_PLATFORM": "zhouyi"})
    assert result.returncode == 0, result.stderr
    assert "[would do]" in result.stdout
    (warning,) = result.stderr.strip().splitlines()
    assert warning.startswith("npuctl: warning: no Zhouyi NPU")
    assert "no CIXH4000 ACPI device" in warning
    assert "of no use on this machine" in warning


def test_provision_without_an_npu_asks_which_platform(board, tmp_path):
    empty = BoardImage(tmp_path / "not-a-board")
    empty.remove("sys/bus/acpi/devices/CIXH4000:00")
    line = one_line_error(provision(board, empty, "--dry-run"), 2)
    assert "no supported NPU on this machine: pass --platform (zhouyi, rocket)" in line


def test_every_written_file_is_recorded_for_the_packages_purge(board, image):
    """Provision records each file it writes with its checksum, in sha256sum's format, where
    npuctl's postrm reads it on purge (the file it still finds as written goes); --undo
    forgets it again."""
    from npuctl.provision.site_files import RECORD

    postrm = Path(__file__).resolve().parents[2] / "debian/npuctl/npuctl.postrm"
    assert f"RECORD={RECORD}\n" in postrm.read_text()
    result = provision(board, image, "--only", "ld-path")
    assert result.returncode == 0, result.stderr
    record = image.root / RECORD.lstrip("/")
    lines = record.read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == ["/etc/ld.so.conf.d/cix-noe.conf"]
    relative = "".join(line.replace("  /", "  ", 1) + "\n" for line in lines)
    check = subprocess.run(
        ["sha256sum", "--check", "--strict", "-"],
        input=relative, cwd=image.root, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    provision(board, image, "--only", "ld-path", "--undo")
    assert not record.exists()
