"""npuctl provision on an RK3588 board image: the exact apt lines in --dry-run, each action
applied once (idempotent), and --undo."""

from pathlib import Path

import pytest

from .rocket_board import RocketBoard
from .test_cli_run import one_line_error

# The files provision installs, as the project keeps them.
SITE_FILES = Path(__file__).resolve().parents[2] / "npuctl/src/npuctl/platforms/rocket/site-files"


@pytest.fixture
def image(tmp_path, teflon_double):
    image = RocketBoard(tmp_path / "root", teflon_double)
    image.write("etc/group", "root:x:0:\nrender:x:109:\n")
    image.write("etc/apt/sources.list", "deb http://deb.debian.org/debian trixie main\n")
    image.teflon_version("25.0.7-2")
    image.command("gpasswd", r'sed -i "s/^\($3:[^:]*:[^:]*:\)$/\1$2/" "$NPUCTL_ROOT/etc/group"')
    for name in ("apt-get", "python3"):
        image.command(name, f'echo "{name} $*" >> "$NPUCTL_ROOT/fixture/calls"')
    (image.root / "sys/module/rknpu").mkdir(parents=True)
    return image


def provision(rocket, image, *args):
    return rocket.npuctl(
        "provision",
        "--user",
        "opi",
        *args,
        extra_env={"NPUCTL_ROOT": str(image.root)},
    )


def calls(image):
    path = image.root / "fixture/calls"
    return path.read_text().splitlines() if path.exists() else []


ACTIONS = ("group", "backports", "teflon-pin", "teflon", "litert")


def only(*names):
    return [argument for name in names for argument in ("--only", name)]


def test_dry_run_shows_the_apt_lines_and_changes_nothing(rocket, image):
    result = provision(rocket, image, "--dry-run", *only(*ACTIONS))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[would do] teflon: install mesa-teflon-delegate: Mesa 26.2 from the project's" in out
    assert "    apt-get install -y mesa-teflon-delegate" in out
    assert "Pin: release n=trixie-backports" in out
    # Exactly three packages follow the project's trixie-teflon suite, nothing else.
    pinned = "Package: mesa-teflon-delegate libdrm2 libdrm-common\n        Pin: release n="
    assert pinned + "trixie-teflon" in out
    assert "Suites: trixie-backports" in out
    assert calls(image) == []
    assert not (image.root / "etc/apt/preferences.d").exists()


def test_apply_is_idempotent_and_undo_reverses(rocket, image):
    first = provision(rocket, image, *only(*ACTIONS))
    assert first.returncode == 0, first.stderr
    pin = image.root / "etc/apt/preferences.d/npuctl-teflon.pref"
    assert pin.read_bytes() == (SITE_FILES / "npuctl-teflon.pref").read_bytes()
    assert "Package: mesa-teflon-delegate" in pin.read_text()
    assert pin.stat().st_mode & 0o777 == 0o644
    source = image.root / "etc/apt/sources.list.d/npuctl-trixie-backports.sources"
    assert source.read_bytes() == (SITE_FILES / "npuctl-trixie-backports.sources").read_bytes()
    assert "render:x:109:opi" in (image.root / "etc/group").read_text()
    assert "apt-get install -y mesa-teflon-delegate" in calls(image)
    assert any(c.startswith("python3 -m pip install --quiet --target") for c in calls(image))

    image.teflon_version("26.2.6-1")  # what the install brought
    (image.root / "var/lib/npuctl/python/ai_edge_litert").mkdir(parents=True)
    again = provision(rocket, image, *only(*ACTIONS))
    assert again.returncode == 0, again.stderr
    assert all(line.startswith("[already]") for line in again.stdout.splitlines()), again.stdout

    undone = provision(rocket, image, "--undo", *only("backports", "teflon-pin", "litert"))
    assert undone.returncode == 0, undone.stderr
    assert not pin.exists() and not source.exists()
    assert not (image.root / "var/lib/npuctl/python").exists()


@pytest.mark.parametrize(
    ("installed", "candidate", "done"),
    [
        ("26.2.6-1", "26.2.6-1", True),  # the wanted release
        ("26.1.6-1~bpo13+1", "26.1.6-1~bpo13+1", True),  # nothing newer to be had here
        ("26.1.6-1~bpo13+1", "26.2.6-1", False),  # trixie-teflon pinned: the upgrade
        ("25.0.7-2", "26.1.6-1~bpo13+1", False),  # too old to drive rocket
    ],
)
def test_teflon_is_done_at_the_wanted_release_or_the_newest_to_be_had(
    rocket, image, installed, candidate, done
):
    image.teflon_version(installed)
    image.teflon_candidate(candidate)
    result = provision(rocket, image, "--dry-run", *only("teflon"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("[already] teflon" if done else "[would do] teflon"), result


def test_an_existing_backports_source_is_enough(rocket, image):
    image.write(
        "etc/apt/sources.list.d/debian-backports.sources",
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie-backports\n",
    )
    result = provision(rocket, image, "--dry-run", *only("backports"))
    assert result.stdout.startswith("[already] backports"), result.stdout


def test_the_vendor_driver_is_kept_out_by_the_package_not_an_action(rocket, image):
    """Every RK3588 board needs it, so rocket-dkms ships it (tests/test_rocket_package.py)."""
    result = provision(rocket, image, "--dry-run")
    assert result.returncode == 0, result.stderr
    actions = [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("[")]
    assert actions == [f"[would do] {name}" for name in (*ACTIONS, "models")]


def test_an_action_of_the_other_platform(rocket, image):
    line = one_line_error(provision(rocket, image, "--dry-run", "--only", "ld-path"), 2)
    assert "ld-path: not an action of rocket" in line
