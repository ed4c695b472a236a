"""The :class:`~hermes_actors.ports.Inbox` an adapter is started with: a facade over the gateway.

It delegates every call; the reads an adapter needs are answered from a borrowed reader here, so an adapter never
holds the gateway or a store. ``operator`` is the gateway's :class:`~hermes_actors.runtime.operator.GatewayOperator`
with the admin key the composition root gave (``None``: an operator's routes are off).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import TypeVar

from hermes_actors.agents.turn import AgentError, TurnEvents, TurnInput
from hermes_actors.errors import HermesError
from hermes_actors.media import MediaStore
from hermes_actors.messages import InboundMessage, TokenUsage
from hermes_actors.ports import AcceptResult, Exposition, PollCursor, Readiness, Vitals
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.approval_desk import StoreApprovals
from hermes_actors.runtime.conversations import StoreConversations
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_reads import StoreInbox
from hermes_actors.runtime.job_book import StoreJobs
from hermes_actors.runtime.operator import GatewayOperator
from hermes_actors.runtime.session_admin import LiveAdmin
from hermes_actors.store import StoreInterface

__all__ = ["GatewayInbox"]

T = TypeVar("T")


class GatewayInbox(StoreInbox):
    """What an adapter sees of ``gateway``: implements :class:`hermes_actors.ports.Inbox` by delegating to it (the
    store's part on a borrowed reader and through the writer)."""

    def __init__(self, gateway: Gateway, *, admin_key: str | None = None) -> None:
        self._gateway = gateway
        self._operator = GatewayOperator(gateway, admin_key)
        admin = LiveAdmin(gateway, timeout_s=gateway.config.ask_timeout_s)
        self._conversations = StoreConversations(gateway, admin, agent_for=lambda s: gateway.agents.bound(s).name)

    @property
    def media(self) -> MediaStore:
        """The gateway's media store."""
        return self._gateway.media

    @property
    def ask_timeout_s(self) -> float:
        """``runtime.ask_timeout_s`` of the gateway's config."""
        return self._gateway.config.ask_timeout_s

    @property
    def key_policy(self) -> KeyPolicy:
        """``runtime.key_policy`` of the gateway's config."""
        return self._gateway.config.key_policy

    @property
    def agents(self) -> tuple[str, ...]:
        """The names of the gateway's agents, the default first."""
        return self._gateway.agents.names

    def accept(self, inbound: InboundMessage) -> AcceptResult:
        """:meth:`Gateway.accept`."""
        return self._gateway.accept(inbound)

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        """:meth:`Gateway.accept_many`."""
        return self._gateway.accept_many(batch, cursor=cursor)

    def submit(self, inbound: InboundMessage) -> Future[AcceptResult]:
        """:meth:`Gateway.submit`."""
        return self._gateway.submit(inbound)

    def submit_many(
        self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None
    ) -> Future[list[AcceptResult]]:
        """:meth:`Gateway.submit_many`."""
        return self._gateway.submit_many(batch, cursor=cursor)

    def _reader(self) -> AbstractContextManager[StoreInterface]:
        return self._gateway.read()

    def _write(self, work: Callable[[StoreInterface], T]) -> Future[T]:
        return self._gateway.submit_write(work)

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The stored poll position of (``platform``, ``account_id``)."""
        with self._gateway.read() as store:
            return store.kv.get_cursor(platform, account_id)

    def session_for(self, routing_key: str) -> str | None:
        """:meth:`Gateway.session_for`."""
        return self._gateway.session_for(routing_key)

    def rebind(self, routing_key: str, session_id: str) -> None:
        """:meth:`Gateway.rebind`."""
        self._gateway.rebind(routing_key, session_id)

    def ask_agent(self, text: str, *, agent: str | None, timeout_s: float) -> tuple[str, TokenUsage]:
        """Ask ``agent`` (else the default agent) to answer ``text`` alone (blocking): no session, history,
        memories or tools, so nothing is stored or recalled; the answer and the model's tokens. For a frontend's
        housekeeping requests (titles, tags). Raises :class:`~hermes_actors.errors.HermesError` when the agent
        fails."""
        roster = self._gateway.agents
        named = (roster.get(agent) if agent else None) or roster.default
        turn = TurnInput(session_id="", history=(), user_text=text)
        try:
            reply = named.agent.run_turn(turn, timeout_s=min(timeout_s, self._gateway.config.agent_timeout_s))
        except AgentError as exc:
            raise HermesError(str(exc)) from exc
        return reply.text, TokenUsage(input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)

    def watch_turn(self, message_id: str, events: TurnEvents) -> None:
        """Report the turn answering ``message_id`` to ``events`` (see :mod:`hermes_actors.runtime.turn_watch`)."""
        self._gateway.watch.watch(message_id, events)

    def unwatch_turn(self, message_id: str) -> None:
        """Stop reporting ``message_id``'s turn."""
        self._gateway.watch.unwatch(message_id)

    def store_unwritable_reason(self) -> str | None:
        """:meth:`Gateway.store_unwritable_reason`."""
        return self._gateway.store_unwritable_reason()

    def readiness(self) -> Readiness:
        """:meth:`Gateway.readiness`."""
        return self._gateway.readiness()

    def vitals(self) -> Vitals:
        """:meth:`Gateway.vitals`."""
        return self._gateway.vitals()

    def metrics(self) -> Exposition:
        """:meth:`Gateway.metrics`."""
        return self._gateway.metrics()

    @property
    def operator(self) -> GatewayOperator:
        """What an operator holding the admin key may do to every session."""
        return self._operator

    @property
    def conversations(self) -> StoreConversations:
        """The API's conversations on the gateway's store."""
        return self._conversations

    @property
    def jobs(self) -> StoreJobs:
        """The scheduled turns, fired by this gateway."""
        return self._gateway.jobs

    @property
    def approvals(self) -> StoreApprovals:
        """Requests for approval, answered through this gateway."""
        return StoreApprovals(self._reader, self.accept)
