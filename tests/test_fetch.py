"""The fetch step against upstream copies the tests make themselves (no network)."""

import dataclasses
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pipeline import fetch
from pipeline.errors import BuildError, ExitCode

from .conftest import run

SUBTREE = "cix_opensource/npu/npu_driver/driver"


def _git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def fake_upstream(tmp_path: Path, config):
    """A git repository shaped like upstream: the driver subtree plus unrelated files."""
    repo = tmp_path / "upstream.git-work"
    driver = repo / SUBTREE
    (driver / "armchina-npu").mkdir(parents=True)
    (driver / "armchina-npu" / "aipu.c").write_text("int x;\n", encoding="utf-8")
    (driver / "Makefile").write_text("obj-m := aipu.o\n", encoding="utf-8")
    script = driver / "build.sh"
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    script.chmod(0o755)
    (repo / "huge-unrelated.bin").write_bytes(b"\0" * 4096)
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "snapshot", cwd=repo)
    commit = _git("rev-parse", "HEAD", cwd=repo)
    tree_id = _git("rev-parse", f"HEAD:{SUBTREE}", cwd=repo)
    pinned = dataclasses.replace(
        config,
        upstream=dataclasses.replace(
            config.upstream, commit=commit, tree_id=tree_id, paths=(SUBTREE,)
        ),
    )
    return repo, pinned


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AIPU_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_tree_id_matches_git_for_any_copy(fake_upstream, tmp_path):
    repo, pinned = fake_upstream
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo / SUBTREE), str(copy)], check=True)
    assert fetch.git_tree_id(copy) == pinned.upstream.tree_id
    (copy / "build.sh").chmod(0o644)  # a mode change is a content change
    assert fetch.git_tree_id(copy) != pinned.upstream.tree_id


def test_fetch_from_local_clone_caches_only_the_subtree(fake_upstream, private_cache):
    repo, pinned = fake_upstream
    tree = fetch.fetch_upstream(pinned, git_source=str(repo))
    assert tree == private_cache / "upstream" / pinned.upstream.tree_id
    assert (tree / "armchina-npu" / "aipu.c").read_text(encoding="utf-8") == "int x;\n"
    assert not (tree / "huge-unrelated.bin").exists()
    assert sorted(p.name for p in (private_cache / "upstream").iterdir()) == [
        pinned.upstream.tree_id
    ]


def test_cached_tree_is_used_offline(fake_upstream):
    repo, pinned = fake_upstream
    first = fetch.fetch_upstream(pinned, git_source=str(repo))
    again = fetch.fetch_upstream(pinned, git_source="/nonexistent/clone")
    assert again == first


def test_tampered_cache_is_not_trusted(fake_upstream):
    repo, pinned = fake_upstream
    tree = fetch.fetch_upstream(pinned, git_source=str(repo))
    (tree / "Makefile").write_text("tampered\n", encoding="utf-8")
    assert fetch.find_upstream(pinned) is None
    refetched = fetch.fetch_upstream(pinned, git_source=str(repo))
    assert (refetched / "Makefile").read_text(encoding="utf-8") == "obj-m := aipu.o\n"


def test_wrong_tree_id_is_refused_and_nothing_cached(fake_upstream, private_cache):
    repo, pinned = fake_upstream
    wrong = dataclasses.replace(
        pinned, upstream=dataclasses.replace(pinned.upstream, tree_id="0" * 40)
    )
    with pytest.raises(BuildError) as raised:
        fetch.fetch_upstream(wrong, git_source=str(repo))
    assert raised.value.code == ExitCode.VERIFY
    assert "nothing was cached" in str(raised.value)
    assert list((private_cache / "upstream").iterdir()) == []


def test_unreachable_upstream_is_one_clear_error(fake_upstream, private_cache, tmp_path):
    _, pinned = fake_upstream
    empty = tmp_path / "empty-repo"
    empty.mkdir()
    _git("init", "-q", cwd=empty)
    with pytest.raises(BuildError) as raised:
        fetch.fetch_upstream(pinned, git_source=str(empty))
    assert raised.value.code == ExitCode.UPSTREAM
    assert "UPSTREAM_GIT" in str(raised.value)
    assert list((private_cache / "upstream").iterdir()) == []


def test_missing_local_clone_says_so(fake_upstream):
    _, pinned = fake_upstream
    with pytest.raises(BuildError, match="does not exist") as raised:
        fetch.fetch_upstream(pinned, git_source="/nonexistent/clone")
    assert raised.value.code == ExitCode.UPSTREAM


@pytest.mark.parametrize("layout", ["full-path", "top-folder", "root"])
def test_fetch_from_tarball(fake_upstream, tmp_path, layout):
    repo, pinned = fake_upstream
    tarball = tmp_path / "driver.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        if layout == "full-path":
            archive.add(repo / SUBTREE, arcname=SUBTREE)
        elif layout == "top-folder":
            archive.add(repo / SUBTREE, arcname="driver-snapshot")
        else:
            for child in (repo / SUBTREE).iterdir():
                archive.add(child, arcname=child.name)
    tree = fetch.fetch_upstream(pinned, tarball=tarball)
    assert fetch.git_tree_id(tree) == pinned.upstream.tree_id


def test_tarball_without_driver_is_refused(fake_upstream, tmp_path):
    _, pinned = fake_upstream
    tarball = tmp_path / "other.tar"
    other = tmp_path / "other"
    other.mkdir()
    (other / "README").write_text("x", encoding="utf-8")
    with tarfile.open(tarball, "w") as archive:
        archive.add(other, arcname="other")
    with pytest.raises(BuildError, match="no driver subtree") as raised:
        fetch.fetch_upstream(pinned, tarball=tarball)
    assert raised.value.code == ExitCode.UPSTREAM


def test_cli_reports_one_line_and_exit_code(tmp_path, private_cache):
    result = run(
        sys.executable,
        "-m",
        "pipeline",
        "fetch",
        env={
            **os.environ,
            "UPSTREAM_GIT": str(tmp_path / "missing"),
            "AIPU_CACHE": str(private_cache),
        },
    )
    assert result.returncode == ExitCode.UPSTREAM
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("pipeline: error: UPSTREAM_GIT=")
    assert "Traceback" not in result.stderr


def test_exit_codes_of_the_build_tool_and_of_make(tmp_path):
    """The build tool's code is kept by 'python -m pipeline'; make turns every failure into
    2 (README: exit codes of the build tool)."""
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "AIPU_CACHE": str(tmp_path / "cache"),
        "UPSTREAM_GIT": str(tmp_path / "no-such-clone"),
    }
    direct = subprocess.run(
        [sys.executable, "-m", "pipeline", "fetch"], capture_output=True, text=True, env=env
    )
    assert direct.returncode == 4, direct.stderr
    assert direct.stderr.startswith("pipeline: error: ")
    through_make = subprocess.run(
        ["make", "--no-print-directory", "-C", str(root), "fetch"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert through_make.returncode == 2
    assert "pipeline: error: " in through_make.stderr


def test_each_package_takes_its_own_upstream_variable(monkeypatch):
    """Three packages, three upstreams: UPSTREAM_GIT_<PACKAGE> names one package's copy, and
    the plain UPSTREAM_GIT serves only the packages that name none of their own."""
    from pipeline import sources

    monkeypatch.setenv("UPSTREAM_GIT", "/clones/generic")
    monkeypatch.setenv("UPSTREAM_GIT_AIPU_COMPASS_DKMS", "/clones/compass")
    monkeypatch.setenv("UPSTREAM_TARBALL_ROCKET_DKMS", "/tarballs/linux.tar.xz")
    assert sources.git_source("aipu-compass-dkms") == (
        "UPSTREAM_GIT_AIPU_COMPASS_DKMS",
        "/clones/compass",
    )
    assert sources.git_source("aipu-dkms") == ("UPSTREAM_GIT", "/clones/generic")
    assert sources.tarball("rocket-dkms") == (
        "UPSTREAM_TARBALL_ROCKET_DKMS",
        Path("/tarballs/linux.tar.xz"),
    )
    assert sources.tarball("aipu-dkms") is None
    # The driver-line tests' pinned files: through the package whose upstream they come from.
    compass = "https://github.com/Arm-China/Compass_NPU_Driver.git"
    assert sources.git_source_for_repository(compass) == "/clones/compass"
    assert sources.git_source_for_repository("https://example.org/other.git") == "/clones/generic"


def test_a_packages_own_variable_is_the_one_an_error_names(tmp_path, private_cache):
    result = run(
        sys.executable,
        "-m",
        "pipeline",
        "--package",
        "aipu-compass-dkms",
        "fetch",
        env={
            **os.environ,
            "UPSTREAM_GIT": str(tmp_path / "generic"),
            "UPSTREAM_GIT_AIPU_COMPASS_DKMS": str(tmp_path / "missing"),
            "AIPU_CACHE": str(private_cache),
        },
    )
    assert result.returncode == ExitCode.UPSTREAM
    assert result.stderr.startswith(
        f"pipeline: error: UPSTREAM_GIT_AIPU_COMPASS_DKMS={tmp_path / 'missing'} does not exist"
    ), result.stderr
