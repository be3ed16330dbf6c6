"""Fail on an import cycle inside django_cronqueue (function-level and TYPE_CHECKING
imports included) or a module over 600 lines. The layers themselves are checked by
lint-imports (the contract in pyproject.toml); this also covers cycles inside a package
such as claiming/ or admin/, which one layer of that contract holds whole."""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

PACKAGE = "django_cronqueue"
MAX_LINES = 600


def strongly_connected(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Tarjan's algorithm over the package's own imports (a package importing its own
    submodules, as ``claiming`` does, is how Python packages work, not a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def edges(module: str) -> set[str]:
        imported = graph.find_modules_directly_imported_by(module) & modules
        return {m for m in imported if not module.startswith(m + ".")}

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges(module):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for module in sorted(modules):
        if module not in index:
            visit(module)
    return components


def main() -> int:
    graph = grimp.build_graph(PACKAGE, include_external_packages=False)
    modules = {m for m in graph.modules if ".migrations" not in m}
    problems = [f"import cycle among: {', '.join(c)}" for c in strongly_connected(graph, modules)]
    root = Path(__file__).resolve().parent.parent / PACKAGE
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if "migrations" not in path.parts and lines > MAX_LINES:
            problems.append(f"{path.relative_to(root.parent)}: {lines} lines (limit {MAX_LINES})")
    print(
        "\n".join(problems)
        or f"{len(modules)} modules, no import cycle, none over {MAX_LINES} lines"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
