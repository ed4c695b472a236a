"""Automatic titles: a session is titled after its first exchange, in the background, once.

When a session's first user message and the agent's reply have committed (and the reply has gone to the outbox),
its :class:`AutoTitle` asks the agent's optional ``title(first_user_text, first_reply, *, timeout_s)`` for a short
descriptive title. The call runs in the agent pool, so it never delays a reply (an agent with ``runs_inline`` never
blocks: it is asked on the session's thread once the reply has left). What it answers is sanitised
(:func:`~hermes_actors.titles.sanitize_title`) and written by the store writer only while the session is still
untitled: a title set meanwhile by hand (``/title``, ``hermesctl sessions rename``) or queued before the first
message wins. A title another session holds takes a number in parentheses (``"title (2)"``), never the
lineage suffix ``"#N"``, which a compression child alone takes (an unrelated ``"title #2"`` would read as the
continuation of ``"title"``). The call gets the shorter of
:data:`TITLE_TIMEOUT_S` and ``runtime.agent_timeout_s`` as its ``timeout_s`` and must keep to it, like a turn; an
answer that comes later (on the runtime's clock) is discarded. A failure (the agent raised, answered late, or gave
an unusable title) is logged and leaves the session untitled; it is not retried, and a session whose first
exchange has passed is never titled automatically (a compression child inherits its parent's lineage title).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, Protocol

import msgspec

from hermes_actors.agents.base import Agent, AgentError, TitleCall, runs_inline, title_call
from hermes_actors.config import RuntimeConfig
from hermes_actors.errors import HermesError, TitleInUseError
from hermes_actors.store import MessageRecord, Role, SessionRecord, StoreInterface
from hermes_actors.store.writer import StoreWriter
from hermes_actors.titles import distinct_title, sanitize_title, unnumbered_title

__all__ = [
    "TITLE_TIMEOUT_S",
    "AutoTitle",
    "BackgroundTracker",
    "TitleServices",
    "free_distinct_title",
    "store_auto_title",
]

TITLE_TIMEOUT_S = 30.0  # at most; a shorter runtime.agent_timeout_s bounds it too

_log = logging.getLogger(__name__)


class BackgroundTracker(Protocol):
    """Counts jobs started beside the turns, so the runtime can wait for them."""

    def track(self, future: Future[Any]) -> None:
        """Count ``future`` until it is done."""
        ...


class TitleServices(Protocol):
    """The runtime parts a title job uses (the runtime's session services provide them)."""

    @property
    def agent(self) -> Agent: ...

    @property
    def agent_pool(self) -> Executor: ...

    @property
    def background(self) -> BackgroundTracker: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> RuntimeConfig: ...

    @property
    def writer(self) -> StoreWriter: ...


def store_auto_title(store: StoreInterface, session_id: str, title: str) -> str | None:
    """Give ``session_id`` the title ``title`` unless it has one (run it in the writer: the check and the write
    commit together); return the title stored, ``None`` when the session is gone or titled already.

    A title ending in ``" #N"`` is written ``" (#N)"`` (:func:`~hermes_actors.titles.unnumbered_title`); one held
    by another session is made unique as ``"title (2)"`` (:func:`free_distinct_title`).

    A free title is one statement (:meth:`~hermes_actors.store.StoreInterface.claim_title`); a taken one whose
    number this process gave last is three (the bare title, the last number still held, the next one claimed).
    """
    title = unnumbered_title(title)  # "Fix issue #42" would read as the 42nd segment of a lineage
    stored = store.claim_title(session_id, title)
    if stored is not None:
        return stored
    after = _after_last_given(store, title)
    if after is not None:
        stored = store.claim_title(session_id, distinct_title(title, after))  # the claim checks it is free
        if stored is not None:
            _last_numbers.put(title, after)
            return stored
    record = store.find_session(session_id)
    if record is None or record.title is not None:
        return None
    candidate = free_distinct_title(store, title)
    stored = store.claim_title(session_id, candidate)
    if stored is None:  # another writer (a shard host) took it between the look-up and the claim
        holder = store.title_holder(candidate)
        raise TitleInUseError(candidate, holder or "another session")
    return stored


def _taken(store: StoreInterface, title: str, number: int) -> bool:
    """Whether ``"<title> (number)"`` is held (number 1 and below: the bare title, taken when asked)."""
    return number <= 1 or store.title_holder(distinct_title(title, number)) is not None


def _after_last_given(store: StoreInterface, title: str) -> int | None:
    """The number after the one this process gave ``title`` last, when that one is still held (one look-up);
    ``None`` when none was given or it is free now (a hint from another store, a deleted session)."""
    last = _last_numbers.get(title)
    return last + 1 if last is not None and _taken(store, title, last) else None


class _LastNumbers:
    """The number each title was last made unique with, by :func:`free_distinct_title` in this process: where the
    next search starts. Only a hint (another store, a deleted session): the store is asked whether it holds."""

    __slots__ = ("_lock", "_numbers")

    LIMIT = 1024  # titles remembered; the oldest is forgotten first

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._numbers: dict[str, int] = {}

    def get(self, title: str) -> int | None:
        return self._numbers.get(title)

    def put(self, title: str, number: int) -> None:
        with self._lock:
            self._numbers.pop(title, None)
            if len(self._numbers) >= self.LIMIT:
                del self._numbers[next(iter(self._numbers))]
            self._numbers[title] = number


_last_numbers = _LastNumbers()


def free_distinct_title(store: StoreInterface, title: str) -> str:
    """Return ``"<title> (N)"`` for a free N near the top of the numbers taken, in two index lookups when the
    number this process gave ``title`` last is the top one, else in O(log N).

    Automatic titles of unrelated sessions collide often ("Hello there" thousands of times), so scanning every
    "<title> (N)" to find the largest N would make each new session cost more than the last. The number after the
    last one given is taken when it is free and that one is still held; otherwise doubling finds a free number and
    bisection walks back to the first free one after the taken run; a gap lower down (a deleted session) is left
    alone. The number is in parentheses, not ``#N``: that is a compression lineage's.
    """

    def taken(number: int) -> bool:
        return _taken(store, title, number)

    after = _after_last_given(store, title)
    if after is not None and not taken(after):
        number = after
    else:
        low, high = 1, 2  # "(1)" is the bare title, which is taken
        while taken(high):
            low, high = high, high * 2
        while high - low > 1:  # taken(low) (or low is the bare title), not taken(high)
            middle = (low + high) // 2
            if taken(middle):
                low = middle
            else:
                high = middle
        number = high
    _last_numbers.put(title, number)
    return distinct_title(title, number)


def _first_exchange_ends_here(history: Sequence[MessageRecord], added: int) -> bool:
    """Whether the first assistant message of ``history`` is among its last ``added`` messages."""
    first_reply = next((i for i, m in enumerate(history) if m.role == Role.ASSISTANT), None)
    return first_reply is not None and first_reply >= len(history) - added


class AutoTitle:
    """The automatic title of one session, driven by its turns (on the session's thread).

    :meth:`after_exchange` starts the job after the first exchange; :meth:`applied` folds the stored title into
    the session's cached record once the job has finished.
    """

    __slots__ = ("_decided", "_future", "_inline", "_services", "session_id")

    def __init__(self, services: TitleServices, session_id: str) -> None:
        self._services = services
        self.session_id = session_id
        self._decided = not services.config.auto_titles  # True once this session needs no more thought
        self._future: Future[str | None] | None = None  # the job in the agent pool
        self._inline: tuple[str | None] | None = None  # what an inline job stored, once it ran (no future kept)

    @property
    def job(self) -> Future[str | None] | None:
        """The running or finished job (its result is the title stored, or ``None``); ``None`` before it starts."""
        if self._inline is not None:
            done: Future[str | None] = Future()
            done.set_result(self._inline[0])
            return done
        return self._future

    def after_exchange(
        self,
        record: SessionRecord | None,
        history: Sequence[MessageRecord],
        *,
        added: int,
        user_text: str,
        reply_text: str | None,
    ) -> None:
        """Start the title job if the turn that just committed ``added`` messages of ``history`` (with the reply
        ``reply_text``; ``None`` when the agent gave none) was the session's first exchange and it has no title."""
        if self._decided or reply_text is None or record is None:
            return
        self._decided = True  # whatever happens next, this session's title is settled here
        if record.title is not None or not _first_exchange_ends_here(history, added):
            return
        call = title_call(self._services.agent)
        if call is None:
            _log.debug("session %s: the agent offers no title call; the session stays untitled", self.session_id)
            return
        if runs_inline(self._services.agent):
            # It never blocks: ask it here, after the reply has left, and wait for the write, so the next turn (a
            # /compress that numbers the child's title after this one) already sees the title.
            self._inline = (self._ask_and_store(call, user_text, reply_text),)
        else:
            try:
                # In a copy of the session thread's context: the job's log lines are about the session too.
                run = contextvars.copy_context().run
                self._future = self._services.agent_pool.submit(run, self._ask_and_store, call, user_text, reply_text)
            except RuntimeError as exc:  # the pool has shut down: the runtime is stopping
                _log.info("session %s: no automatic title: %s", self.session_id, exc)
            else:
                self._services.background.track(self._future)

    @property
    def in_flight(self) -> bool:
        """Whether a job in the agent pool has started and not finished: its title may be stored already."""
        return self._future is not None and not self._future.done()

    def applied(self, record: SessionRecord | None) -> SessionRecord | None:
        """Return ``record`` with the automatic title once the job has stored one (a title set since wins)."""
        if record is None or record.title is not None:
            return record
        if self._inline is not None:
            title = self._inline[0]
        else:
            future = self._future
            if future is None or not future.done() or future.cancelled():
                return record
            title = future.result()
        return record if title is None else msgspec.structs.replace(record, title=title)

    def _ask(self, call: TitleCall, user_text: str, reply_text: str) -> str | None:
        """Ask the agent; return the sanitised title or ``None`` (logged)."""
        timeout = min(TITLE_TIMEOUT_S, self._services.config.agent_timeout_s)
        clock = self._services.clock
        started = clock()
        try:
            answer = call(user_text, reply_text, timeout_s=timeout)
            took = clock() - started
            if took > timeout:
                _log.warning(
                    "session %s: no automatic title: the agent took %.1f s, longer than %g s; it stays untitled",
                    self.session_id,
                    took,
                    timeout,
                )
                return None
            title = sanitize_title(answer if isinstance(answer, str) else None)
        except (AgentError, HermesError) as exc:
            _log.warning("session %s: no automatic title: %s; it stays untitled", self.session_id, exc)
            return None
        except Exception:
            _log.exception("session %s: no automatic title: the agent's title call raised", self.session_id)
            return None
        if title is None:
            _log.warning("session %s: no automatic title: the agent answered %r", self.session_id, answer)
        return title

    def _ask_and_store(self, call: TitleCall, user_text: str, reply_text: str) -> str | None:
        """Ask, then write and wait for the commit; return the title stored (``None``: none, logged)."""
        title = self._ask(call, user_text, reply_text)
        if title is None:
            return None
        try:
            stored = self._services.writer.call(lambda store: store_auto_title(store, self.session_id, title))
        except Exception as exc:  # the writer has stopped (shutdown), the database refused the write
            _log.warning("session %s: automatic title %r not stored: %s", self.session_id, title, exc)
            return None
        if stored is None:  # logged here, not in the write: this thread's lines carry the session's fields
            _log.info("session %s: automatic title %r not needed: the session has a title", self.session_id, title)
        else:
            _log.info("session %s: titled %r automatically", self.session_id, stored)
        return stored
