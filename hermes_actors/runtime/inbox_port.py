"""The :class:`~hermes_actors.ports.Inbox` an adapter is started with: a facade over the gateway.

It delegates every call; the reads an adapter needs are answered from a borrowed reader here, so an adapter never
holds the gateway or a store. ``operator`` is the gateway's :class:`~hermes_actors.runtime.operator.GatewayOperator`
with the admin key the composition root gave (``None``: an operator's routes are off).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import Future

import msgspec

from hermes_actors.agents.turn import AgentError, TurnEvents, TurnInput
from hermes_actors.errors import HermesError
from hermes_actors.media import MediaStore
from hermes_actors.messages import InboundMessage, ResponseRecord, TokenUsage, decode_inbound
from hermes_actors.ports import (
    AcceptResult,
    Exposition,
    PollCursor,
    Readiness,
    SessionOwner,
    StoredAnswer,
    Vitals,
)
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.approval_desk import StoreApprovals
from hermes_actors.runtime.approval_requests import approval_request_of
from hermes_actors.runtime.conversations import StoreConversations
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.job_book import StoreJobs
from hermes_actors.runtime.operator import GatewayOperator
from hermes_actors.runtime.session_admin import LiveAdmin
from hermes_actors.store import InboxState, MessageRecord, Role, StoreInterface

__all__ = ["GatewayInbox", "recent_inbound_in", "session_owner_in", "stored_answer_in"]

_log = logging.getLogger(__name__)


class GatewayInbox:
    """What an adapter sees of ``gateway``: implements :class:`hermes_actors.ports.Inbox` by delegating to it."""

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

    def poll_cursor(self, platform: str, account_id: str = "") -> str | None:
        """The stored poll position of (``platform``, ``account_id``)."""
        with self._gateway.read() as store:
            return store.kv.get_cursor(platform, account_id)

    def session_owner(self, session_id: str) -> SessionOwner | None:
        """The owner of the stored session ``session_id``."""
        with self._gateway.read() as store:
            return session_owner_in(store, session_id)

    def recent_inbound(self, platform: str, since: float) -> list[InboundMessage]:
        """``platform``'s inbox rows received at or after ``since``, decoded, oldest first."""
        with self._gateway.read() as store:
            return recent_inbound_in(store, platform, since)

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

    def stored_answer(self, platform: str, message_id: str) -> StoredAnswer | None:
        """The inbox row of ``platform``'s ``message_id`` and, once answered, the reply stored after it."""
        with self._gateway.read() as store:
            return stored_answer_in(store, platform, message_id)

    def save_response(self, response: ResponseRecord) -> Future[None]:
        """``store.responses.save`` through the writer."""
        return self._gateway.submit_write(lambda store: store.responses.save(response))

    def get_response(self, response_id: str, scope: str | None) -> ResponseRecord | None:
        """``store.responses.get`` on a reader."""
        with self._gateway.read() as store:
            return store.responses.get(response_id, scope)

    def delete_response(self, response_id: str, scope: str | None) -> Future[bool]:
        """``store.responses.delete`` through the writer."""
        return self._gateway.submit_write(lambda store: store.responses.delete(response_id, scope))

    def latest_response_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """``store.responses.latest_in`` on a reader."""
        with self._gateway.read() as store:
            return store.responses.latest_in(scope, conversation)

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
        return StoreApprovals(self._gateway.read, self._gateway.accept)


def session_owner_in(store: StoreInterface, session_id: str) -> SessionOwner | None:
    """The owner of the stored session ``session_id`` in ``store`` (``None``: no such session)."""
    record = store.find_session(session_id)
    if record is None:
        return None
    return SessionOwner(
        session_id=record.id,
        platform=record.source,
        scope_id=record.scope_id,
        live=record.is_live,
        user_id=record.user_id,
    )


def recent_inbound_in(store: StoreInterface, platform: str, since: float) -> list[InboundMessage]:
    """``platform``'s inbox rows in ``store`` received at or after ``since``, decoded, oldest first."""
    messages = []
    for payload in store.inbox.payloads_since(platform, since):
        try:
            messages.append(decode_inbound(payload))
        except msgspec.DecodeError:  # pragma: no cover - the gateway writes every row
            _log.warning("%s: an inbox row does not decode; skipped", platform)
    return messages


def stored_answer_in(store: StoreInterface, platform: str, message_id: str) -> StoredAnswer | None:
    """The inbox row of ``platform``'s ``message_id`` in ``store`` and, once answered, the reply stored after it."""
    row = store.inbox.find(platform, "", message_id)
    if row is None:
        return None
    message = decode_inbound(row.payload)
    if row.state is not InboxState.DONE or row.session_id is None:
        return StoredAnswer(message=message, state=row.state.value, session_id=row.session_id)
    answer = _answer_in(message, row.session_id, store.load_transcript(row.session_id), message_id)
    waiting = [request for request in store.approvals.of_message(message_id) if request.is_open]
    if waiting:  # the turn paused on calls waiting for approval: they are no client's calls
        return msgspec.structs.replace(answer, tool_calls=None, approval=approval_request_of(waiting[-1]))
    return answer


def _answer_in(
    message: InboundMessage, session_id: str, transcript: Sequence[MessageRecord], message_id: str
) -> StoredAnswer:
    """The answer to ``message_id`` in ``transcript``: the messages after its user message (or its tool results),
    up to the next inbound message's; the reply is the last assistant text among them, the usage the one stored on
    the last of them, and the calls of the client's tools it ended with those of its last assistant message that
    have no result among them."""
    start = next((i for i, m in enumerate(transcript) if m.platform_message_id == message_id), None)
    after: list[MessageRecord] = []
    if start is not None:
        for record in transcript[start + 1 :]:
            if record.role == Role.USER or record.platform_message_id is not None:
                break
            after.append(record)
    texts = [m.content for m in after if m.role == Role.ASSISTANT and m.content]
    return StoredAnswer(
        message=message,
        state=InboxState.DONE.value,
        session_id=session_id,
        reply=texts[-1] if texts else None,
        tool_calls=_open_calls(after),
    )


def _open_calls(after: Sequence[MessageRecord]) -> str | None:
    """The calls of the last assistant message of ``after`` that no tool message of ``after`` answers (a turn that
    ended with calls of the client's tools), as JSON; ``None`` when it ended otherwise."""
    last = next((m for m in reversed(after) if m.role == Role.ASSISTANT), None)
    if last is None or not last.tool_calls:
        return None
    try:
        made = msgspec.json.decode(last.tool_calls, type=list[dict[str, object]])
    except msgspec.DecodeError:  # a ValidationError too
        return None
    answered = {m.tool_call_id for m in after if m.role == Role.TOOL}
    calls = [call for call in made if call.get("id") not in answered]
    return msgspec.json.encode(calls).decode() if calls else None
