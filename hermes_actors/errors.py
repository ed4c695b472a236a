"""Exceptions raised by hermes-actors.

Every error names the object at fault and, where there is one, the fix.

    HermesError
    ├── ConfigError            a configuration value is wrong (carries the field path)
    ├── RoutingError           a session source or key cannot be routed/parsed
    ├── StoreError             the database refused an operation (keeps the apsw cause; ``fault`` says why)
    │   ├── StoreBusyError     another process held the database past the busy timeout (names the step)
    │   ├── SchemaVersionError the database was written by a newer hermes-actors
    │   ├── SessionNotFoundError  no session matches an id, prefix or title
    │   ├── AmbiguousSessionError a prefix matches several sessions (names them)
    │   ├── TitleInUseError    another session holds the title (names it)
    │   ├── SessionClosedError the session has ended and cannot take new turns
    │   ├── SessionBusyError   another process holds the session's lease
    │   ├── LeaseLostError     the lease was taken over mid-turn: the turn's commit is rolled back
    │   │   └── RoleLostError  a cluster replica's role term ended: the write it guarded is rolled back
    │   └── StaleTurnError     another turn completed the message already: the duplicate is rolled back
    │       └── ShardLostError the host no longer holds the session's shard: the turn is rolled back
    ├── TitleError             a title is invalid after sanitising (too long)
    ├── PlatformError          a platform adapter failed
    ├── ShutdownError          the runtime stopped mid-turn: the turn committed nothing and runs at the next start
    └── SourceDatabaseError    import-hermes cannot read the other system's database (hermes_actors.importer)
"""

from __future__ import annotations

import enum

__all__ = [
    "AmbiguousSessionError",
    "ConfigError",
    "HermesError",
    "LeaseLostError",
    "PlatformError",
    "RoleLostError",
    "RoutingError",
    "SchemaVersionError",
    "SessionBusyError",
    "SessionClosedError",
    "SessionNotFoundError",
    "ShardLostError",
    "ShutdownError",
    "StaleTurnError",
    "StoreBusyError",
    "StoreError",
    "StoreFault",
    "TitleError",
    "TitleInUseError",
]


class HermesError(Exception):
    """Base class of every error hermes-actors raises on purpose."""


class ConfigError(HermesError):
    """A configuration value is invalid; ``path`` names the field (``runtime.max_live_actors``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class RoutingError(HermesError):
    """A session source cannot produce a key, or a string is not a session key."""


class StoreFault(enum.StrEnum):
    """Why the database refused a write, where the store could tell: what a caller may act on without the cause."""

    FULL = "full"
    """The database or its disk is full (or a quota or file size limit was reached)."""
    READ_ONLY = "read-only"
    """The file, its directory or its filesystem refuses writes."""
    BUSY = "busy"
    """Another connection held the write lock past the busy timeout."""


class StoreError(HermesError):
    """The store refused an operation; ``__cause__`` keeps the apsw exception when there is one.

    ``fault`` is the kind of refusal when the store recognised it (a full disk, a read-only file, a held lock),
    ``None`` otherwise.
    """

    fault: StoreFault | None = None

    def __init__(self, *args: object, fault: StoreFault | None = None) -> None:
        super().__init__(*args)
        if fault is not None:
            self.fault = fault


class StoreBusyError(StoreError):
    """Another process held the database while ``step`` ran (``hermesctl db optimize``); nothing was changed after
    the last completed step."""

    fault = StoreFault.BUSY

    def __init__(self, step: str) -> None:
        super().__init__(
            f"the database stayed busy while {step}: another process (hermesd, a terminal chat) holds it; stop that "
            "process or retry later"
        )
        self.step = step


class SchemaVersionError(StoreError):
    """The database schema is newer than this code understands; nothing was changed."""

    def __init__(self, path: str, found: int, supported: int) -> None:
        super().__init__(
            f"{path} has schema version {found}, but this hermes-actors supports up to {supported}; "
            "upgrade hermes-actors (the database was left untouched)"
        )
        self.found = found
        self.supported = supported


class SessionNotFoundError(StoreError):
    """No session matches the given id, id prefix or title."""


class AmbiguousSessionError(StoreError):
    """A reference does not name exactly one session (an id prefix of several, a title only variants hold);
    ``candidates`` lists them, ``hint`` says how to name one."""

    def __init__(self, reference: str, candidates: list[str], *, hint: str = "type more of the id") -> None:
        shown = ", ".join(candidates[:10]) + (" ..." if len(candidates) > 10 else "")
        count = f"{len(candidates)} sessions" if len(candidates) != 1 else "1 session"
        super().__init__(f"'{reference}' matches {count}: {shown}; {hint}")
        self.candidates = candidates


class TitleInUseError(StoreError):
    """Another session already holds the title; ``holder`` is its id."""

    def __init__(self, title: str, holder: str) -> None:
        super().__init__(f"Title '{title}' is already in use by session {holder}")
        self.title = title
        self.holder = holder


class SessionClosedError(StoreError):
    """The session has ended; open a new one or reopen it first."""


class TitleError(HermesError):
    """A title is unusable even after sanitising (for example, longer than 100 characters)."""


class PlatformError(HermesError):
    """A platform adapter failed to receive or deliver."""


class ShutdownError(HermesError):
    """The runtime is shutting down: the turn waiting for an agent call was given up without committing anything;
    its messages stay pending and run again at the next start (nothing to do)."""


class SessionBusyError(StoreError):
    """Another process runs this session's turns (it holds the lease)."""


class LeaseLostError(StoreError):
    """This process's lease on a session expired and another process took it; the write was rolled back."""


class RoleLostError(LeaseLostError):
    """Cluster mode: this replica's term of a role (an adapter's, a platform's dispatch) ended, by its own deadline
    or because another replica took it; the write that needed it was rolled back (a poll batch and its cursor stay
    uncommitted, the new holder polls them again)."""


class StaleTurnError(StoreError):
    """A turn's inbox row was completed by another turn already; the duplicate was rolled back."""


class ShardLostError(StaleTurnError):
    """A cluster host's lease on the session's shard ended (expired, or another host took it): the turn was rolled
    back and its inbox rows stay pending for the shard's holder. Not retried here: the new holder runs them."""
