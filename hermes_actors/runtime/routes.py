"""The supervisor's routing directory: which session each routing key leads to, cached over the store's routes.

:class:`Routes` is owned by the supervisor and used on its thread only. It caches the routes of sessions with a
live entry, knows which sessions are ending (their keys re-resolve to successors that wait for the end to commit),
and writes routes through the store writer without waiting for the commit (writes keep their order, so the
cache and the store never disagree for a later reader of the writer's commits).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, TypeVar, cast

import msgspec

from hermes_actors.ids import SessionKind
from hermes_actors.routing import KeyPolicy, LegacyKeyAction, SessionSource, build_session_key, migrate_scopeless_key
from hermes_actors.runtime.live import LiveSession
from hermes_actors.runtime.log_fields import session_extra
from hermes_actors.runtime.protocol import Deliver
from hermes_actors.runtime.services import NewSessionId
from hermes_actors.store import StoreInterface
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

__all__ = ["Routes", "submit_logged"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


def _log_failure(done: Future[Any]) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        _log.error("supervisor: a write failed: %s", exc)


def submit_logged(
    writer: StoreWriter, work: Callable[[StoreInterface], T], then: Callable[[T], object] | None = None
) -> Future[T]:
    """Queue a write without waiting for it; a failure is logged (nothing on the submitting thread waits)."""
    future = writer.submit(work, then=then)
    future.add_done_callback(_log_failure)
    return future


class Routes:
    """The routing directory (see the module docstring). ``live`` is the supervisor's sessions: one with an actor
    runs in this process now, so its stored row need not be checked."""

    __slots__ = (
        "_ending",
        "_keys",
        "_live",
        "_lock",
        "_readers",
        "_routes",
        "_successor_of",
        "_writer",
        "_writing",
    )

    def __init__(self, readers: ReaderPool, writer: StoreWriter, live: Mapping[str, LiveSession]) -> None:
        self._readers = readers
        self._writer = writer
        self._live = live
        self._routes: dict[str, str] = {}  # cache of the directory for sessions with a live entry
        self._keys: dict[str, set[str]] = {}  # session id -> its cached routing keys
        self._ending: set[str] = set()  # sessions whose end is queued but not committed yet
        self._successor_of: dict[str, str] = {}  # routing key -> its ending session (the successor waits for it)
        self._lock = threading.Lock()  # guards _writing, which the writer's thread updates too
        self._writing: dict[str, int] = {}  # routing key -> its route writes queued and not yet committed

    def __len__(self) -> int:
        return len(self._routes)

    def fresh_id(self, new_id: NewSessionId, kind: SessionKind, near: str) -> str:
        """A new session id of ``kind`` (drawn by ``new_id`` near ``near``) that no live entry and no stored session
        has (ids repeat with 2^-32 odds)."""
        while True:
            session_id = new_id(kind, near)
            if session_id in self._live:
                continue
            with self._readers.reader() as store:
                if store.find_session(session_id) is None:
                    return session_id

    def cached(self, routing_key: str) -> str | None:
        """Return the cached session of ``routing_key`` (ending or not), without reading the store."""
        return self._routes.get(routing_key)

    def cache(self, routing_key: str, session_id: str) -> None:
        """Remember that ``routing_key`` leads to ``session_id``."""
        previous = self._routes.get(routing_key)
        if previous is not None and previous != session_id:
            self._keys.get(previous, set()).discard(routing_key)
        self._routes[routing_key] = session_id
        self._keys.setdefault(session_id, set()).add(routing_key)

    def check(self, message: Deliver) -> None:
        """For a message a shard host took (``check_route``): drop the cached route of its key when the store said
        ``stored_route`` instead, unless the cache is ahead of the store here: a route write of this supervisor not
        committed yet, or a session that runs or waits here (its first turn stores its route). Another host may have
        re-pointed the key meanwhile; the next lookup reads the store again."""
        routing_key = message.routing_key
        cached = self._routes.get(routing_key)
        if not message.check_route or cached is None or cached == message.stored_route:
            return
        state = self._live.get(cached)
        if state is not None and state.in_use:
            return
        with self._lock:
            if self._writing.get(routing_key):
                return
        del self._routes[routing_key]
        self._keys.get(cached, set()).discard(routing_key)

    def _write(self, routing_key: str, work: Callable[[StoreInterface], object]) -> Future[object]:
        """Queue a write of ``routing_key``'s route, counted as under way until it commits or fails."""
        with self._lock:
            self._writing[routing_key] = self._writing.get(routing_key, 0) + 1

        def done(_: Future[object]) -> None:
            with self._lock:
                left = self._writing[routing_key] - 1
                if left:
                    self._writing[routing_key] = left
                else:
                    del self._writing[routing_key]

        try:
            future = submit_logged(self._writer, work)
        except BaseException:
            done(Future())  # nothing was queued (the writer is closed)
            raise
        future.add_done_callback(done)
        return future

    def keys_of(self, session_id: str) -> set[str]:
        """Return (a copy of) the cached keys of ``session_id``."""
        return self._keys.get(session_id, set()).copy()

    def forget(self, session_id: str) -> None:
        """Drop the cached keys of ``session_id`` (the store keeps its routes)."""
        for key in self._keys.pop(session_id, set()):
            if self._routes.get(key) == session_id:
                del self._routes[key]

    def begin_end(self, session_id: str) -> None:
        """Mark ``session_id`` as ending: its keys re-resolve to successors, which wait for the end to commit."""
        self._ending.add(session_id)
        for key in self._keys.get(session_id, set()):
            self._successor_of[key] = session_id
        self.forget(session_id)

    def end_settled(self, session_id: str) -> list[str]:
        """The end of ``session_id`` committed or was called off: return the keys whose successors waited for it."""
        self._ending.discard(session_id)
        keys = [key for key, ending in self._successor_of.items() if ending == session_id]
        for key in keys:
            del self._successor_of[key]
        return keys

    def is_ending(self, session_id: str | None) -> bool:
        """Return whether ``session_id``'s end is queued but not committed yet."""
        return session_id in self._ending

    def ending_predecessor(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` led to before if its end is queued but not committed yet (a new
        session of the key waits for it), else ``None``. The stored route is read only while some session ends."""
        ending = self._successor_of.get(routing_key)
        if ending is not None or not self._ending:
            return ending
        with self._readers.reader() as store:
            stored = store.get_route(routing_key)
        return stored if stored in self._ending else None

    def existing(self, routing_key: str) -> str | None:
        """Return the live session ``routing_key`` leads to, without creating one."""
        session_id = self._routes.get(routing_key)
        if session_id is None:
            with self._readers.reader() as store:
                session_id = store.get_route(routing_key)
                state = None if session_id is None else self._live.get(session_id)
                # An actor running here vouches for its session; one that is stopping does not (it may be retiring
                # a session another process ended, whose stored route still leads to it).
                if session_id is not None and (state is None or state.ref is None or state.stopping):
                    record = store.find_session(session_id)
                    if record is None or not record.is_live:
                        session_id = None
            if session_id is not None:
                self.cache(routing_key, session_id)
        if session_id in self._ending:
            return None
        return session_id

    def store(self, routing_key: str, session_id: str) -> Future[None]:
        """Point ``routing_key`` at ``session_id``: cached now, stored by the writer; return the commit's future."""
        committed = self._write(routing_key, lambda store: store.set_route(routing_key, session_id))
        self.cache(routing_key, session_id)
        return cast("Future[None]", committed)

    def unbind(self, routing_key: str, session_id: str) -> None:
        """Delete ``routing_key``'s route, which led to ``session_id``."""
        self._write(routing_key, lambda store: store.unbind_route(routing_key))
        if self._routes.get(routing_key) == session_id:
            del self._routes[routing_key]
        self._keys.get(session_id, set()).discard(routing_key)

    def claim_legacy_dm(self, routing_key: str, source: SessionSource, policy: KeyPolicy) -> str | None:
        """Move an imported scope-less DM route to the first workspace that sees the DM (SPEC section 2).

        Hermes keys name no workspace (and no account): ``agent:main:slack:dm:D1``. On a platform whose keys here
        carry a workspace or tenant (Slack, Teams, Feishu), the first workspace to see D1 claims that transcript:
        the old key is deleted in the same transaction, so no second workspace can, and the session takes the
        workspace (and the account, when it had none) into its principal, so its user can ``/resume`` it.
        """
        if not source.scope_id or source.chat_type != "dm":
            return None
        candidates = {
            build_session_key(msgspec.structs.replace(source, scope_id=None), policy),
            build_session_key(msgspec.structs.replace(source, scope_id=None, account_id=None), policy),
        }
        for legacy in sorted(candidates, key=len, reverse=True):  # the account's own legacy key first
            session_id = self.existing(legacy)
            if session_id is None:
                continue
            decision = migrate_scopeless_key(
                legacy, recorded_scope_id=None, observed_scope_id=source.scope_id, dm_already_claimed=False
            )
            if decision.action != LegacyKeyAction.CLAIM:
                continue

            def claim(store: StoreInterface, legacy: str = legacy, session_id: str = session_id) -> None:
                store.set_route(routing_key, session_id)
                store.unbind_route(legacy)
                record = store.get_session(session_id)
                store.set_principal(
                    session_id,
                    source=record.source,
                    scope_id=record.scope_id or source.scope_id,
                    account_id=record.account_id or source.account_id,
                )

            self._write(routing_key, claim)
            self._routes.pop(legacy, None)
            self._keys.get(session_id, set()).discard(legacy)
            self.cache(routing_key, session_id)
            _log.info(
                "workspace %s claimed the DM transcript of %s (%s)",
                source.scope_id,
                legacy,
                session_id,
                extra=session_extra(session_id, source.platform),
            )
            return session_id
        return None
