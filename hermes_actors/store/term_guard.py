"""Another term's check carried inside a statement: a ``WITH guard`` query that the statement writes only under.

A shard host's turn renews its session's lease under its shard's term (:meth:`Leases.fence
<hermes_actors.store.leases.Leases.fence>`). Checked apart, that is two statements, each a round trip to PostgreSQL;
as a guard the shard's check rides in the renewal: the renewal changes a row only when the guard yields one, and a
renewal that changed nothing runs the check alone to say which term was lost.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

__all__ = ["FencedWrite", "TermGuard", "prefixed"]

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class TermGuard(NamedTuple):
    """A term's check to embed: its query and parameters (:func:`prefixed`, so they cannot clash with the
    statement's), what to record once a statement found the term held, and the check alone (raising when the term
    is lost), for a statement that changed nothing."""

    query: str
    params: dict[str, Any]
    held: Callable[[], None]
    check: Callable[[], object]


class FencedWrite(Protocol):
    """A write that rides in a fence's own statement where a store carries the fence as one (a shard host's session
    lease, renewed under its shard's term): ``WITH`` queries that write only when the term was renewed (each says
    ``EXISTS (SELECT FROM renewed)``, or reads one that does), the last of them returning rows; their named
    parameters (prefixed, as a guard's, so several writes share a statement); what to do with the rows returned (as
    dictionaries of their columns); and the write alone, for a fence checked apart (SQLite, or a session with no
    lease yet), which runs it after the check."""

    def fenced(self, name: str) -> tuple[str, dict[str, Any]]:
        """The write's ``WITH`` queries, comma-separated, the last named ``name`` (its rows go to :meth:`took`; any
        other is named ``name`` and a suffix), and their parameters."""
        ...

    def took(self, rows: list[dict[str, Any]]) -> None:
        """What the last query returned, once the term was found renewed."""
        ...

    def alone(self) -> None:
        """Run the write as statements of its own, after a check made apart."""
        ...


def prefixed(query: str, params: dict[str, Any], prefix: str) -> tuple[str, dict[str, Any]]:
    """``query`` with each of its named parameters ``:name`` that ``params`` has renamed ``:{prefix}name``, and the
    parameters renamed alike (a ``::type`` cast is not a parameter)."""
    names = tuple(params)
    return _renamed(query, names, prefix), dict(zip(_prefixed_names(names, prefix), params.values(), strict=True))


@functools.lru_cache(maxsize=256)  # a guard's query is one of a few texts: renamed once each, not per turn
def _renamed(query: str, names: tuple[str, ...], prefix: str) -> str:
    return _NAMED.sub(lambda m: f":{prefix}{m.group(1)}" if m.group(1) in names else m.group(0), query)


@functools.lru_cache(maxsize=256)
def _prefixed_names(names: tuple[str, ...], prefix: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{name}" for name in names)
