"""How the source's rows become ours: end reasons and roles mapped, sessions ordered parents first and batched,
messages and sessions turned into the rows :class:`~hermes_actors.importer.target.Target` writes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from hermes_actors.importer.keys import translate_key
from hermes_actors.importer.routes import key_sources
from hermes_actors.importer.source import HermesMessage, HermesSession, SessionStub
from hermes_actors.importer.tenancy import LiveAccounts
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, Role, SessionRecord
from hermes_actors.store.content import store_content
from hermes_actors.store.records import MessageRow

__all__ = [
    "END_REASONS",
    "ROLES",
    "bare_record",
    "batches",
    "message_row",
    "parents_first",
    "routing_key",
    "tool_call_count",
]

END_REASONS: dict[str, EndReason] = {
    **{reason.value: reason for reason in EndReason},
    "branched": EndReason.SESSION_SWITCH,  # the user moved on to a branch of it
    "reset": EndReason.SESSION_RESET,
    "new": EndReason.NEW_SESSION,
    "exit": EndReason.USER_EXIT,
}
ROLES: dict[str, Role] = {**{role.value: role for role in Role}, "developer": Role.SYSTEM}


def tool_call_count(tool_calls: str | None) -> int:
    """How many calls a source message's ``tool_calls`` JSON holds (0 when it is not a JSON array)."""
    if not tool_calls:
        return 0
    try:
        calls = json.loads(tool_calls)
    except (ValueError, RecursionError):
        return 0
    return len(calls) if isinstance(calls, list) else 0


def parents_first(stubs: Sequence[SessionStub]) -> tuple[list[SessionStub], set[str]]:
    """Order sessions so a parent comes before its children; return the order and the ids whose parent link
    closes a cycle (it is dropped)."""
    by_id = {stub.id: stub for stub in stubs}
    done: set[str] = set()
    cut: set[str] = set()
    order: list[SessionStub] = []
    for stub in stubs:
        chain: list[SessionStub] = []
        on_chain: set[str] = set()
        current: SessionStub | None = stub
        while current is not None and current.id not in done and current.id not in on_chain:
            chain.append(current)
            on_chain.add(current.id)
            parent = current.parent_session_id
            current = by_id.get(parent) if parent is not None else None
        if current is not None and current.id in on_chain:
            cut.add(chain[-1].id)  # its parent is already on the chain: a cycle
        for member in reversed(chain):
            order.append(member)
            done.add(member.id)
    return order, cut


def batches(order: Sequence[SessionStub], counts: dict[str, int], limit: int) -> Iterable[list[SessionStub]]:
    """Cut ``order`` into runs of about ``limit`` rows (a session's messages and itself), one transaction each."""
    batch: list[SessionStub] = []
    weight = 0
    for stub in order:
        batch.append(stub)
        weight += counts.get(stub.id, 0) + 1
        if weight >= limit:
            yield batch
            batch, weight = [], 0
    if batch:
        yield batch


def message_row(message: HermesMessage, role: Role) -> MessageRow:
    """A source message as the row an import writes here."""
    return (
        role.value,
        store_content(message.content),
        message.tool_calls,
        message.tool_name,
        message.tool_call_id,
        message.token_count,
        message.timestamp,
        message.platform_message_id,
    )


def bare_record(session: HermesSession) -> SessionRecord:
    """The session's row here from its source fields alone: no title, parent, end, key or counters yet."""
    origin = session.origin or SessionSource(platform=session.source)
    return SessionRecord(
        id=session.id,
        source=session.source,
        started_at=session.started_at,
        last_active_at=session.started_at,
        user_id=origin.user_id_alt or session.user_id or origin.user_id,
        user_name=origin.user_name,
        chat_id=session.chat_id or origin.chat_id,
        chat_type=session.chat_type or (origin.chat_type if session.origin is not None else None),
        chat_name=origin.chat_name or session.display_name,
        thread_id=session.thread_id or origin.thread_id,
        scope_id=session.scope_id,
        model=session.model,
        system_prompt=session.system_prompt,
    )


def routing_key(session: HermesSession, live: LiveAccounts) -> str | None:
    """The session's routing key here: the source's key translated, or kept as it is when it cannot be."""
    if not session.session_key:
        return None
    translated = translate_key(session.session_key, key_sources(session), scope_id=session.scope_id, live=live)
    return translated.key or session.session_key
