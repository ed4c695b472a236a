"""The layers of ARCHITECTURE.md, checked on the code: import directions, SQL only in the store, module sizes.

An AST walk over ``hermes_actors/`` and ``platforms/`` (imports inside functions and ``TYPE_CHECKING`` blocks
count too: a type-only import still couples the layers).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CORE = frozenset(
    {
        "hermes_actors.approval_port",
        "hermes_actors.clock",
        "hermes_actors.config",
        "hermes_actors.constraints",
        "hermes_actors.cpu_affinity",
        "hermes_actors.conversation_port",
        "hermes_actors.errors",
        "hermes_actors.health",
        "hermes_actors.ids",
        "hermes_actors.job_port",
        "hermes_actors.media",
        "hermes_actors.messages",
        "hermes_actors.operator_port",
        "hermes_actors.ports",
        "hermes_actors.routing",
        "hermes_actors.section_parts",
        "hermes_actors.titles",
        "hermes_actors.turn_events",
        "hermes_actors.waiters",
    }
)
"""The pure core: types and rules every layer may use. It imports nothing above itself."""

_STORE = frozenset({"core", "hermes_actors.store"})
_READS = _STORE | {"hermes_actors.search", "hermes_actors.principal"}
_AGENTS = _READS | {"hermes_actors.agents"}
_LIFECYCLE = _AGENTS | {"hermes_actors.lifecycle"}
_RUNTIME = _LIFECYCLE | {"hermes_actors.runtime"}
_CLUSTER = _RUNTIME | {"platforms.registry"}
_DAEMON = _RUNTIME | {"hermes_actors.importer", "platforms.registry", "hermes_actors.cluster"}

BELOW: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "hermes_actors.store": frozenset({"core"}),
    "hermes_actors.search": _STORE,
    "hermes_actors.principal": _STORE,
    "hermes_actors.importer": _STORE,
    "hermes_actors.agents": _READS,
    "hermes_actors.lifecycle": _AGENTS,
    "hermes_actors.runtime": _LIFECYCLE,
    "hermes_actors.cluster": _CLUSTER,
    "hermes_actors.daemon": _DAEMON,
    "hermes_actors.cli": _DAEMON | {"hermes_actors", "hermes_actors.daemon"},
    "hermes_actors.testing": _RUNTIME,
    "hermes_actors": _STORE,
    "platforms.support": frozenset({"core"}),
    "platforms.base": frozenset({"core"}),
    "platforms.registry": frozenset({"core", "platforms.base"}),
    "platforms.*": frozenset({"core", "platforms.base", "platforms.support"}),
}
"""What each layer may import besides itself. ``platforms.*`` is any one platform package (never another one)."""

SQL_OUTSIDE_STORE = {
    "hermes_actors/importer/source.py": "reads the reference system's own state.db (read-only), not our store",
}
"""Modules outside ``store/`` allowed to run SQL, with the reason."""

MAX_LINES = 400  # a module past it owns two nouns


def _modules() -> Iterator[tuple[str, Path]]:
    for top in ("hermes_actors", "platforms"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            yield name, path


def layer_of(module: str) -> str | None:
    """The layer a module belongs to, ``None`` for anything outside the two packages."""
    parts = module.split(".")
    if parts[0] == "hermes_actors":
        if len(parts) == 1:
            return "hermes_actors"
        head = ".".join(parts[:2])
        return "core" if head in CORE else head
    if parts[0] == "platforms":
        return "platforms" if len(parts) == 1 else f"platforms.{parts[1]}"  # support, base, registry or a platform
    return None


def _is_platform_package(layer: str) -> bool:
    return layer.startswith("platforms.") and layer not in BELOW


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:  # "from package import module" names the module
                dotted = f"{node.module}.{alias.name}"
                as_path = ROOT.joinpath(*dotted.split("."))
                if as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file():
                    yield node.lineno, dotted
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


def _allowed(source: str, target: str) -> bool:
    source_layer, target_layer = layer_of(source), layer_of(target)
    if target_layer is None or target_layer == "platforms" or source_layer == target_layer:
        return True
    assert source_layer is not None
    if _is_platform_package(source_layer):
        return not _is_platform_package(target_layer) and target_layer in BELOW["platforms.*"]
    return target_layer in BELOW.get(source_layer, frozenset())


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = []
    for name, _ in _modules():
        layer = layer_of(name)
        if layer is None or not (layer in BELOW or layer == "platforms" or _is_platform_package(layer)):
            unknown.append(name)
    assert not unknown, f"modules outside every layer of ARCHITECTURE.md: {unknown}"


@pytest.mark.slow
def test_imports_run_only_downwards() -> None:
    wrong: set[str] = set()
    for name, path in _modules():
        for line, target in _imports(path):
            if target in ("hermes_actors", "platforms"):
                continue  # the package itself; "from package import module" is judged by the module
            if not _allowed(name, target):
                where = f"{path.relative_to(ROOT)}:{line}"
                wrong.add(f"{where} imports {target} ({layer_of(name)} -> {layer_of(target)})")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def _runs_sql(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("execute", "executemany", "executescript", "cursor")
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(name == "apsw" or name.startswith("apsw.") for name in names):
                lines.append(node.lineno)
    return lines


@pytest.mark.slow
def test_sql_runs_only_in_the_store() -> None:
    wrong: list[str] = []
    for name, path in _modules():
        relative = path.relative_to(ROOT).as_posix()
        if name.startswith("hermes_actors.store") or relative in SQL_OUTSIDE_STORE:
            continue
        wrong.extend(f"{relative}:{line}" for line in _runs_sql(path))
    assert not wrong, "SQL (execute/cursor or apsw) outside hermes_actors/store/:\n" + "\n".join(wrong)


def test_no_module_is_over_the_size_limit() -> None:
    big = []
    for _, path in _modules():
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > MAX_LINES:
            big.append(f"{path.relative_to(ROOT)}: {count} lines")
    assert not big, f"modules over {MAX_LINES} lines (split by the nouns they own):\n" + "\n".join(big)


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("platforms.telegram.adapter", "hermes_actors.ports", True),
        ("platforms.telegram.adapter", "hermes_actors.runtime.gateway", False),
        ("platforms.telegram.adapter", "platforms.slack.adapter", False),
        ("hermes_actors.store.store", "hermes_actors.lifecycle.policy", False),
        ("hermes_actors.runtime.outbox", "platforms.base", False),
        ("hermes_actors.daemon.process", "platforms.registry", True),
    ],
)
def test_the_rules_themselves(source: str, target: str, allowed: bool) -> None:
    assert _allowed(source, target) is allowed
