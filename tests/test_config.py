import re
import subprocess
from pathlib import Path

import pytest

from pipeline.config import DKMS_DIR as REPO_DKMS
from pipeline.config import config_path, kernel_min_regex, load_config
from pipeline.errors import BuildError, ExitCode


def test_version_records_upstream_snapshot(config):
    assert config.version == "5.11.0+git20251022.66bfa0e"
    assert config.debian_version == "5.11.0+git20251022.66bfa0e-1"
    assert config.upstream.commit.startswith(config.version.rsplit(".", 1)[1])


def test_debian_version_compares_above_plain_upstream_version(config):
    # A user coming from Orange Pi's aipu 5.11.0 gets a newer version, not an older one.
    result = subprocess.run(
        ["dpkg", "--compare-versions", config.debian_version, "gt", "5.11.0-1"], check=False
    )
    assert result.returncode == 0


@pytest.mark.parametrize(
    ("release", "supported"),
    [
        ("6.1.0-56-arm64", True),
        ("6.1.192", True),
        ("6.6.89-cix", True),
        ("6.12.117+deb13-arm64", True),
        ("6.18.9-current-arm64", True),
        ("7.3.4+bpo-arm64", True),
        ("10.0.1", True),
        ("6.0.12-arm64", False),
        ("5.15.0-91-generic", False),
        ("5.10.0-30-arm64", False),
        ("4.19.0", False),
    ],
)
def test_kernel_gate_regex_matches_releases_from_minimum(release, supported):
    pattern = kernel_min_regex("6.1")
    # dkms tests it with bash's =~ (POSIX ERE); Python's re agrees on this subset.
    assert bool(re.search(pattern, release)) is supported
    bash = subprocess.run(["bash", "-c", f'[[ "{release}" =~ {pattern} ]]'], check=False)
    assert (bash.returncode == 0) is supported


@pytest.mark.parametrize("minimum", ["6.10", "5.4", "12.0"])
def test_kernel_gate_regex_boundaries(minimum):
    major, minor = (int(part) for part in minimum.split("."))
    pattern = kernel_min_regex(minimum)
    assert re.search(pattern, f"{major}.{minor}.0")
    assert re.search(pattern, f"{major}.{minor + 1}.3")
    assert re.search(pattern, f"{major + 1}.0.0")
    if minor:
        assert not re.search(pattern, f"{major}.{minor - 1}.9")
    assert not re.search(pattern, f"{major - 1}.99.0")


def test_bad_kernel_minimum_is_one_clear_error():
    with pytest.raises(BuildError) as raised:
        kernel_min_regex("6")
    assert raised.value.code == ExitCode.USAGE
    assert "MAJOR.MINOR" in str(raised.value)


def _scratch_description(tmp_path: Path) -> Path:
    """Where a copy of a description finds its soc and board files as in the tree."""
    (tmp_path / "dkms").mkdir()
    (tmp_path / "dkms" / "socs").symlink_to(REPO_DKMS / "socs")
    (tmp_path / "provision").symlink_to(REPO_DKMS.parent / "provision")
    return tmp_path / "dkms" / "package.yaml"


def test_missing_key_names_the_key(tmp_path: Path):
    text = Path(config_path("aipu-dkms")).read_text(encoding="utf-8")
    broken = _scratch_description(tmp_path)
    broken.write_text(re.sub(r"(?m)^  module: .*\n", "", text), encoding="utf-8")
    with pytest.raises(BuildError) as raised:
        load_config(broken)
    assert raised.value.code == ExitCode.USAGE
    assert "package.module" in str(raised.value)


def test_invalid_commit_is_rejected(tmp_path: Path):
    text = Path(config_path("aipu-dkms")).read_text(encoding="utf-8")
    broken = _scratch_description(tmp_path)
    broken.write_text(re.sub(r"commit: [0-9a-f]{40}", "commit: main", text), encoding="utf-8")
    with pytest.raises(BuildError, match=r"upstream\.commit"):
        load_config(broken)
