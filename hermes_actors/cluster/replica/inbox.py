"""The inbox port of ``hermesd --cluster``: what an adapter running in a replica sees of the cluster.

It commits a message to the PostgreSQL inbox in its session's shard
(:class:`~hermes_actors.cluster.replica.ingress.ClusterIngress`, which pokes the holder) and answers once that commit
is durable: the adapter then acknowledges the platform, and the turn runs later in whichever shard host holds the
shard. A long-poll or socket adapter's batch commits with its poll cursor in one transaction, under the role lease of
the adapter's account: such an adapter is started on :meth:`ClusterInbox.guarded`, whose every commit checks the
lease first. Reads (a session's owner, a stored answer, the API's stored responses, routes) go to the PostgreSQL
store. A turn is watched through :attr:`watch`, which :class:`~hermes_actors.cluster.replica.api_replies.ApiReplies`
feeds with the events the shard host relays; readiness is the store's and this replica's entry points'; the metrics
are this replica's, with the cluster's queues read from the store.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar, TypeVar

from hermes_actors.cluster.job_runs import ShardRuns
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.cluster.replica.observe import CheckedReaders, ClusterCollector, ClusterWatch, StoreCheck
from hermes_actors.cluster.replica.operator_access import ClusterSessionAdmin
from hermes_actors.cluster.settings import ClusterHealth
from hermes_actors.config import EventsConfig
from hermes_actors.errors import PlatformError
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.media import MediaStore
from hermes_actors.messages import InboundMessage
from hermes_actors.operator_port import Operator
from hermes_actors.ports import (
    AcceptResult,
    Exposition,
    Inbox,
    PollCursor,
    Readiness,
    Vitals,
)
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT
from hermes_actors.runtime.approval_desk import StoreApprovals
from hermes_actors.runtime.conversations import StoreConversations
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.inbox_reads import StoreInbox
from hermes_actors.runtime.job_book import NoHooks, StoreJobs
from hermes_actors.runtime.metrics import Metrics
from hermes_actors.runtime.platform_board import PlatformBoard
from hermes_actors.runtime.protocol import SupervisorStatistics
from hermes_actors.runtime.scrape import RuntimeCollector
from hermes_actors.runtime.store_access import DirectAccess
from hermes_actors.runtime.turn_watch import TurnWatch
from hermes_actors.store import StoreInterface
from hermes_actors.turn_events import TurnEvents

__all__ = ["ClusterInbox"]

T = TypeVar("T")

_VERDICT_S = 1.0  # how long a verdict on the store's writability is kept (``/health`` stays cheap)
_CHECK_TIMEOUT_S = 1.0  # how long a health check waits for PostgreSQL (a connection, then each statement)


def _no_actors() -> SupervisorStatistics:
    """A replica runs no session actors (the shard hosts do)."""
    return SupervisorStatistics(
        live_actors=0,
        stopping_actors=0,
        running=0,
        queued_messages=0,
        routes_cached=0,
        activations=0,
        passivations=0,
        evictions=0,
        turns=0,
        rejected=0,
    )


class ClusterInbox(StoreInbox):
    """:class:`~hermes_actors.ports.Inbox` over a :class:`ClusterIngress`, for the adapters of a replica (the
    store's part on the PostgreSQL store, its writes on the ingress pool)."""

    routes_stored: ClassVar[bool] = True  # session_for reads the routes table: the owner comes with the route

    def __init__(
        self,
        ingress: ClusterIngress,
        media: MediaStore,
        *,
        key_policy: KeyPolicy | None = None,
        ask_timeout_s: float = 30.0,
        workers: int = 8,
        board: PlatformBoard | None = None,
        operator: Operator | None = None,
        health: ClusterHealth | None = None,
        hosts: Sequence[str] = (),
        agent_names: Sequence[str] = (DEFAULT_AGENT,),
        jobs: JobsConfig | None = None,
        events: EventsConfig | None = None,
    ) -> None:
        self._ingress = ingress
        self._agent_names = tuple(agent_names)
        self._store: StoreInterface = ingress.store
        self._media = media
        self._policy = key_policy or KeyPolicy()
        self._timeout = ask_timeout_s
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cluster-ingress")
        self._watch = TurnWatch()
        self._board = board or PlatformBoard()
        self._operator = operator
        self._conversations = StoreConversations(DirectAccess(ingress.store), ClusterSessionAdmin(ingress.store))
        self._jobs = StoreJobs(  # fired by the shard hosts' scans; a run by hand goes to its shard's queue
            DirectAccess(ingress.store),
            hooks=NoHooks(),
            queue=ShardRuns(ingress.store, ingress.shards),
            policy=self._policy,
            events=Events(events),
            config=jobs,
        )
        self._check: Callable[[], None] | None = None
        self._store_check = StoreCheck(ingress.store, timeout_s=_CHECK_TIMEOUT_S, keep_s=_VERDICT_S)
        self._cluster = ClusterWatch(ingress.store, self._store_check, health=health, hosts=hosts)
        self._metrics = Metrics()
        self._metrics.register(ClusterCollector(self._store_check, self._cluster))
        readers = CheckedReaders(ingress.store, self._store_check)
        self._metrics.register(RuntimeCollector(readers, _no_actors, self._board.names, time.time))

    @property
    def media(self) -> MediaStore:
        """Where attachments are saved before their message is accepted."""
        return self._media

    @property
    def ask_timeout_s(self) -> float:
        """How long an ingress call may take."""
        return self._timeout

    @property
    def key_policy(self) -> KeyPolicy:
        """How a message's source becomes its routing key."""
        return self._policy

    @property
    def agents(self) -> tuple[str, ...]:
        """The agents a request may name: the ones the shard hosts run (``agent`` and ``agents.<name>``)."""
        return self._agent_names

    def guarded(self, check: Callable[[], None]) -> ClusterInbox:
        """This inbox as one leased adapter sees it: each of its commits (a message, a batch with its cursor, a
        cursor alone) runs ``check`` first in its transaction, which refuses the commit by raising (the adapter's
        :meth:`~hermes_actors.cluster.replica.roles.RoleTerm.check`). Shares everything else with this inbox."""
        twin = copy.copy(self)
        twin._check = check
        return twin

    def accept(self, inbound: InboundMessage) -> AcceptResult:
        """Commit ``inbound`` to its shard (or recognise a redelivery); return once it is durable."""
        if self._check is None:
            inbox_id = self._ingress.accept(inbound)
        else:
            (inbox_id,) = self._ingress.accept_batch([inbound], cursor=None, check=self._check)
        key = build_session_key(inbound.source, self._policy)
        return AcceptResult(routing_key=key, inbox_id=inbox_id, duplicate=inbox_id is None)

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        """Commit ``batch`` and the poll ``cursor`` that covers it in one transaction, which on a :meth:`guarded`
        inbox first checks the adapter's role lease: a replica whose term ended gets
        :class:`~hermes_actors.errors.RoleLostError` and the cursor stays where it was."""
        inbox_ids = self._ingress.accept_batch(batch, cursor=cursor, check=self._check)
        return [
            AcceptResult(
                routing_key=build_session_key(inbound.source, self._policy),
                inbox_id=inbox_id,
                duplicate=inbox_id is None,
            )
            for inbound, inbox_id in zip(batch, inbox_ids, strict=True)
        ]

    def submit(self, inbound: InboundMessage) -> Future[AcceptResult]:
        """:meth:`accept` on the ingress pool; the future resolves once the row is durable."""
        return self._pool.submit(self.accept, inbound)

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        """:meth:`accept_many` on the ingress pool."""
        return self._pool.submit(lambda: self.accept_many(batch, cursor=cursor))

    def close(self) -> None:
        """Finish the commits under way and stop the pool."""
        self._pool.shutdown(wait=True)

    def _reader(self) -> AbstractContextManager[StoreInterface]:
        return nullcontext(self._store)

    def _write(self, work: Callable[[StoreInterface], T]) -> Future[T]:
        return self._pool.submit(work, self._ingress.store)

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The poll position last committed for (``platform``, ``account_id``) in PostgreSQL, or ``None``."""
        return self._ingress.poll_cursor(platform, account_id)

    def session_for(self, routing_key: str) -> str | None:
        """The session ``routing_key`` reaches now (its route in the store)."""
        return self._store.get_route(routing_key)

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id``: the key's next message goes to that session's shard."""
        self._ingress.store.set_route(routing_key, session_id)

    def store_unwritable_reason(self) -> str | None:
        """Why the PostgreSQL store cannot be written now, or ``None``: answered within about a second, and kept
        for a second (``/health`` stays cheap, and never waits for the pool's 30 s)."""
        return self._store_check.problem()

    @property
    def watch(self) -> TurnWatch:
        """The watchers of this replica's turns, by inbound message id."""
        return self._watch

    def watch_turn(self, message_id: str, events: TurnEvents) -> None:
        """Report the turn answering ``message_id`` (relayed from its shard host) to ``events``."""
        self._watch.watch(message_id, events)

    def unwatch_turn(self, message_id: str) -> None:
        """Stop reporting ``message_id``'s turn."""
        self._watch.unwatch(message_id)

    def readiness(self) -> Readiness:
        """Whether the PostgreSQL store takes writes and each of this replica's entry points is up, with the
        whole cluster's view (which informs, and never fails this replica's readiness)."""
        return Readiness(
            store=self.store_unwritable_reason(), platforms=self._board.states(), cluster=self._cluster.view()
        )

    def vitals(self) -> Vitals:
        """This replica's numbers, with the cluster's queues read from the store."""
        return self._metrics.vitals()

    def metrics(self) -> Exposition:
        """This replica's series and the cluster's queues, in Prometheus's text format."""
        return self._metrics.exposition()

    @property
    def operator(self) -> Operator:
        """What an operator holding the admin key may do (``None`` until one is given: the routes are off)."""
        if self._operator is None:
            raise PlatformError("the operator API is not configured in this replica")
        return self._operator

    @property
    def conversations(self) -> StoreConversations:
        """The API's conversations on the PostgreSQL store (a deletion goes to each session's shard host)."""
        return self._conversations

    @property
    def jobs(self) -> StoreJobs:
        """The scheduled turns on the PostgreSQL store (fired by the shard hosts)."""
        return self._jobs

    @property
    def approvals(self) -> StoreApprovals:
        """Requests for approval on the PostgreSQL store; an answer goes to its session's shard like any message."""
        return StoreApprovals(self._reader, self.accept)


def _conforms(inbox: ClusterInbox) -> Inbox:
    """mypy checks here that :class:`ClusterInbox` is an :class:`~hermes_actors.ports.Inbox`."""
    return inbox
