"""The import-linter contract import-linter lacks: no cycle among the modules of a package,
each module on its own (a package's ``__init__`` is a module like any other), counting every
import the graph holds (inside functions, and under TYPE_CHECKING when the configuration
keeps them). Its siblings contract squashes packages, so a package and its own modules, or
two modules that meet through a third package, can import each other unseen; this one finds
every set of modules that import each other and names the imports that close it.

Configured in tools/pyproject.toml as type ``acyclic_modules`` with ``packages``."""

from __future__ import annotations

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The sets of modules under ``package`` that import each other (each module reaches
    every other of its set through imports), each sorted, largest first."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    inside = set(modules)
    reach = {module: _reachable(graph, module, inside) for module in modules}
    found: list[list[str]] = []
    placed: set[str] = set()
    for module in modules:
        if module in placed or module not in reach[module]:  # on no cycle
            continue
        component = sorted(other for other in reach[module] if module in reach[other])
        placed.update(component)
        found.append(component)
    return sorted(found, key=lambda component: (-len(component), component))


def _reachable(graph: grimp.ImportGraph, start: str, inside: set[str]) -> set[str]:
    """The modules ``start`` reaches through one import or more."""
    seen: set[str] = set()
    pending = [start]
    while pending:
        for imported in graph.find_modules_directly_imported_by(pending.pop()) & inside:
            if imported not in seen:
                seen.add(imported)
                pending.append(imported)
    return seen


def closing_imports(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """Each import between members of a cycle: 'importer:line -> imported (the line)'."""
    members = set(component)
    lines = []
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(
                    f"{importer}:{detail['line_number']} -> {imported} "
                    f"({detail['line_contents'].strip()})"
                )
    return lines


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    packages = fields.SetField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        found = {
            package: [
                (component, closing_imports(graph, component))
                for component in cycles(graph, package)
            ]
            for package in sorted(self.packages)  # type: ignore[attr-defined]
        }
        found = {package: listed for package, listed in found.items() if listed}
        return ContractCheck(kept=not found, metadata={"cycles": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for package, listed in check.metadata["cycles"].items():
            for component, imports in listed:
                output.print_error(
                    f"{len(component)} modules of {package} import each other: "
                    + ", ".join(component)
                )
                for line in imports:
                    output.indent_cursor()
                    output.print_error(line)
                output.new_line()
