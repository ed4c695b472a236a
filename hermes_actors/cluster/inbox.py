"""The inbox port of ``hermesd --cluster``: what a push adapter (the webhook adapter) sees of a cluster.

It commits a message to the PostgreSQL inbox in its session's shard (:class:`~hermes_actors.cluster.ingress.
ClusterIngress`, which pokes the holder) and answers once that commit is durable: the adapter then acknowledges
the platform, and the turn runs later in whichever shard host holds the shard. A long-poll or socket adapter's batch
commits with its poll cursor in one transaction, under the adapter's role lease (:meth:`ClusterInbox.accept_many`).
What the single-machine inbox also offers (turn watchers, the API's stored responses, the operator port, readiness)
is not there in cluster mode yet: those calls raise :class:`~hermes_actors.errors.PlatformError` saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NoReturn

from hermes_actors.cluster.ingress import ClusterIngress
from hermes_actors.errors import PlatformError
from hermes_actors.media import MediaStore
from hermes_actors.messages import InboundMessage, ResponseRecord
from hermes_actors.operator_port import Operator
from hermes_actors.ports import (
    AcceptResult,
    Exposition,
    Inbox,
    PollCursor,
    Readiness,
    SessionOwner,
    StoredAnswer,
    Vitals,
)
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.turn_events import TurnEvents

__all__ = ["ClusterInbox"]


def _missing(what: str) -> NoReturn:
    raise PlatformError(
        f"{what} is not available in cluster mode yet; run this entry point on a single-machine hermesd"
    )


class ClusterInbox:
    """:class:`~hermes_actors.ports.Inbox` over a :class:`ClusterIngress`, for push adapters."""

    def __init__(
        self,
        ingress: ClusterIngress,
        media: MediaStore,
        *,
        key_policy: KeyPolicy | None = None,
        ask_timeout_s: float = 30.0,
        workers: int = 8,
    ) -> None:
        self._ingress = ingress
        self._media = media
        self._policy = key_policy or KeyPolicy()
        self._timeout = ask_timeout_s
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="cluster-ingress")

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

    def accept(self, inbound: InboundMessage) -> AcceptResult:
        """Commit ``inbound`` to its shard (or recognise a redelivery); return once it is durable."""
        inbox_id = self._ingress.accept(inbound)
        key = build_session_key(inbound.source, self._policy)
        return AcceptResult(routing_key=key, inbox_id=inbox_id, duplicate=inbox_id is None)

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        """Commit ``batch`` and the poll ``cursor`` that covers it in one transaction, which first checks the role
        lease of the adapter that polled it (:meth:`ClusterIngress.accept_batch`): a replica whose term ended gets
        :class:`~hermes_actors.errors.RoleLostError` and the cursor stays where it was."""
        inbox_ids = self._ingress.accept_batch(batch, cursor=cursor)
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

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The poll position last committed for (``platform``, ``account_id``) in PostgreSQL, or ``None``."""
        return self._ingress.poll_cursor(platform, account_id)

    def session_owner(self, session_id: str) -> SessionOwner | None:
        _missing("the owner of a session")

    def recent_inbound(self, platform: str, since: float) -> list[InboundMessage]:
        _missing("the recent inbound messages")

    def session_for(self, routing_key: str) -> str | None:
        _missing("the session of a routing key")

    def rebind(self, routing_key: str, session_id: str) -> None:
        _missing("rebinding a routing key")

    def store_unwritable_reason(self) -> str | None:
        return None

    def watch_turn(self, message_id: str, events: TurnEvents) -> None:
        _missing("watching a turn")

    def unwatch_turn(self, message_id: str) -> None:
        _missing("watching a turn")

    def stored_answer(self, platform: str, message_id: str) -> StoredAnswer | None:
        _missing("the stored answer of a message")

    def save_response(self, response: ResponseRecord) -> Future[None]:
        _missing("the API's stored responses")

    def get_response(self, response_id: str, scope: str | None) -> ResponseRecord | None:
        _missing("the API's stored responses")

    def delete_response(self, response_id: str, scope: str | None) -> Future[bool]:
        _missing("the API's stored responses")

    def latest_response_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        _missing("the API's stored responses")

    def readiness(self) -> Readiness:
        _missing("readiness")

    def vitals(self) -> Vitals:
        _missing("the runtime's vitals")

    def metrics(self) -> Exposition:
        _missing("the runtime's metrics")

    @property
    def operator(self) -> Operator:
        _missing("the operator port")


def _conforms(inbox: ClusterInbox) -> Inbox:
    """mypy checks here that :class:`ClusterInbox` is an :class:`~hermes_actors.ports.Inbox`."""
    return inbox
