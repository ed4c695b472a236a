"""No import circle in ``hermes_actors/`` or ``platforms/``: every module's imports (type-only and inside functions
too, as in :mod:`tests.test_architecture`) form a graph without cycles, so each module can be read, tested and
replaced after the ones it uses."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("hermes_actors", "platforms"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _targets(node: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        for alias in node.names:  # "from package import module" imports the module, not the package
            dotted = f"{node.module}.{alias.name}"
            yield dotted if dotted in known else node.module
    elif isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name


def import_graph() -> dict[str, set[str]]:
    """Each module of the two packages and the modules of the two packages it imports."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {t for node in ast.walk(tree) for t in _targets(node, known) if t in known and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back_through_others() -> None:
    found = circles(import_graph())
    assert not found, "import circles (break each by moving the shared piece down): " + "; ".join(
        " <-> ".join(c) for c in found
    )
