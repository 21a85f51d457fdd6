"""The project's own code stays ruff and shellcheck clean."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import run

pytestmark = pytest.mark.leaves_a_core_idle

ROOT = Path(__file__).resolve().parents[1]
PYTHON_TREES = ("tools", "tests", "npuctl")
SHELL_SCRIPTS = [
    *sorted((ROOT / "tools").glob("*.sh")),
    ROOT / ".ci" / "run",
    ROOT / "provision/rocket-dkms/initramfs/rocket-dkms",  # an initramfs-tools hook
    ROOT / "tools/rocket_emu/guest/init",  # the emulated board's first process
]

RUFF_CONFIG = ("--config", "tools/pyproject.toml")  # the whole tree's ruff settings


def test_ruff_check():
    result = run(sys.executable, "-m", "ruff", "check", *RUFF_CONFIG, *PYTHON_TREES, cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_ruff_format():
    result = run(
        sys.executable,
        "-m",
        "ruff",
        "format",
        "--check",
        *RUFF_CONFIG,
        *PYTHON_TREES,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout


def test_import_contracts():
    """The boundaries in tools/pyproject.toml's [tool.importlinter]: no cycles in npuctl, no
    family imported by the shared parts, no CLI imported by a family, no server by the core,
    no tests by the tools (each ignored import there is one still to remove)."""
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed: run 'make deps'")
    result = run(linter, "--no-cache", "tools/pyproject.toml", cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_import_contracts_catch_a_cycle(tmp_path: Path):
    """The same contracts fail on a tree whose settings import a family back."""
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed: run 'make deps'")
    tree = tmp_path / "npuctl"
    shutil.copytree(ROOT / "npuctl/src/npuctl", tree, ignore=shutil.ignore_patterns("__pycache__"))
    settings = tree / "settings.py"
    settings.write_text(
        settings.read_text() + "\n\ndef _late():\n    from .platforms.zhouyi import PLATFORM\n"
    )
    config = tmp_path / "contracts.toml"
    config.write_text((ROOT / "tools/pyproject.toml").read_text())
    result = run(
        linter, "--no-cache", str(config), cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}"}
    )
    assert result.returncode != 0
    assert "npuctl.settings -> npuctl.platforms.zhouyi" in result.stdout


@pytest.mark.parametrize(
    ("module", "addition", "closing"),
    [
        # The interface's own module, importing a type back under TYPE_CHECKING only.
        (
            "embedder.py",
            "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from .platform import Platform\n",
            "npuctl.embedder:",
        ),
        # A family's facts importing its interface inside a function.
        (
            "platforms/rocket/facts.py",
            "\n\ndef _late():\n    from .platform import PLATFORM\n\n    return PLATFORM\n",
            "npuctl.platforms.rocket.facts:",
        ),
    ],
    ids=["type-checking", "inside-a-function"],
)
def test_import_contracts_count_every_import_in_a_cycle(
    tmp_path: Path, module: str, addition: str, closing: str
):
    """A cycle closed only under TYPE_CHECKING or inside a function fails the contracts, and
    the failure names the modules and the import that closes it."""
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        pytest.skip("import-linter is not installed: run 'make deps'")
    tree = tmp_path / "npuctl"
    shutil.copytree(ROOT / "npuctl/src/npuctl", tree, ignore=shutil.ignore_patterns("__pycache__"))
    changed = tree / module
    changed.write_text(changed.read_text() + addition)
    config = tmp_path / "contracts.toml"
    config.write_text((ROOT / "tools/pyproject.toml").read_text())
    result = run(
        linter, "--no-cache", str(config), cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{tmp_path}"}
    )
    assert result.returncode != 0
    text = " ".join(result.stdout.split())
    assert "(no cycles) BROKEN" in text or "(no cycles)BROKEN" in text, result.stdout
    assert "modules of npuctl import each other" in text
    assert closing in text


def test_no_family_is_named_outside_its_own_places():
    result = run(sys.executable, "-m", "pipeline.family_lint", cwd=ROOT)
    assert result.returncode == 0, result.stdout


def test_the_family_name_lint_catches_a_name(tmp_path: Path):
    """A shared module that names a family, in code or in a string, fails; the same name in
    a comment, in a docstring or in the family's own package does not."""
    for part in ("dkms", "npuctl/src/npuctl/platforms", "tools/pipeline"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shared = tmp_path / "tools/pipeline/fetch.py"
    shared.write_text(
        shared.read_text()
        + '\n\ndef _late():\n    """Unlike aipu."""\n    return "rocket"  # aipu\n'
    )
    own = tmp_path / "npuctl/src/npuctl/platforms/zhouyi/commands.py"
    own.write_text(own.read_text() + '\nFAMILY = "zhouyi"\n')
    result = run(sys.executable, "-m", "pipeline.family_lint", str(tmp_path), cwd=ROOT)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tools/pipeline/fetch.py:") and "the rocket family" in lines[0]


def test_the_family_name_lint_catches_the_words_of_a_family(tmp_path: Path):
    """A family's other names (its family_names: SoC, vendor, user space) fail in a shared
    string and in a command's help, which users read; not in another docstring."""
    for part in ("dkms", "npuctl/src/npuctl"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shared = tmp_path / "npuctl/src/npuctl/commands/models.py"
    shared.write_text(
        shared.read_text()
        + '\n\n@click.command()\ndef _help():\n    """Runs on the RK3588."""\n'
        + '\n\ndef _text():\n    """Unlike libnoe."""\n    return "Teflon here"\n'
    )
    result = run(sys.executable, "-m", "pipeline.family_lint", str(tmp_path), cwd=ROOT)
    assert result.returncode == 1
    found = sorted(line.split(": names ")[1].split(" (")[0] for line in result.stdout.splitlines())
    assert found == ["the rocket family", "the rocket family"], result.stdout
    assert "RK3588" in result.stdout and "Teflon here" in result.stdout


# Where the tools may start a process other than through pipeline.tools.run, and why.
DIRECT_PROCESSES = {
    ("pipeline/tools.py", "run"): "the one helper itself",
    ("kernel_lab/qemu.py", "_run_guest"): "a guest that times out is an observation: its console",
    ("arm64_emulation/__init__.py", "runs_arm64_programs"): "the probe's hang is its verdict",
    ("oci_image/workspace.py", "run_group"): "mmdebstrap in a process group stopped as one",
    ("rocket_emu/board.py", "boot"): "the emulated board's QEMU, spoken to while it runs",
}
# Not the tools' runtime: what runs inside the emulated board, the benchmarks and the test
# support, which start the programs they measure or test.
OTHER_RUNTIMES = ("rocket_emu/guest/", "bench/", "testkit/")


def _process_calls(path: Path) -> list[tuple[str, int]]:
    import ast

    tree = ast.parse(path.read_text())
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
                and node.func.attr in ("run", "Popen", "call", "check_call", "check_output")
            ):
                found.append((function.name, node.lineno))
    return found


def test_the_tools_run_programs_one_way():
    """Every program the tools run goes through pipeline.tools.run: a timeout on each, and one
    error line when it is missing, fails or hangs; the exceptions are listed with their
    reason."""
    strays = []
    for path in sorted((ROOT / "tools").rglob("*.py")):
        relative = path.relative_to(ROOT / "tools").as_posix()
        if relative.startswith(OTHER_RUNTIMES):
            continue
        for function, line in _process_calls(path):
            if (relative, function) not in DIRECT_PROCESSES:
                strays.append(f"tools/{relative}:{line} in {function}")
    assert strays == []


def test_a_program_that_hangs_is_one_line(tmp_path: Path):
    from pipeline.errors import BuildError, ExitCode
    from pipeline.tools import run as run_tool

    with pytest.raises(BuildError) as raised:
        run_tool(["sleep", "5"], timeout=0.2, failure="waiting", code=ExitCode.BUILD)
    assert str(raised.value) == "waiting: sleep gave no answer within 0.2 s"
    assert raised.value.code == ExitCode.BUILD
    with pytest.raises(BuildError) as raised:
        run_tool(["no-such-program-here"], failure="x")
    assert raised.value.code == ExitCode.TOOL
    with pytest.raises(BuildError) as raised:
        run_tool(["sh", "-c", "echo first; echo last >&2; exit 3"], failure="the step")
    assert str(raised.value) == "the step: last"


TYPED = ("npuctl/src/npuctl",)  # as make lint checks it


def _mypy(root: Path, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """mypy on the typed files under ``root``; with ``cache``, runs after the first one there
    check again only what changed (the third-party stubs are most of a run)."""
    pytest.importorskip("mypy", reason="mypy is not installed: run 'make deps'")
    files = [str(path) for pattern in TYPED for path in sorted(root.glob(pattern))]
    incremental = ["--cache-dir", str(cache)] if cache else ["--no-incremental"]
    config = ["--config-file", str(ROOT / "tools/pyproject.toml"), *incremental]
    return run(sys.executable, "-m", "mypy", *config, *files, cwd=root)


def test_every_family_fills_the_typed_interface():
    result = _mypy(ROOT)
    assert result.returncode == 0, result.stdout


def test_the_type_checker_catches_a_family_that_strays(tmp_path: Path):
    """A family whose stage has another signature, or that lacks one, fails make lint."""
    shutil.copytree(ROOT / "npuctl", tmp_path / "npuctl", ignore=shutil.ignore_patterns("build"))
    family = tmp_path / "npuctl/src/npuctl/platforms/rocket/platform.py"
    text = family.read_text()
    family.write_text(
        text.replace(
            "    def locate(self, system: System) -> str | None:", "    def locate(self) -> str:"
        )
    )
    result = _mypy(tmp_path, tmp_path / "mypy-cache")
    assert result.returncode == 1
    assert re.search(
        r'Signature of "locate" incompatible with supertype "[\w.]*Platform"', result.stdout
    )
    family.write_text(text.replace("    def check_models(", "    def check_model("))
    result = _mypy(tmp_path, tmp_path / "mypy-cache")
    assert result.returncode == 1
    assert 'Cannot instantiate abstract class "Rocket" with abstract attribute "check_models"' in (
        result.stdout
    )


def test_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed: run 'make deps'")
    result = run("shellcheck", *SHELL_SCRIPTS)
    assert result.returncode == 0, result.stdout


def test_a_program_of_the_tree_is_found_where_it_runs(tmp_path: Path):
    """QEMU's build runs ../configure from its build folder: the path is the folder's."""
    from pipeline.errors import BuildError
    from pipeline.tools import run as run_tool

    (tmp_path / "configure").write_text("#!/bin/sh\necho configured\n")
    (tmp_path / "configure").chmod(0o755)
    (tmp_path / "build").mkdir()
    result = run_tool(["../configure"], cwd=tmp_path / "build", failure="configure")
    assert result.stdout == "configured\n"
    with pytest.raises(BuildError) as raised:
        run_tool(["../missing"], cwd=tmp_path / "build", failure="configure")
    assert str(raised.value) == f"configure: {tmp_path / 'build' / '../missing'} does not exist"
