"""Shared fixtures. Tests that need the upstream driver tree or Debian chroots skip with the
reason and the command that makes them run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.config import Config, load_package
from pipeline.fetch import cache_root, find_upstream

from .idle_core import MARKER, Beside, last

ARM64_IMAGE_TEST = "test_the_arm64_image_runs_npuctl_under_emulation"
BESIDE = pytest.StashKey["Beside | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--beside-idle-core",
        metavar="COMMAND",
        help="run COMMAND beside the tests that leave a core idle (tests/idle_core.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    command = config.getoption("--beside-idle-core")
    config.stash[BESIDE] = Beside(command) if command else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    last(items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    beside = item.config.stash.get(BESIDE, None)
    if beside is not None and item.get_closest_marker(MARKER) is not None:
        beside.start()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    beside = session.config.stash.get(BESIDE, None)
    if beside is None:
        return
    code = beside.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if code and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@dataclass
class ImageBuild:
    """An image build running beside the tests: ``dist`` receives the images."""

    process: subprocess.Popen[bytes]
    dist: Path
    log: Path

    def result(self) -> tuple[int, str]:
        code = self.process.wait()
        return code, self.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="session", autouse=True)
def arm64_image_build(request, tmp_path_factory) -> Iterator[ImageBuild | None]:
    """The arm64 image takes minutes under qemu, on one core: when its test is among those
    collected, its build starts with the session and runs beside the other tests (its test
    takes the result, or builds it itself where this could not start it)."""
    wanted = any(item.name == ARM64_IMAGE_TEST for item in request.session.items)
    if not wanted or os.geteuid() != 0 or not shutil.which("mmdebstrap"):
        yield None
        return
    import arm64_emulation

    if arm64_emulation.missing():
        yield None
        return
    try:
        debs = request.getfixturevalue("npuctl_debs")
    except (Exception, pytest.skip.Exception):  # the image test will say why, in its turn
        yield None
        return
    dist = tmp_path_factory.mktemp("arm64-image-dist")
    for deb in debs.values():
        shutil.copy(deb, dist)
    log = dist / "build.log"
    work = tmp_path_factory.mktemp("arm64-image-work")
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "oci_image", "--dist", str(dist), "--images", "npuctl"),
                *("--architectures", "arm64", "build", "--work", str(work)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[1],
        )
    build = ImageBuild(process, dist, log)
    yield build
    if process.poll() is None:  # the session ended first: the tool cleans up on SIGTERM
        process.terminate()
        process.wait(timeout=120)


# A test module that defines this function has a setup of minutes that keeps about a core
# busy (QEMU, cross builds): it starts with the session, in a thread, beside the other tests.
# Called in the main thread with the session's request and a cancel event, the function
# resolves the fixtures it needs (or skips) and returns the work the thread does. The setups
# run one at a time, in their modules' order: two cores hold the tests and one of them.
STARTED_BESIDE = "start_beside_the_tests"


@pytest.fixture(scope="session", autouse=True)
def beside_the_tests(request) -> Iterator[dict[str, Future]]:
    """Each collecting module's long setup, started at once: its result by module name."""
    cancel = threading.Event()
    started: dict[str, Future] = {}
    modules = {item.module for item in request.session.items if item.module is not None}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="beside") as pool:
        for module in sorted(modules, key=lambda module: module.__name__):
            start: Callable | None = getattr(module, STARTED_BESIDE, None)
            if start is None:
                continue
            try:
                work = start(request, cancel)
            except (Exception, pytest.skip.Exception, pytest.fail.Exception) as error:
                started[module.__name__] = Future()  # its fixture says why, in its turn
                started[module.__name__].set_exception(error)
                continue
            started[module.__name__] = pool.submit(work)
        yield started
        cancel.set()  # a session that ended first (-x, an interrupt) waits for no boot


def started_beside(request) -> object:
    """The result of the requesting module's setup (its exception or skip, raised here)."""
    return request.getfixturevalue("beside_the_tests")[request.module.__name__].result()


@pytest.fixture(scope="session")
def config() -> Config:
    return load_package("aipu-dkms")


@pytest.fixture(scope="session")
def upstream_tree(config: Config) -> Path:
    tree = find_upstream(config)
    if tree is None:
        pytest.skip(
            f"upstream driver tree {config.upstream.tree_id[:12]} is not in the cache "
            f"({cache_root()}/upstream): run 'make fetch' (UPSTREAM_GIT=<clone> to use a "
            "local copy)"
        )
    return tree


@pytest.fixture(scope="session")
def built_packages(config: Config, upstream_tree: Path, tmp_path_factory) -> dict[str, Path]:
    """The Debian packages built once per session (lintian runs as part of the build)."""
    from pipeline.package import build_packages

    build_dir = tmp_path_factory.mktemp("build")
    dist = tmp_path_factory.mktemp("dist")
    artifacts = build_packages(config, upstream_tree, build_dir, dist)

    def one(suffix: str) -> Path:
        return next(path for path in artifacts if path.name.endswith(suffix))

    return {
        "dsc": one(".dsc"),
        "deb": one("_all.deb"),
        "orig": one(".orig.tar.xz"),
        "debian": one(".debian.tar.xz"),
        "changes": one(".changes"),
        "build_dir": build_dir,
    }


@pytest.fixture(scope="session")
def npuctl_debs(config: Config, tmp_path_factory) -> dict[str, Path]:
    """The .debs of npuctl's source (npuctl, npuctl-serve, npuctl-watch) by package name,
    built once per session (they need no upstream tree)."""
    from pipeline.npuctl_package import build_npuctl_package

    artifacts = build_npuctl_package(
        config, tmp_path_factory.mktemp("npuctl-build"), tmp_path_factory.mktemp("npuctl-dist")
    )
    return {path.name.split("_")[0]: path for path in artifacts if path.suffix == ".deb"}


@pytest.fixture(scope="session")
def npuctl_deb(npuctl_debs: dict[str, Path]) -> Path:
    """The npuctl core .deb."""
    return npuctl_debs["npuctl"]


@pytest.fixture(scope="session")
def rocket_config() -> Config:
    return load_package("rocket-dkms")


@pytest.fixture(scope="session")
def rocket_packages(rocket_config: Config, tmp_path_factory) -> dict[str, Path]:
    """rocket-dkms built once per session: file name -> path of each artifact."""
    from pipeline.package import build_packages

    tree = find_upstream(rocket_config)
    if tree is None:
        pytest.skip(
            f"rocket source {rocket_config.upstream.tree_id[:12]} is not in the cache "
            f"({cache_root()}/upstream): run 'make fetch' (downloads "
            f"{rocket_config.upstream.source_file} from the Debian archive once)"
        )
    artifacts = build_packages(
        rocket_config, tree, tmp_path_factory.mktemp("rocket"), tmp_path_factory.mktemp("rdist")
    )
    return {path.name: path for path in artifacts}


def require_chroot_support() -> None:
    if os.geteuid() != 0:
        pytest.skip("chroot tests need root (debootstrap, chroot, mount)")
    missing = [tool for tool in ("debootstrap", "chroot", "zstd") if not shutil.which(tool)]
    if missing:
        pytest.skip(f"chroot tests need {', '.join(missing)}: run 'make deps'")


def run(*command: str | Path, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, check=False, **kwargs
    )
