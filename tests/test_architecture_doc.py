"""ARCHITECTURE.md names the code it describes; every name it puts in backticks must still be there.

A rename or a move that leaves the walk of one message (or the table of layers) pointing at something gone fails
here: a path must exist, ``module.Name`` must be defined at the top of that module, ``Class.member`` must be a
member of that class (or of a class it derives from), and a bare identifier must be defined somewhere in the two
packages. Platform wire names (``getUpdates``) and slash commands count when the code carries them as strings.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "ARCHITECTURE.md"
PACKAGES = ("hermes_actors", "platforms")
EXTERNAL = {
    "ask": "pykka's request and reply",
    "tell": "pykka's one-way message",
    "import": "Python's statement",
    "TYPE_CHECKING": "typing's flag",
}
"""Names the document uses that the code takes from Python or a library, with what they are."""


@dataclass
class CodeIndex:
    """What the two packages define, read with ``ast`` (nothing is imported)."""

    files: list[Path] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # every def, class, assigned name or attribute, argument, keyword
    strings: set[str] = field(default_factory=set)  # string constants, for wire names and commands
    top_level: dict[Path, set[str]] = field(default_factory=dict)
    members: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # class name -> its members
    bases: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def class_has(self, cls: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
        if member in self.members.get(cls, ()):
            return True
        return any(self.class_has(base, member, seen | {cls}) for base in self.bases.get(cls, ()) if base not in seen)


def _top_level_names(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            found.update(alias.asname or alias.name for alias in node.names)
    return found


def _class_members(node: ast.ClassDef) -> set[str]:
    found: set[str] = set()
    for item in ast.walk(node):
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item in node.body:
            found.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item in node.body:
            found.add(item.target.id)
        elif isinstance(item, ast.Assign) and item in node.body:
            found.update(target.id for target in item.targets if isinstance(target, ast.Name))
        elif (
            isinstance(item, ast.Attribute)
            and isinstance(item.ctx, ast.Store)
            and isinstance(item.value, ast.Name)
            and item.value.id == "self"
        ):
            found.add(item.attr)
    return found


@functools.cache
def code_index() -> CodeIndex:
    index = CodeIndex()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            index.files.append(path)
            tree = ast.parse(path.read_text(encoding="utf-8"))
            index.top_level[path] = _top_level_names(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    index.names.add(node.name)
                    index.members[node.name] |= _class_members(node)
                    for base in node.bases:
                        if isinstance(base, ast.Name):
                            index.bases[node.name].add(base.id)
                        elif isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name):
                            index.bases[node.name].add(base.value.id)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    index.names.add(node.name)
                elif isinstance(node, ast.arg | ast.keyword) and node.arg:
                    index.names.add(node.arg)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    index.names.add(node.id)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    index.names.add(node.attr)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    index.strings.add(node.value)
    return index


def _modules_named(dotted: str) -> list[Path]:
    """The files a module reference means: ``runtime/session`` or ``ports`` (any package's module of that name)."""
    relative = dotted.replace(".", "/")
    found = []
    for path in code_index().files:
        stem = path.with_suffix("").as_posix()
        package = path.parent.as_posix()
        if stem.endswith("/" + relative) or (path.name == "__init__.py" and package.endswith("/" + relative)):
            found.append(path)
    return found


def _exists(relative: str) -> bool:
    """A file or folder of the project: from its root (``tests/store/``) or inside a package (``store/``)."""
    relative = relative.rstrip("/")
    for base in (ROOT, *(ROOT / package for package in PACKAGES)):
        if (base / relative).exists() or (base / f"{relative}.py").is_file():
            return True
    return any(path.as_posix().endswith("/" + relative) for path in code_index().files)


def _check_path(span: str) -> str | None:
    """``platforms/telegram/polling.py``, ``updates.py``, ``store/``, ``store/writer.StoreWriter``."""
    if "<" in span:  # a pattern such as platforms/<name>/
        return _check_path(span.split("<", 1)[0])
    if _exists(span):
        return None
    if span.endswith((".py", "/")):
        return "no such file"
    module, _, name = span.rpartition(".")
    if not module:
        return "not a path"
    modules = _modules_named(module)
    if not modules:
        return f"no module {module}"
    if not any(name in code_index().top_level[path] for path in modules):
        return f"{name} is not defined in {module}"
    return None


def _check_attribute(chain: list[str]) -> str | None:
    """``Class.member``, ``module.name`` or an attribute path such as ``store.outbox.mark_sent``."""
    index = code_index()
    head, rest = chain[0], chain[1:]
    if _modules_named(".".join(chain)) or (not rest and head in EXTERNAL):
        return None  # a module (``ports``, ``platforms.base``), or a name the code uses from a library
    if head in index.members and rest:
        if not index.class_has(head, rest[0]):
            return f"{head} has no member {rest[0]}"
        rest = rest[1:]
    elif (modules := _modules_named(head)) and rest and any(rest[0] in index.top_level[path] for path in modules):
        rest = rest[1:]
    elif head not in index.names:
        return f"{head} is defined nowhere"
    missing = [name for name in rest if name not in index.names]
    return f"{', '.join(missing)} defined nowhere" if missing else None


def _chain(node: ast.expr) -> list[str] | None:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *names]
    return None


def _check_expression(span: str) -> str | None:
    try:
        tree = ast.parse(span, mode="eval")
    except SyntaxError:
        return "neither a path nor a Python expression"
    problems = []
    chains: list[list[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name) and not any(
            isinstance(parent, ast.Attribute) and parent.value is node for parent in ast.walk(tree)
        ):
            found = _chain(node)
            if found:
                chains.append(found)
    for chain in chains:
        if len(chain) == 1 and chain[0] in code_index().strings:
            continue  # a wire name the code sends or reads
        problem = _check_attribute(chain)
        if problem:
            problems.append(problem)
    return "; ".join(problems) or None


def check_span(span: str) -> str | None:
    """Why ``span`` no longer names code, or ``None`` when it does."""
    if span in EXTERNAL:
        return None
    if span.startswith("/"):  # a slash command
        return None if span in code_index().strings or span[1:] in code_index().strings else "no such command"
    if "/" in span or span.endswith(".py"):
        return _check_path(span)
    return _check_expression(span)


def spans() -> Iterator[str]:
    seen = set()
    text = DOC.read_text(encoding="utf-8")
    for match in re.finditer(r"`([^`\n]+)`", text):
        span = match.group(1)
        if span in seen or " " in span.replace(", ", ",") or span.startswith(("-", "$", "'")):
            continue  # prose in code font (a command line, an option, a quoted reply) is not a code reference
        seen.add(span)
        yield span


@pytest.mark.slow  # parses every module (about 2 s)
def test_every_name_architecture_md_puts_in_backticks_is_in_the_code() -> None:
    stale = [f"`{span}`: {problem}" for span in spans() if (problem := check_span(span))]
    assert not stale, "ARCHITECTURE.md names code that is not there:\n" + "\n".join(stale)


def test_the_walk_of_one_message_is_checked() -> None:
    walk = DOC.read_text(encoding="utf-8").split("## One inbound message, hop by hop", 1)[1]
    checked = {span for span in spans() if f"`{span}`" in walk}
    assert {"Gateway._inbox_commit", "SessionTurns.run", "runtime/lanes.LaneWorkers"} <= checked


@pytest.mark.slow  # builds the same index
def test_a_stale_name_is_caught() -> None:
    assert check_span("Gateway._inbox_commit") is None
    assert check_span("Gateway._no_such_step") == "Gateway has no member _no_such_step"
    assert check_span("runtime/session.SessionActor") is None
    assert check_span("runtime/session.NoSuchActor") == "NoSuchActor is not defined in runtime/session"
    assert check_span("platforms/telegram/nowhere.py") == "no such file"
    assert check_span("store.inbox.no_such_method") == "no_such_method defined nowhere"
