"""The gateway: the durable edge in front of the supervisor, and the runtime that wires everything up.

``Gateway.accept(inbound)`` dedupes on (platform, account, platform message id) and commits the inbox row before
it returns, so an adapter acknowledges the platform only once the message is safe. At start the gateway replays
every committed inbox row without a completed turn (in id order, so per session in order) and queues every unsent
outbox row. ``gateway.media`` is the media store adapters save attachments into before they accept a message:
``media/`` beside the database, so ``$HERMES_HOME/media`` for the daemon.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import tzinfo
from pathlib import Path

import msgspec
import pykka

from hermes_actors.agents.base import Agent, EchoAgent
from hermes_actors.config import RuntimeConfig, SessionsConfig
from hermes_actors.errors import StoreError
from hermes_actors.lifecycle.policy import ResetConfig
from hermes_actors.lifecycle.resets import ResetScheduler, background_hook
from hermes_actors.media import Describe, MediaConfig, MediaStore
from hermes_actors.messages import InboundMessage, OutboundMessage, decode_inbound, encode
from hermes_actors.routing import build_session_key
from hermes_actors.runtime.leases import lease_owner_alive, new_lease_owner
from hermes_actors.runtime.outbox import OutboxRouter
from hermes_actors.runtime.protocol import (
    Deliver,
    Delivery,
    HandoffResult,
    PassivationTick,
    SupervisorStatistics,
    TurnOutcome,
)
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.supervisor import Supervisor
from hermes_actors.runtime.timers import TimerService
from hermes_actors.store import Store, Synchronous
from hermes_actors.store.attachments import MEDIA_DIR_NAME, media_dir_for
from hermes_actors.store.connection import check_writable
from hermes_actors.store.durable import InboxRow, OutboxRow
from hermes_actors.store.prune import PruneResult, auto_prune
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter, WriterClosedError
from platforms.base import ReplySender

__all__ = ["AcceptResult", "Gateway", "PollCursor"]

_log = logging.getLogger(__name__)

QUEUE_PRUNE_INTERVAL_S = 3600.0
QUEUE_PRUNE_CHUNK = 5000


class PollCursor(msgspec.Struct, frozen=True, kw_only=True):
    """A platform's poll position, stored with the inbox rows it covers."""

    platform: str
    cursor: str
    account_id: str = ""


class AcceptResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``accept`` did: the inbox row, or ``duplicate`` for a redelivery already seen."""

    routing_key: str
    inbox_id: int | None
    duplicate: bool


class Gateway:
    """The runtime of one process: store writer, readers, supervisor, outboxes and timers."""

    pruned: PruneResult | None = None  # what auto-prune did at start, if it ran
    timers: TimerService  # set in __init__ after the outbox, whose retries it wakes

    def __init__(
        self,
        path: str | Path,
        *,
        config: RuntimeConfig | None = None,
        agent: Agent | None = None,
        senders: Iterable[ReplySender] = (),
        synchronous: Synchronous | str = Synchronous.NORMAL,
        on_turn: Callable[[TurnOutcome], None] | None = None,
        clock: Callable[[], float] = time.time,
        tick_interval_s: float = 5.0,
        reset: ResetConfig | None = None,
        tz: tzinfo | None = None,
        sessions: SessionsConfig | None = None,
        recover_platforms: Collection[str] | None = None,
        schedule_resets: bool = True,
        media: MediaConfig | None = None,
        describe_media: Describe | None = None,
    ) -> None:
        """``recover_platforms`` limits start-up replay to those platforms' rows (``hermesctl chat`` without a
        daemon replays only terminal turns); ``schedule_resets=False`` arms no reset timers (a short-lived
        in-process gateway must not end other platforms' sessions). ``media`` limits attachments and
        ``describe_media`` replaces its ``describe`` step."""
        self.config = config or RuntimeConfig()
        self.media = MediaStore(
            media_dir_for(path) or Path(path).parent / MEDIA_DIR_NAME, media, describe=describe_media
        )
        self._recover_platforms = None if recover_platforms is None else frozenset(recover_platforms)
        self.lease_owner = new_lease_owner()
        self._clock = clock
        store = Store.open(path, synchronous=synchronous, clock=clock)
        if sessions is not None and sessions.auto_prune:
            # Before the writer owns the connection: a prune commits in batches, outside any group commit.
            self.pruned = auto_prune(
                store,
                enabled=True,
                retention_days=sessions.retention_days,
                vacuum_after_prune=sessions.vacuum_after_prune,
                min_interval_hours=sessions.min_interval_hours,
                now=clock(),
            )
            if self.pruned is not None:
                _log.info("auto-prune removed %d ended sessions", self.pruned.sessions_deleted)
        self._writer = StoreWriter(store)
        self._readers = ReaderPool(path)
        self._outbox = OutboxRouter(
            self._writer,
            retry_base_s=self.config.outbox_retry_base_s,
            retry_max_s=self.config.outbox_retry_max_s,
            clock=clock,
            on_result=self._delivery_report,
            wake_at=lambda name, due_at, callback: self.timers.once(name, due_at, callback),
        )
        for sender in senders:
            self._outbox.register(sender)
        self._agent_pool = ThreadPoolExecutor(self.config.max_concurrent_agent_calls, thread_name_prefix="hermes-agent")
        self._services = SessionServices(
            writer=self._writer,
            readers=self._readers,
            agent=agent or EchoAgent(),
            agent_pool=self._agent_pool,
            outbox=self._outbox,
            config=self.config,
            lease_owner=self.lease_owner,
            owner_alive=lease_owner_alive,
            clock=clock,
            sessions=sessions,
        )
        self.timers = TimerService(writer=self._writer, clock=clock)
        self.resets = ResetScheduler(
            reset or ResetConfig(),
            self.timers,
            lambda due: self._supervisor.tell(due),
            clock=clock,
            tz=tz,
            background_started_at=background_hook(self._services.agent),
        )
        self._supervisor = Supervisor.start(
            self._services, on_turn=on_turn, on_activity=self.resets.touch, on_end=self.resets.forget
        )
        self.timers.every("passivation", tick_interval_s, self.tick)
        self.timers.every("queue-prune", QUEUE_PRUNE_INTERVAL_S, self.prune_queues)
        self.timers.every("inbox-released", tick_interval_s, self._replay_released)
        self._deferred: dict[int, InboxRow] = {}  # pending rows of another live process, by id (see _recover)
        self._closed = threading.Event()
        self._recover()
        if schedule_resets:
            with self._readers.reader() as store:
                self.resets.rebuild(store)
        self.timers.start()

    # -- edge ----------------------------------------------------------------------------------------------------

    def accept(self, inbound: InboundMessage) -> AcceptResult:
        """Commit ``inbound`` to the inbox (or recognise a redelivery) and queue its turn; return once it is safe."""
        return self.submit(inbound).result(timeout=self.config.ask_timeout_s)

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        """Commit a batch of inbound messages in one transaction, with the poll ``cursor`` that covers them.

        A platform whose position is only confirmed by the next poll (Telegram ``getUpdates`` offsets, iLink
        ``get_updates_buf``) stores that position here, so after a crash it neither skips nor replays the batch.
        """
        return self.submit_many(batch, cursor=cursor).result(timeout=self.config.ask_timeout_s)

    def submit(self, inbound: InboundMessage) -> Future[AcceptResult]:
        """:meth:`accept` without waiting: the future resolves once the inbox row has committed.

        For an entry point with many requests in flight (an HTTP server): acknowledge each request when its
        future resolves. Messages submitted in order are committed, and their turns queued, in that order.
        """
        commit, dispatch = self._inbox_commit([inbound], None)
        return self._writer.submit(lambda store: commit(store)[0], then=lambda result: dispatch([result]))

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        """:meth:`accept_many` without waiting: the future resolves once the batch (and ``cursor``) committed."""
        commit, dispatch = self._inbox_commit(batch, cursor)
        return self._writer.submit(commit, then=dispatch)

    def _inbox_commit(
        self, batch: Sequence[InboundMessage], cursor: PollCursor | None
    ) -> tuple[Callable[[Store], list[AcceptResult]], Callable[[list[AcceptResult]], None]]:
        """The write that stores ``batch`` in the inbox, and what queues its turns once that has committed."""
        keyed = [(build_session_key(m.source, self.config.key_policy), m) for m in batch]

        def commit(store: Store) -> list[AcceptResult]:
            results = []
            for key, m in keyed:
                inbox_id = store.inbox.add(
                    platform=m.source.platform,
                    account_id=m.source.account_id or "",
                    platform_message_id=m.message_id,
                    routing_key=key,
                    payload=encode(m),
                    owner=self.lease_owner,
                )
                results.append(AcceptResult(routing_key=key, inbox_id=inbox_id, duplicate=inbox_id is None))
            if cursor is not None:
                store.kv.set_cursor(cursor.platform, cursor.cursor, cursor.account_id)
            return results

        def dispatch(results: list[AcceptResult]) -> None:
            # On the writer thread, right after the commit: turns are queued in commit order.
            for (_, message), result in zip(keyed, results, strict=True):
                if result.inbox_id is not None:
                    delivery = Delivery(inbox_id=result.inbox_id, message=message)
                    self._supervisor.tell(Deliver(routing_key=result.routing_key, delivery=delivery))

        return commit, dispatch

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` from now on."""
        self._supervisor.rebind(routing_key, session_id)

    def session_for(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` reaches now."""
        return self._supervisor.session_for(routing_key)

    def statistics(self) -> SupervisorStatistics:
        """Return the supervisor's snapshot."""
        return self._supervisor.statistics()

    def backlog(self) -> tuple[int, int]:
        """Return (inbound messages without a finished turn, replies not yet sent or given up)."""
        with self.read() as store:
            return store.inbox.depth(), store.outbox.backlog()

    def replace_sender(self, sender: ReplySender) -> None:
        """Deliver ``sender.platform``'s replies through ``sender`` from now on (an adapter reloaded by SIGHUP)."""
        self._outbox.replace(sender)

    def reconfigure_resets(self, reset: ResetConfig) -> int:
        """Apply new reset policies to every live session now; return how many deadlines are armed."""
        with self.read() as store:
            return self.resets.reconfigure(reset, store)

    def tick(self) -> None:
        """Passivate idle actors, renew leases and retry due replies (the timer calls this periodically)."""
        self._supervisor.tell(PassivationTick())
        self._outbox.retry_due()

    def prune_queues(self) -> None:
        """Delete answered inbox rows and finished outbox rows older than ``runtime.queue_retention_days``.

        Without it both tables grow with every message forever. The inbox rows are how a platform's redelivery is
        recognised, so the retention must outlast every platform's retry window. Rows go in chunks of
        :data:`QUEUE_PRUNE_CHUNK`, each its own commit, so a large backlog (the first prune after an upgrade)
        never holds up turns for long.
        """
        before = self._clock() - self.config.queue_retention_days * 86400

        def prune(store: Store) -> int:
            inbox = store.inbox.prune_completed(before, limit=QUEUE_PRUNE_CHUNK)
            outbox = store.outbox.prune_finished(before, limit=QUEUE_PRUNE_CHUNK)
            if inbox or outbox:
                _log.info("pruned %d answered inbox rows and %d finished replies", inbox, outbox)
            return max(inbox, outbox)

        def again(done: Future[int]) -> None:
            if not done.cancelled() and done.exception() is None and done.result() == QUEUE_PRUNE_CHUNK:
                self._submit_quietly(prune, again)

        self._submit_quietly(prune, again)

    def _submit_quietly(self, work: Callable[[Store], int], then: Callable[[Future[int]], None]) -> None:
        with contextlib.suppress(WriterClosedError):  # stopping: the next start prunes
            future = self._writer.submit(work)
            future.add_done_callback(then)  # before tracking: the next chunk is counted before this one ends
            self._services.background.track(future)

    def _delivery_report(self, message: OutboundMessage, error: str | None) -> None:
        """Tell the supervisor how a handoff's first message went (other deliveries need no report)."""
        if message.session_id is not None and self._services.handoffs.take(message.reply_to):
            self._supervisor.tell(HandoffResult(session_id=message.session_id, error=error))

    def read(self) -> AbstractContextManager[Store]:
        """Borrow a read-only store: ``with gateway.read() as store: ...``."""
        return self._readers.reader()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until no turn is queued or running, no background job (an automatic title) runs and no reply can be
        sent right now; return whether it happened within ``timeout``.

        Replies waiting for a retry do not count: they move only when the clock reaches their retry time. Writes
        submitted before it returns (delivery confirmations) are committed. A supervisor or writer too slow to
        answer counts as busy, not as an error.
        """
        deadline = time.monotonic() + timeout
        pause = 0.001
        while time.monotonic() < deadline:
            try:
                stats = self.statistics()
            except pykka.Timeout:
                stats = None
            idle = (
                stats is not None
                and stats.queued_messages == 0
                and stats.running == 0
                and self._services.background.running() == 0
            )
            if idle and self._outbox.in_flight() == 0:
                try:  # what was submitted so far is committed now
                    self._writer.call(lambda store: None, timeout=max(deadline - time.monotonic(), 0.1))
                except (TimeoutError, WriterClosedError):
                    return False
                return True
            threading.Event().wait(pause)
            pause = min(pause * 2, 0.05)
        return False

    _STORE_PROBE_TIMEOUT_S = 2.0
    _STORE_VERDICT_S = 1.0
    _store_verdict: tuple[float, str | None] = (float("-inf"), None)  # (when, why not), for store_unwritable_reason

    def store_unwritable_reason(self) -> str | None:
        """Why the store cannot take writes now (a full or read-only disk, a read-only file, a writer that does not
        answer within 2 s), or ``None`` when it can.

        The probe is :func:`~hermes_actors.store.connection.check_writable` on the writer's thread: a look at the
        disk and a write that changes nothing, so nothing is committed. The verdict is kept for a second, so
        ``/health`` stays cheap however often it is asked. A stopped gateway has no verdict (``None``).
        """
        checked_at, reason = self._store_verdict
        if time.monotonic() - checked_at < self._STORE_VERDICT_S:
            return reason
        try:
            probe = self._writer.submit(lambda store: check_writable(store.connection))
            probe.result(timeout=self._STORE_PROBE_TIMEOUT_S)
            reason = None
        except WriterClosedError:
            reason = None  # stopped on purpose, not a store fault: hermesd stops its entry points before this
        except StoreError as exc:
            reason = str(exc)
        except TimeoutError:
            reason = (
                f"the store writer did not answer within {self._STORE_PROBE_TIMEOUT_S:.0f} s (a long write, or a "
                "lock another process holds); see the log"
            )
        self._store_verdict = (time.monotonic(), reason)
        return reason

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Replay what an earlier process left: unanswered inbox rows (in id order) and unsent replies.

        A row is replayed here only if this process may run it: its owner (the process that accepted it) is gone,
        and the session it leads to is not leased by another live process; this process then claims the row and
        takes that lease in the same transaction. Rows of a live owner are left to it and looked at again every
        tick (:meth:`_replay_released`), so a turn is never run by two processes.
        """
        platforms = self._recover_platforms

        def pending_work(store: Store) -> tuple[list[InboxRow], list[OutboxRow]]:
            for (holder,) in store.connection.execute("SELECT DISTINCT owner FROM leases"):
                if not lease_owner_alive(str(holder)):
                    store.leases.release_all(str(holder))
            outbox = store.outbox.unsent(limit=1_000_000)
            if platforms is not None:
                outbox = [row for row in outbox if row.platform in platforms]
            return self._claim_pending(store), outbox

        inbox, outbox = self._writer.call(pending_work)
        # Old replies first: a replayed turn's new reply to the same chat must not overtake them.
        queued = self._outbox.redeliver(outbox)
        self._replay(inbox)
        if inbox or outbox:
            _log.info("recovery: replaying %d inbound messages, delivering %d replies", len(inbox), queued)
        if self._deferred:
            _log.info("recovery: %d inbound messages belong to another live process; left to it", len(self._deferred))

    def _claim_pending(self, store: Store) -> list[InboxRow]:
        """Inside a write: claim the pending rows this process may run (see :meth:`_recover`); defer the others."""
        owner, ttl = self.lease_owner, self.config.lease_ttl_s
        claimed: list[InboxRow] = []
        deferred: dict[int, InboxRow] = {}
        blocked: set[str] = set()  # routing keys with a deferred row: later rows of theirs wait too (order)
        for row in store.inbox.pending():
            if self._recover_platforms is not None and row.platform not in self._recover_platforms:
                continue
            if row.owner == owner:
                continue  # accepted by this process: already queued
            mine = row.owner is None or not lease_owner_alive(row.owner)
            session_id = store.get_route(row.routing_key)
            if mine and session_id is not None and store.find_session(session_id) is not None:
                granted = store.leases.grant(session_id, owner, ttl)
                if isinstance(granted, str) and not lease_owner_alive(granted):
                    store.leases.release(session_id, granted)
                    granted = store.leases.grant(session_id, owner, ttl)
                mine = isinstance(granted, int)
            if not mine or row.routing_key in blocked:
                deferred[row.id] = row
                blocked.add(row.routing_key)
                continue
            store.inbox.claim(row.id, owner)
            claimed.append(row)
        self._deferred = deferred
        return claimed

    def _replay(self, rows: Sequence[InboxRow]) -> None:
        for row in rows:
            delivery = Delivery(inbox_id=row.id, message=decode_inbound(row.payload), replayed=True)
            self._supervisor.tell(Deliver(routing_key=row.routing_key, delivery=delivery))

    def _replay_released(self) -> None:
        """Replay deferred rows whose owner has finished them, died or released the session (a timer calls this)."""
        if not self._deferred or self._closed.is_set():
            return

        def claim(store: Store) -> list[InboxRow]:
            still = store.inbox.pending_among(list(self._deferred))
            self._deferred = {i: row for i, row in self._deferred.items() if i in still}
            if not self._deferred:
                return []
            return self._claim_pending(store)

        with contextlib.suppress(WriterClosedError, TimeoutError):
            rows = self._writer.call(claim, timeout=self.config.ask_timeout_s)
            if rows:
                _log.info("replaying %d inbound messages another process left", len(rows))
            self._replay(rows)

    def stop(self, timeout: float = 30.0) -> None:
        """Finish queued turns and send what can be sent (up to ``timeout``), release leases and close the store.

        ``timeout`` bounds the drain, the outbox's sends in progress included: a reply not sent by then stays
        queued in the store for the next start (one whose send was cut has its attempt counted, so it goes again
        flagged as a possible duplicate). Stopping the other actors afterwards gets a few seconds of its own, so
        a zero drain (a start that failed) still closes everything.
        """
        if self._closed.is_set():
            return
        self._closed.set()
        deadline = time.monotonic() + timeout
        self.wait_idle(timeout)
        closing = max(timeout, 5.0)
        self.timers.stop()
        self._supervisor.stop(timeout=closing)
        self._agent_pool.shutdown(wait=False, cancel_futures=True)
        self._outbox.stop(timeout=max(deadline - time.monotonic(), 0.0))
        self._writer.call(lambda store: store.leases.release_all(self.lease_owner))
        self._writer.stop(closing)
        self._readers.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
