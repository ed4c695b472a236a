"""Persistence, the only place SQL runs: the typed interface (:mod:`.interface`) and its APSW implementation
(:class:`Store`), with the schema, migrations and full-text search."""

from __future__ import annotations

from hermes_actors.store.connection import Synchronous, open_connection
from hermes_actors.store.interface import StoreInterface
from hermes_actors.store.migrations import SCHEMA_VERSION, migrate
from hermes_actors.store.records import (
    EndReason,
    FtsHit,
    FtsResult,
    InboxState,
    LineagePage,
    LineageRow,
    MessageRecord,
    NewMessage,
    Role,
    SessionFilter,
    SessionRecord,
    SourceCount,
    StoreStats,
    TipFilter,
)
from hermes_actors.store.store import Store

__all__ = [
    "SCHEMA_VERSION",
    "EndReason",
    "FtsHit",
    "FtsResult",
    "InboxState",
    "LineagePage",
    "LineageRow",
    "MessageRecord",
    "NewMessage",
    "Role",
    "SessionFilter",
    "SessionRecord",
    "SourceCount",
    "Store",
    "StoreInterface",
    "StoreStats",
    "Synchronous",
    "TipFilter",
    "migrate",
    "open_connection",
]
