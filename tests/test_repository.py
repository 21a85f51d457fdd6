"""make repo: the signed apt repository. Its signatures verify with the exported keyring,
bad input is one line and leaves the published repository untouched, and in a Debian chroot
apt installs from it, upgrades N -> N+1 (DKMS rebuilds), and refuses a repository signed by
another key or with a tampered index."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.npuctl_package import npuctl_version
from pipeline.repository import KEYRING_FILE

pytestmark = [pytest.mark.upstream, pytest.mark.leaves_a_core_idle]

ROOT = Path(__file__).resolve().parents[1]


def pipeline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=600,
    )


def make_repo(dist: Path, repo: Path, work: Path, *key: str) -> subprocess.CompletedProcess[str]:
    return pipeline("repo", "--dist", str(dist), "--repo", str(repo), "--work", str(work), *key)


@pytest.fixture(scope="module")
def dist(built_packages, config, tmp_path_factory) -> Path:
    """An upload set of aipu-dkms and npuctl, as 'make deb' leaves them."""
    from pipeline.npuctl_package import build_npuctl_package

    if shutil.which("aptly") is None:
        pytest.skip("aptly is not installed: run 'make deps'")
    folder = tmp_path_factory.mktemp("dist")
    for path in built_packages["changes"].parent.iterdir():
        shutil.copy(path, folder)
    build_npuctl_package(config, tmp_path_factory.mktemp("npuctl-build"), folder, lintian=False)
    return folder


@pytest.fixture(scope="module")
def published(dist, tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = make_repo(dist, site / "repo", site / "work")
    assert result.returncode == 0, result.stderr
    assert "THROWAWAY key made for testing" in result.stderr
    return site / "repo"


def test_the_release_files_verify_with_the_exported_keyring(published):
    keyring = published / KEYRING_FILE
    for codename in ("bookworm", "trixie", "sid"):
        folder = published / "dists" / codename
        assert (
            subprocess.run(
                ["gpgv", "--keyring", str(keyring), str(folder / "InRelease")], capture_output=True
            ).returncode
            == 0
        )
        assert (
            subprocess.run(
                [
                    "gpgv",
                    "--keyring",
                    str(keyring),
                    str(folder / "Release.gpg"),
                    str(folder / "Release"),
                ],
                capture_output=True,
            ).returncode
            == 0
        )


def test_the_indexes_hold_every_package_and_the_sources(published):
    packages = (published / "dists/trixie/main/binary-arm64/Packages").read_text()
    for name in ("aipu-dkms", "npuctl", "aipu-archive-keyring"):
        assert f"Package: {name}\n" in packages
    sources = subprocess.run(
        ["zcat", str(published / "dists/trixie/main/source/Sources.gz")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Package: aipu-dkms\n" in sources and "Package: npuctl\n" in sources
    release = (published / "dists/trixie/Release").read_text()
    assert "Architectures: all arm64\n" in release and "Codename: trixie\n" in release
    assert "Origin: aipu-dkms\n" in release
    every = (published / "dists/trixie/main/binary-all/Packages").read_text()
    assert "Package: aipu-dkms\n" in every and "Package: npuctl\n" in every
    assert (published / "aipu-archive-keyring_1_all.deb").exists()
    contents = subprocess.run(
        ["dpkg-deb", "-c", str(published / "aipu-archive-keyring_1_all.deb")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"./usr/share/keyrings/{KEYRING_FILE}" in contents
    lint = subprocess.run(
        [
            "lintian",
            "--fail-on",
            "error,warning",
            str(published / "aipu-archive-keyring_1_all.deb"),
        ],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout


def test_no_packages_is_one_line(tmp_path):
    (tmp_path / "dist").mkdir()
    result = make_repo(tmp_path / "dist", tmp_path / "repo", tmp_path / "work")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"pipeline: error: no packages in {tmp_path / 'dist'}: run 'make deb' first"
    )
    assert not (tmp_path / "repo").exists()


def test_a_key_that_cannot_sign(dist, tmp_path):
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    subprocess.run(
        [
            "gpg",
            "--homedir",
            str(home),
            "--batch",
            "--passphrase",
            "",
            "--faked-system-time",  # made in 2020 for one day: expired, it cannot sign
            "20200101T000000",
            "--quick-generate-key",
            "expired <e@invalid>",
            "ed25519",
            "sign",
            "1d",
        ],
        check=True,
        capture_output=True,
    )
    result = make_repo(dist, tmp_path / "repo", tmp_path / "work", "--gnupg-home", str(home))
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], check=False)
    assert result.returncode == 2
    assert "cannot sign" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "repo").exists()


def test_an_older_version_is_refused_and_the_published_repository_kept(dist, published, tmp_path):
    site = published.parent
    before = (published / "dists/trixie/InRelease").read_bytes()
    older = tmp_path / "older"
    older.mkdir()
    version = npuctl_version()
    for path in dist.glob("npuctl*"):  # the source and its binary packages
        text_like = path.suffix in (".changes", ".dsc", ".buildinfo")
        target = older / path.name
        if text_like:
            target.write_text(path.read_text().replace(version, "0.0.9"))
        else:
            shutil.copy(path, target)
    result = make_repo(older, published, site / "work")
    assert result.returncode == 2
    assert f"npuctl 0.0.9 is not newer than the published {version}" in result.stderr
    assert (published / "dists/trixie/InRelease").read_bytes() == before
    assert not [p for p in site.iterdir() if p.name.startswith(".repo")]


def _publisher(chroot):
    def publish(name: str, repo: Path) -> None:
        shutil.rmtree(chroot.path(f"/srv/{name}"), ignore_errors=True)
        shutil.copytree(repo, chroot.path(f"/srv/{name}"))

    return publish


def _sources(chroot):
    def sources(name: str, keyring: str) -> None:
        chroot.path("/etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
        chroot.path(f"/etc/apt/sources.list.d/{name}.sources").write_text(
            f"Types: deb\nURIs: file:/srv/{name}\nSuites: trixie\nComponents: main\n"
            f"Signed-By: {keyring}\n"
        )

    return sources


@pytest.mark.chroot
def test_apt_installs_upgrades_and_refuses_what_it_must(dist, config, upstream_tree, tmp_path):
    """In a trixie chroot with arm64 headers: install from the repository, upgrade to N+1,
    and apt's refusals of a foreign key and of a tampered index."""
    from kernel_lab import kernels
    from kernel_lab.chroot import create_chroot
    from kernel_lab.suites import SUITES
    from pipeline.package import build_packages

    from .conftest import require_chroot_support

    require_chroot_support()
    site = tmp_path / "site"
    assert make_repo(dist, site / "repo", site / "work").returncode == 0
    suite = SUITES["trixie"]
    chroot = create_chroot(suite, tmp_path / "chroot")
    with chroot.mounted():
        chroot.refresh_lists()
        kernel = kernels.resolve(chroot)
        kernels.install(chroot, kernel)

        publish, sources = _publisher(chroot), _sources(chroot)

        publish("aipu", site / "repo")
        chroot.copy_in(site / "repo" / KEYRING_FILE, f"/usr/share/keyrings/{KEYRING_FILE}")
        sources("aipu", f"/usr/share/keyrings/{KEYRING_FILE}")
        chroot.run("apt-get update -q")
        chroot.run("apt-get install -y -q --no-install-recommends aipu-dkms npuctl")
        status = chroot.run("dkms status -m aipu").stdout
        assert f"aipu/{config.version}, {kernel.release}" in status and "installed" in status

        following = config.with_local_suffix("lab1")
        next_dist = tmp_path / "next"
        build_packages(following, upstream_tree, tmp_path / "next-build", next_dist, lintian=False)
        assert make_repo(next_dist, site / "repo", site / "work").returncode == 0
        publish("aipu", site / "repo")
        chroot.run("apt-get update -q")
        chroot.run("apt-get upgrade -y -q")
        status = chroot.run("dkms status -m aipu").stdout
        assert f"aipu/{following.version}, {kernel.release}" in status, status
        assert f"aipu/{config.version}," not in status, status

        other = tmp_path / "other"
        assert make_repo(dist, other / "repo", other / "work").returncode == 0
        publish("foreign", other / "repo")
        sources("foreign", f"/usr/share/keyrings/{KEYRING_FILE}")
        refused = chroot.run("apt-get update -q", check=False)
        assert "NO_PUBKEY" in refused.stdout + refused.stderr or (
            "not signed" in refused.stdout + refused.stderr
        ), refused.stdout + refused.stderr
        chroot.path("/etc/apt/sources.list.d/foreign.sources").unlink()

        tampered = tmp_path / "tampered"
        shutil.copytree(site / "repo", tampered)
        index = tampered / "dists/trixie/main/binary-arm64/Packages"
        index.write_text(index.read_text().replace("Priority: optional", "Priority: required"))
        (tampered / "dists/trixie/main/binary-arm64/Packages.gz").unlink()
        publish("aipu", tampered)
        chroot.run("rm -rf /var/lib/apt/lists/_srv_aipu_*")
        broken = chroot.run("apt-get update -q", check=False)
        words = broken.stdout + broken.stderr
        assert "Hash Sum mismatch" in words or "unexpected size" in words, words
