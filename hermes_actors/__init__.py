"""hermes-actors: a session runtime for AI-agent gateways.

One pykka actor per session over an APSW (SQLite WAL + FTS5) store. This package exposes the pure routing
functions, session ids and titles, and the store; the runtime builds on them.
"""

from __future__ import annotations

from hermes_actors.errors import (
    AmbiguousSessionError,
    ConfigError,
    HermesError,
    PlatformError,
    RoutingError,
    SchemaVersionError,
    SessionClosedError,
    SessionNotFoundError,
    StoreError,
    TitleError,
    TitleInUseError,
)
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.routing import KeyPolicy, SessionKey, SessionSource, build_session_key, parse_session_key
from hermes_actors.store import EndReason, NewMessage, Role, Store  # Store: the public API's SQLite store

__all__ = [
    "AmbiguousSessionError",
    "ConfigError",
    "EndReason",
    "HermesError",
    "KeyPolicy",
    "NewMessage",
    "PlatformError",
    "Role",
    "RoutingError",
    "SchemaVersionError",
    "SessionClosedError",
    "SessionKey",
    "SessionKind",
    "SessionNotFoundError",
    "SessionSource",
    "Store",
    "StoreError",
    "TitleError",
    "TitleInUseError",
    "build_session_key",
    "new_session_id",
    "parse_session_key",
]

__version__ = "0.1.0"
