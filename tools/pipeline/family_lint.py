"""The family-name lint: no NPU family is named in code outside that family's own places.

A family is described once, in its places: dkms/<package>.yaml, patches/<package>/,
provision/<package>/, its npuctl platform package (npuctl/src/npuctl/platforms/<platform>/)
and its serving adapter (npuctl/src/npuctl/serve/families/<platform>.py). Every other part
of npuctl and of the build tools must learn what differs between families from those places,
so a family's names (its package, module, platform driver and npuctl platform, and the
words of its family_names: its SoC, vendor, board and user space, read from its description)
may not appear there in an identifier or a string, nor in a command's help. Comments and
other docstrings may name examples; tests, the benchmarks and the test support
(tools/testkit) exercise each family by name; the project's own name, which is its first
package's, is spelled once in pipeline/identity.py.

Run: python -m pipeline.family_lint [ROOT]; exit 0 when clean, 1 with one line per finding.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from .config import REPO_ROOT, with_soc

# The shared code: npuctl's core and server, and the tools every family goes through.
SHARED = (
    "npuctl/src/npuctl",
    "tools/pipeline",
    "tools/kernel_lab",
    "tools/oci_image",
    "tools/arm64_emulation",
    "tools/serve_tables",
)
EXEMPT = ("tools/pipeline/identity.py",)


@dataclass(frozen=True)
class Family:
    platform: str  # npuctl's platform package
    names: tuple[str, ...]  # every name that identifies it

    def owns(self, relative: str) -> bool:
        return relative.startswith(f"npuctl/src/npuctl/platforms/{self.platform}/") or relative == (
            f"npuctl/src/npuctl/serve/families/{self.platform}.py"
        )


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    family: str
    token: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: names the {self.family} family ({self.token[:60]}): "
            "read it from the family's description or move it to the family's own places"
        )


def families(root: Path) -> list[Family]:
    found: dict[str, set[str]] = {}
    for path in sorted((root / "dkms").glob("*.yaml")):
        package = with_soc(yaml.safe_load(path.read_text(encoding="utf-8")), path)["package"]
        names = found.setdefault(package["npuctl_platform"], set())
        names |= {
            package["name"],
            package["module"],
            package["platform_driver"],
            package["npuctl_platform"],
            *package.get("family_names", ()),
        }
    return [Family(platform, tuple(sorted(names))) for platform, names in found.items()]


def _is_command(node: ast.AST) -> bool:
    """A function click makes a command of: its docstring is the help users read."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    for decorator in node.decorator_list:
        called = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
        if name in ("command", "group"):
            return True
    return False


def _docstring_lines(tree: ast.AST) -> set[int]:
    """The lines of docstrings, which may name examples; a command's is its help, and is
    checked like any string."""
    lines = set()
    for node in ast.walk(tree):
        if _is_command(node):
            continue
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.add(body[0].lineno)
    return lines


def _code_tokens(source: str) -> Iterator[tokenize.TokenInfo]:
    """Identifiers and strings, without comments and docstrings."""
    docstrings = _docstring_lines(ast.parse(source))
    kinds = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in kinds:
            continue
        if token.type == tokenize.STRING and token.start[0] in docstrings:
            continue
        yield token


def findings(root: Path = REPO_ROOT) -> list[Finding]:
    known = families(root)
    patterns = {
        family.platform: re.compile(
            r"(?i)(?<![a-z0-9])(" + "|".join(map(re.escape, family.names)) + r")(?![a-z0-9])"
        )
        for family in known
    }
    found = []
    for shared in SHARED:
        for path in sorted((root / shared).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative in EXEMPT:
                continue
            others = [family for family in known if not family.owns(relative)]
            for token in _code_tokens(path.read_text(encoding="utf-8")):
                for family in others:
                    if patterns[family.platform].search(token.string):
                        found.append(
                            Finding(relative, token.start[0], family.platform, token.string)
                        )
    return found


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    root = Path(arguments[0]) if arguments else REPO_ROOT
    found = findings(root)
    for finding in found:
        print(finding)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
