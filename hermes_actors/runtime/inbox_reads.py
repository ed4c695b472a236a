"""What every :class:`~hermes_actors.ports.Inbox` answers from its store alone: :class:`StoreInbox`, the part the
gateway's and a cluster replica's inboxes share.

A subclass says how it reads (:meth:`StoreInbox._reader`) and writes (:meth:`StoreInbox._write`) its store; the
reads an adapter needs (a session's owner, recent inbound rows, a stored answer) and the API's stored responses
are answered here the same way for both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import ClassVar, TypeVar

import msgspec

from hermes_actors.messages import InboundMessage, ResponseRecord, decode_inbound
from hermes_actors.ports import SessionOwner, StoredAnswer
from hermes_actors.runtime.approval_requests import approval_request_of, calls_of
from hermes_actors.store import InboxState, MessageRecord, Role, StoreInterface
from hermes_actors.store.approvals import ApprovalRow

__all__ = ["StoreInbox"]

T = TypeVar("T")
_log = logging.getLogger(__name__)
_CONTINUATIONS = 20  # decided requests followed from a message to the turn that answers it at last


class StoreInbox:
    """The store's part of an :class:`~hermes_actors.ports.Inbox`, over :meth:`_reader` and :meth:`_write`."""

    __slots__ = ()

    def _reader(self) -> AbstractContextManager[StoreInterface]:
        """A store to read."""
        raise NotImplementedError

    def _write(self, work: Callable[[StoreInterface], T]) -> Future[T]:
        """Run ``work`` on the store in a write; the future resolves once it is committed."""
        raise NotImplementedError

    routes_stored: ClassVar[bool] = False  # whether session_for reads the store (a replica), not the supervisor

    def session_owner(self, session_id: str, routing_key: str | None = None) -> SessionOwner | None:
        """The owner of the stored session ``session_id`` and (``routing_key``) the session that key reaches now:
        one statement where the store keeps the routes (:attr:`routes_stored`), else the supervisor is asked."""
        with self._reader() as store:
            row = store.session_owner(session_id, routing_key if self.routes_stored else None)
        if row is None:
            return None
        route = row.route if self.routes_stored or routing_key is None else self.session_for(routing_key)
        return SessionOwner(
            session_id=session_id,
            platform=row.source,
            scope_id=row.scope_id,
            live=row.live,
            user_id=row.user_id,
            route=route,
        )

    def session_for(self, routing_key: str) -> str | None:
        """The session ``routing_key`` reaches now."""
        raise NotImplementedError

    def recent_inbound(self, platform: str, since: float) -> list[InboundMessage]:
        """``platform``'s inbox rows received at or after ``since``, decoded, oldest first."""
        with self._reader() as store:
            return _recent_inbound_in(store, platform, since)

    def stored_answer(self, platform: str, message_id: str) -> StoredAnswer | None:
        """The inbox row of ``platform``'s ``message_id`` and, once answered, the reply stored after it."""
        with self._reader() as store:
            return _stored_answer_in(store, platform, message_id)

    def save_response(self, response: ResponseRecord) -> Future[None]:
        """``store.responses.save``, committed before the future resolves."""
        return self._write(lambda store: store.responses.save(response))

    def get_response(self, response_id: str, scope: str | None) -> ResponseRecord | None:
        """``store.responses.get``."""
        with self._reader() as store:
            return store.responses.get(response_id, scope)

    def delete_response(self, response_id: str, scope: str | None) -> Future[bool]:
        """``store.responses.delete``, committed before the future resolves."""
        return self._write(lambda store: store.responses.delete(response_id, scope))

    def latest_response_in(self, scope: str | None, conversation: str) -> ResponseRecord | None:
        """``store.responses.latest_in``."""
        with self._reader() as store:
            return store.responses.latest_in(scope, conversation)


def _recent_inbound_in(store: StoreInterface, platform: str, since: float) -> list[InboundMessage]:
    """``platform``'s inbox rows in ``store`` received at or after ``since``, decoded, oldest first."""
    messages = []
    for payload in store.inbox.payloads_since(platform, since):
        try:
            messages.append(decode_inbound(payload))
        except msgspec.DecodeError:  # pragma: no cover - the gateway writes every row
            _log.warning("%s: an inbox row does not decode; skipped", platform)
    return messages


def _stored_answer_in(store: StoreInterface, platform: str, message_id: str) -> StoredAnswer | None:
    """The inbox row of ``platform``'s ``message_id`` in ``store`` and, once answered, the reply stored after it: a
    turn that paused for approval is answered by the turn that continued from the decision (wherever it came
    from), or waits with its open request."""
    row = store.inbox.find(platform, "", message_id)
    if row is None:
        return None
    message = decode_inbound(row.payload)
    if row.state is not InboxState.DONE or row.session_id is None:
        return StoredAnswer(message=message, state=row.state.value, session_id=row.session_id)
    transcript = store.load_transcript(row.session_id)
    answered = message_id
    for _ in range(_CONTINUATIONS):
        requests = store.approvals.of_message(answered)
        if not requests:
            break
        if requests[-1].is_open:  # the turn paused on calls waiting for approval: they are no client's calls
            answer = _answer_in(message, row.session_id, transcript, answered)
            return msgspec.structs.replace(answer, tool_calls=None, approval=approval_request_of(requests[-1]))
        continued = _continuation(transcript, requests[-1])
        if continued is None:
            break
        answered = continued  # decided (here or elsewhere) and continued: the answer is the continued turn's
    return _answer_in(message, row.session_id, transcript, answered)


def _continuation(transcript: Sequence[MessageRecord], request: ApprovalRow) -> str | None:
    """The message id of the decision the turn that continued from ``request`` answered: the one its calls' results
    carry (``None``: not in ``transcript``)."""
    calls = {str(call.get("id")) for call in calls_of(request.calls)}
    for record in reversed(transcript):
        if record.role == Role.TOOL and record.tool_call_id in calls and record.platform_message_id is not None:
            return record.platform_message_id
    return None


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
