"""The gateway: the durable edge in front of the supervisor, and the admin calls of a running runtime.

``Gateway.accept(inbound)`` dedupes on (platform, account, platform message id) and commits the inbox row before
it returns, so an adapter acknowledges the platform only once the message is safe. At start the gateway replays
every committed inbox row without a completed turn (in id order, so per session in order) and queues every unsent
outbox row (:mod:`hermes_actors.runtime.recovery`). ``gateway.media`` is the media store adapters save attachments
into before they accept a message: ``media/`` beside the database, so ``$HERMES_HOME/media`` for the daemon. The
parts behind it are built by :func:`hermes_actors.runtime.assembly.assemble`. ``gateway.platforms`` is where the
daemon records each entry point's state; :meth:`Gateway.readiness`, :meth:`Gateway.vitals` and
:meth:`Gateway.metrics` are what health checks, ``hermesctl status`` and ``/metrics`` read.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar, Unpack

import pykka
from msgspec.structs import replace

from hermes_actors.agents.base import model_of, probe_call
from hermes_actors.agents.tools import tool_servers
from hermes_actors.config import BusyConfig
from hermes_actors.errors import StoreError
from hermes_actors.lifecycle.policy import ResetConfig
from hermes_actors.messages import InboundMessage, ToolServerHealth, encode
from hermes_actors.ports import (
    AcceptResult,
    AgentInfo,
    DiskSpace,
    Exposition,
    PollCursor,
    Readiness,
    ReplySender,
    Vitals,
)
from hermes_actors.routing import build_session_key
from hermes_actors.runtime.admin import delete_in_store
from hermes_actors.runtime.agent_health import AgentHealth
from hermes_actors.runtime.agent_roster import AgentRoster
from hermes_actors.runtime.assembly import GatewayOptions, assemble
from hermes_actors.runtime.job_book import StoreJobs
from hermes_actors.runtime.leases import new_lease_owner
from hermes_actors.runtime.platform_board import PlatformBoard
from hermes_actors.runtime.protocol import AdminChange, AgentFailure, Deliver, Delivery, SupervisorStatistics
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.store import Store, StoreInterface  # Store: to open the home's SQLite file by its path
from hermes_actors.store.prune import PruneResult
from hermes_actors.store.writer import WriterClosedError

__all__ = ["AcceptResult", "Gateway", "PollCursor"]  # the ports re-exported for old imports

T = TypeVar("T")


class Gateway:
    """The edge of one process's runtime: accept, dedupe and dispatch, and the admin calls."""

    def __init__(self, path: str | Path, **options: Unpack[GatewayOptions]) -> None:
        """Build the runtime of the store at ``path`` (see :class:`~hermes_actors.runtime.assembly.GatewayOptions`),
        replay what an earlier process left and start the timers."""
        runtime = assemble(path, options)
        self._runtime = runtime
        self.database = Path(path)
        self.config = runtime.config
        self.media = runtime.media
        self.lease_owner = runtime.lease_owner
        self.pruned: PruneResult | None = runtime.pruned  # what auto-prune did at start, if it ran
        self.timers = runtime.timers
        self.resets = runtime.resets
        self.platforms = PlatformBoard()  # the daemon records its entry points here
        self._metrics = runtime.metrics
        self._writer = runtime.writer
        self._readers = runtime.readers
        self._supervisor = runtime.supervisor
        self._closed = threading.Event()
        # Whether the default agent answers (its probe, and every agent call's outcome): before any turn runs.
        self.agent_health = AgentHealth(probe_call(runtime.services.agent), options.get("agent_probe"))
        runtime.metrics.on_agent_call = self._agent_called
        runtime.start()

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
        # One message, no cursor: one inbox statement, so the write needs no savepoint of its own (atomic).
        return self._writer.submit(lambda store: commit(store)[0], then=lambda result: dispatch([result]), atomic=True)

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        """:meth:`accept_many` without waiting: the future resolves once the batch (and ``cursor``) committed."""
        commit, dispatch = self._inbox_commit(batch, cursor)
        return self._writer.submit(commit, then=dispatch)

    def _inbox_commit(
        self, batch: Sequence[InboundMessage], cursor: PollCursor | None
    ) -> tuple[Callable[[StoreInterface], list[AcceptResult]], Callable[[list[AcceptResult]], None]]:
        """The write that stores ``batch`` in the inbox, and what queues its turns once that has committed."""
        keyed = [(build_session_key(m.source, self.config.key_policy), m) for m in batch]

        def commit(store: StoreInterface) -> list[AcceptResult]:
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
                else:
                    self._metrics.duplicates.labels(message.source.platform).inc()

        return commit, dispatch

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` from now on."""
        self._supervisor.rebind(routing_key, session_id)

    def admin(self, change: AdminChange) -> None:
        """Hand an operator's rename or end to the session's actor (see :meth:`LifecycleCommands.admin
        <hermes_actors.lifecycle.handlers.LifecycleCommands.admin>`); its future says when it was applied."""
        self._supervisor.admin(change)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session (ended first by the caller) on a connection of its own, under its lease, so its media
        files go once the deletion has committed; whether it existed."""
        with Store.open(self.database) as store:
            return delete_in_store(store, session_id, new_lease_owner())

    @property
    def agents(self) -> AgentRoster:
        """The named agents sessions are answered by, and the bindings between them."""
        return self._runtime.services.agents

    @property
    def jobs(self) -> StoreJobs:
        """The scheduled turns on this gateway's store, fired here (:mod:`hermes_actors.runtime.jobs`)."""
        assert self._runtime.jobs is not None  # wire sets it
        return self._runtime.jobs

    @property
    def watch(self) -> TurnWatch:
        """Who watches which message's turn live (entry points register, turns report)."""
        return self._runtime.services.watch

    def session_for(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` reaches now."""
        return self._supervisor.session_for(routing_key)

    def statistics(self) -> SupervisorStatistics:
        """Return the supervisor's snapshot."""
        return self._supervisor.statistics()

    def readiness(self) -> Readiness:
        """Whether the store takes writes (:meth:`store_unwritable_reason`) and each entry point is up, with the
        free space of the store's disk, the agent's kind, model and health (probed at most once per
        ``agent.probe.interval_s``), and the state of every agent's MCP servers."""
        try:
            usage = shutil.disk_usage(self.database.parent)
            disk = DiskSpace(path=str(self.database.parent), free_bytes=usage.free, total_bytes=usage.total)
        except Exception:  # informational: a failed look at the disk never fails a health check
            disk = None
        agent = self._runtime.services.agent
        kind = type(agent).__name__.removesuffix("Agent").lower() or "agent"
        health = self.agent_health.check()  # probes the agent at most once per agent.probe.interval_s
        info = AgentInfo(
            kind=kind,
            model=model_of(agent),
            tool_servers=self._tool_servers(),
            state=health.state.value,
            last_error=health.last_error,
            since=health.since,
            probed_at=health.probed_at,
            fails_readiness=self.agent_health.config.fail_readiness and health.state == "degraded",
        )
        return Readiness(store=self.store_unwritable_reason(), platforms=self.platforms.states(), disk=disk, agent=info)

    def _agent_called(self, outcome: str, result: object) -> None:
        """An agent call ended (:attr:`Metrics.on_agent_call`): a failure marks the agent degraded, an answer ok."""
        if outcome == "cancelled":
            return  # stopped by /stop or a reset: says nothing of the agent
        self.agent_health.called((result.error or result.text) if isinstance(result, AgentFailure) else None)

    def _tool_servers(self) -> list[ToolServerHealth]:
        """The MCP servers of every named agent (:func:`~hermes_actors.agents.tools.tool_servers`)."""
        agents = self._runtime.services.agents.agents
        return [replace(server, agent=named.name) for named in agents for server in tool_servers(named.agent)]

    def vitals(self) -> Vitals:
        """The runtime's numbers now, as ``/metrics`` has them (reads the store's queues)."""
        return self._metrics.vitals()

    def metrics(self) -> Exposition:
        """Every metric series, in Prometheus's text format (reads the store's queues)."""
        return self._metrics.exposition()

    def backlog(self) -> tuple[int, int]:
        """Return (inbound messages without a finished turn, replies not yet sent or given up)."""
        with self.read() as store:
            return store.inbox.depth(), store.outbox.backlog()

    def replace_sender(self, sender: ReplySender) -> None:
        """Deliver ``sender.platform``'s replies through ``sender`` from now on (an adapter reloaded by SIGHUP)."""
        self._runtime.outbox.replace(sender)

    def reconfigure_resets(self, reset: ResetConfig) -> int:
        """Apply new reset policies to every live session now; return how many deadlines are armed."""
        with self.read() as store:
            return self.resets.reconfigure(reset, store)

    def reconfigure_busy(self, busy: BusyConfig) -> None:
        """Apply new busy policies from the next message on (queued messages stay queued, in order)."""
        self._runtime.services.busy = busy

    def tick(self) -> None:
        """Passivate idle actors, renew leases and retry due replies (the timer calls this periodically)."""
        self._runtime.tick()

    def prune_queues(self) -> None:
        """Delete answered inbox rows and finished outbox rows older than ``runtime.queue_retention_days``.

        Without it both tables grow with every message forever. The inbox rows are how a platform's redelivery is
        recognised, so the retention must outlast every platform's retry window. A timer calls it hourly.
        """
        self._runtime.prune_queues()

    def write(self, work: Callable[[StoreInterface], T], *, timeout: float | None = None) -> T:
        """Run ``work(store)`` in the writer's next commit and return its result (or raise its exception)."""
        return self._writer.call(work, timeout=self.config.ask_timeout_s if timeout is None else timeout)

    def read(self) -> AbstractContextManager[StoreInterface]:
        """Borrow a read-only store: ``with gateway.read() as store: ...``."""
        return self._readers.reader()

    def submit_write(self, work: Callable[[StoreInterface], T]) -> Future[T]:
        """:meth:`write` without waiting: the future resolves after that commit."""
        return self._writer.submit(work)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until no turn is queued or running, no actor is still stopping (a passivation or eviction has
        released its lease and left :attr:`SupervisorStatistics.live_actors`), no background job (an automatic
        title) runs and no reply can be sent right now; return whether it happened within ``timeout``.

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
                and stats.stopping_actors == 0
                and self._runtime.services.background.running() == 0
            )
            if idle and self._runtime.outbox.in_flight() == 0:
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

        The probe is ``Store.check_writable()`` on the writer's thread: a look at the
        disk and a write that changes nothing, so nothing is committed. The verdict is kept for a second, so
        ``/health`` stays cheap however often it is asked. A stopped gateway has no verdict (``None``).
        """
        checked_at, reason = self._store_verdict
        if time.monotonic() - checked_at < self._STORE_VERDICT_S:
            return reason
        try:
            probe = self._writer.submit(lambda store: store.check_writable())
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

    def stop(self, timeout: float = 30.0) -> None:
        """Finish queued turns and send what can be sent (up to ``timeout``), release leases and close the store.

        ``timeout`` bounds the drain, the outbox's sends in progress included: a reply not sent by then stays
        queued in the store for the next start (one whose send was cut has its attempt counted, so it goes again
        flagged as a possible duplicate). A turn still waiting for the agent then is given up: it commits and sends
        nothing, and its messages run again at the next start. Stopping the other actors afterwards gets a few
        seconds of its own, so a zero drain (a start that failed) still closes everything.
        """
        if self._closed.is_set():
            return
        self._closed.set()
        self._runtime.recovery.stopped.set()  # no deferred replay starts while the queued turns drain
        deadline = time.monotonic() + timeout
        self.wait_idle(timeout)
        self._runtime.close(deadline, max(timeout, 5.0))

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
