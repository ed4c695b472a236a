"""The store's boundary, checked on the code: outside ``hermes_actors/store/`` modules type against
:class:`~hermes_actors.store.interface.StoreInterface`, so mypy checks that both stores give them what they call.

An AST walk over ``hermes_actors/`` and ``platforms/``: importing the SQLite ``Store`` (or ``SqlStore``, the
implementation both stores share) outside the store is allowed only in the modules listed with their reason, and no
module anywhere casts a store to either (a cast is how the PostgreSQL store used to be let in unchecked).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONCRETE = frozenset({"Store", "SqlStore"})
"""The implementation classes code outside the store must not type against."""

_SOURCES = frozenset(
    {"hermes_actors", "hermes_actors.store", "hermes_actors.store.store", "hermes_actors.store.sql_store"}
)
"""The modules that offer them."""

_MODULES = frozenset({"hermes_actors.store.store", "hermes_actors.store.sql_store"})
"""The modules that define them."""

_OPENS_THE_HOME = "opens the home's SQLite database file by its path (Store.open); the store it hands on is typed"

CONCRETE_OUTSIDE_STORE = {
    "hermes_actors/__init__.py": "the public API: hermes_actors.Store is how a program opens a SQLite store",
    "hermes_actors/cli/ctl_chat.py": _OPENS_THE_HOME,
    "hermes_actors/cli/ctl_daemon.py": _OPENS_THE_HOME,
    "hermes_actors/cli/ctl_db.py": _OPENS_THE_HOME + " (db optimize with its own busy timeout)",
    "hermes_actors/cli/ctl_import.py": _OPENS_THE_HOME + " (a dry run reads the target read-only)",
    "hermes_actors/cli/options.py": _OPENS_THE_HOME + " (open_store, every CLI command's home store)",
    "hermes_actors/daemon/process.py": _OPENS_THE_HOME + " (the write probe before the start)",
    "hermes_actors/daemon/startup.py": _OPENS_THE_HOME + " (a webhook's queued time, on a connection of its own)",
    "hermes_actors/daemon/terminal.py": _OPENS_THE_HOME + " (the terminal chat's session, without hermesd)",
    "hermes_actors/runtime/assembly.py": _OPENS_THE_HOME + " (the writer's connection)",
    "hermes_actors/runtime/gateway.py": _OPENS_THE_HOME + " (a deletion on a connection of its own)",
}
"""Modules outside ``store/`` that import the SQLite ``Store``, with the reason."""


def _python_files() -> Iterator[Path]:
    for top in ("hermes_actors", "platforms"):
        yield from sorted((ROOT / top).rglob("*.py"))


def _in_store(path: Path) -> bool:
    return path.relative_to(ROOT).parts[:2] == ("hermes_actors", "store")


def concrete_imports(tree: ast.AST) -> list[int]:
    """The lines that import ``Store`` or ``SqlStore``, or the modules that define them."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in _SOURCES:
            dotted = [f"{node.module}.{alias.name}" for alias in node.names]
            if any(alias.name in CONCRETE for alias in node.names) or any(d in _MODULES for d in dotted):
                lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(alias.name in _MODULES for alias in node.names):
            lines.append(node.lineno)
    return lines


def _names_concrete(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.strip() in CONCRETE
    if isinstance(node, ast.Name):
        return node.id in CONCRETE
    return isinstance(node, ast.Attribute) and node.attr in CONCRETE


def concrete_casts(tree: ast.AST) -> list[int]:
    """The lines that ``cast`` something to ``Store`` or ``SqlStore`` (by name or as a string)."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "cast" and _names_concrete(node.args[0]):
            lines.append(node.lineno)
    return lines


def test_outside_the_store_only_the_listed_modules_import_the_sqlite_store() -> None:
    wrong: list[str] = []
    for path in _python_files():
        relative = path.relative_to(ROOT).as_posix()
        if _in_store(path) or relative in CONCRETE_OUTSIDE_STORE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong.extend(f"{relative}:{line}" for line in concrete_imports(tree))
    assert not wrong, (
        "modules outside hermes_actors/store/ importing the concrete store; type them against "
        "hermes_actors.store.StoreInterface (or list the module with its reason):\n" + "\n".join(wrong)
    )


def test_every_listed_exception_still_imports_the_sqlite_store() -> None:
    stale = [
        relative
        for relative in CONCRETE_OUTSIDE_STORE
        if not concrete_imports(ast.parse((ROOT / relative).read_text(encoding="utf-8")))
    ]
    assert not stale, f"listed as importing Store but no longer does (take them off the list): {stale}"


def test_no_module_casts_a_store_to_the_sqlite_store() -> None:
    wrong: list[str] = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong.extend(f"{path.relative_to(ROOT).as_posix()}:{line}" for line in concrete_casts(tree))
    assert not wrong, (
        "casts to the concrete store; type the code against hermes_actors.store.StoreInterface, which both "
        "stores implement:\n" + "\n".join(wrong)
    )


def test_the_checks_find_imports_and_casts_in_every_spelling() -> None:
    source = """
from hermes_actors.store import EndReason, Store
from hermes_actors.store.store import Store as SqliteStore
from hermes_actors.store.sql_store import SqlStore
from hermes_actors import Store
import hermes_actors.store.store
from hermes_actors.store import sql_store
from hermes_actors.store import StoreInterface
import hermes_actors.store
from hermes_actors import store
x = cast("Store", y)
x = cast(Store, y)
x = typing.cast(store.Store, y)
x = cast("StoreInterface", y)
"""
    tree = ast.parse(source)
    assert concrete_imports(tree) == [2, 3, 4, 5, 6, 7]
    assert concrete_casts(tree) == [11, 12, 13]
