"""The operator's reads of whole conversations: the filtered lineage listing, ``session_search`` discovery, a
lineage's transcript with its segments and files, and its export; each on a borrowed reader store.

A compression child starts with the summary (a system message opening with
:data:`~hermes_actors.agents.history.SUMMARY_HEADER`) and the recent messages it carried over from its parent;
:func:`transcript` names both, so a reader can show the summary as one and fold the repeated messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_actors.agents.history import SUMMARY_HEADER
from hermes_actors.operator_port import (
    AttachmentView,
    Audience,
    ConversationFilter,
    ConversationPage,
    ConversationView,
    MessageView,
    SearchHitView,
    SearchPage,
    SegmentView,
    SessionView,
    TranscriptView,
)
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT
from hermes_actors.search import session_search
from hermes_actors.search.shapes import Sort
from hermes_actors.store import SessionFilter, StoreInterface, TipFilter
from hermes_actors.store.export import encode_export_line
from hermes_actors.store.records import AttachmentRecord, LineageRow, MessageRecord, SessionRecord

__all__ = [
    "audience_filter",
    "carried_over",
    "conversations",
    "export_lineage",
    "message_view",
    "search",
    "session_view",
    "transcript",
]

_SORTS: tuple[Sort, ...] = ("relevance", "newest", "oldest")


def session_view(
    record: SessionRecord, *, lineage: list[str] | None = None, preview: str | None = None, listed: bool = False
) -> SessionView:
    """``record`` as the port shows it; ``listed`` leaves the system prompt out (a row of a listing: it can be long,
    holding the user's memories as of the session's start)."""
    return SessionView(
        id=record.id,
        source=record.source,
        title=record.title,
        started_at=record.started_at,
        last_active_at=record.last_active_at,
        live=record.is_live,
        ended_at=record.ended_at,
        end_reason=record.end_reason,
        parent_session_id=record.parent_session_id,
        model=record.model,
        message_count=record.message_count,
        tool_call_count=record.tool_call_count,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        system_prompt=None if listed else record.system_prompt,
        lineage=lineage if lineage is not None else [record.id],
        preview=preview,
        agent=record.agent or DEFAULT_AGENT,  # a session from before agents had names: the default's
    )


def conversations(store: StoreInterface, where: ConversationFilter, *, limit: int, offset: int) -> ConversationPage:
    """One row per lineage passing ``where``, most recently active tip first."""
    visible = audience_filter(where.audience)
    if where.user_id is not None:
        visible = (visible or SessionFilter()).also(user_id=where.user_id)
    tip = TipFilter(chat_type=where.chat_type, active_after=where.active_after, active_before=where.active_before)
    page = store.list_lineages(
        source=where.source, ended=where.ended, visible=visible, tip=tip, limit=limit, offset=offset
    )

    def row(found: LineageRow) -> ConversationView:
        record = found.tip
        return ConversationView(
            tip=session_view(record, lineage=found.members, preview=found.preview, listed=True),
            root_id=found.root_id,
            message_count=found.message_count,
            compressions=found.compressions,
            user_id=record.user_id,
            user_name=record.user_name,
            chat_id=record.chat_id,
            chat_name=record.chat_name,
            chat_type=record.chat_type,
        )

    return ConversationPage(conversations=[row(r) for r in page.rows], total=page.total, limit=limit, offset=offset)


def audience_filter(audience: Audience | None) -> SessionFilter | None:
    """The sessions ``audience`` sees as a store filter (``None``: every session)."""
    if audience is None:
        return None
    if audience.user_id is not None:
        return SessionFilter(source=audience.platform, scope_id=audience.scope_id, user_id=audience.user_id)
    return SessionFilter(source=audience.platform, scope_id=audience.scope_id)


def search(store: StoreInterface, query: str, *, sort: str, limit: int) -> SearchPage:
    """``session_search`` discovery over every session, as the agent's tool runs it (without its scope)."""
    chosen: Sort = next((s for s in _SORTS if s == sort), "relevance")
    result = session_search(store, query=query, sort=chosen, limit=limit)
    hits = [
        SearchHitView(
            session_id=hit.session_id,
            source=hit.source,
            title=hit.title,
            matched=hit.matched,
            snippet=hit.snippet,
            last_active_at=hit.last_active_at,
            message_id=hit.match_message_id,
            role=hit.role,
        )
        for hit in result.hits
    ]
    return SearchPage(query=query, hits=hits, note=result.note, error=result.error, suggestion=result.suggestion)


def message_view(message: MessageRecord) -> MessageView:
    """``message`` as the port shows it."""
    return MessageView(
        id=message.id,
        session_id=message.session_id,
        role=message.role,
        content=message.content,
        created_at=message.created_at,
        tool_calls=message.tool_calls,
        tool_name=message.tool_name,
        tool_call_id=message.tool_call_id,
    )


def _attachment(record: AttachmentRecord) -> AttachmentView:
    return AttachmentView(
        message_id=record.message_id,
        kind=record.kind,
        mime_type=record.mime_type,
        size=record.size,
        path=record.path,
        name=record.name,
        source_url=record.source_url,
        error=record.error,
    )


def carried_over(previous: Sequence[MessageRecord], after_summary: Sequence[MessageRecord]) -> int:
    """How many messages at the start of ``after_summary`` repeat the end of ``previous`` (role and text)."""
    for count in range(min(len(previous), len(after_summary)), 0, -1):
        head = [(m.role, m.content) for m in after_summary[:count]]
        if head == [(m.role, m.content) for m in previous[-count:]]:
            return count
    return 0


def transcript(store: StoreInterface, session_id: str) -> TranscriptView:
    """The lineage through ``session_id``, root first: each segment's messages, files, summary and carry-over."""
    store.get_session(session_id)  # SessionNotFoundError for an unknown id
    chain = store.lineage_chain(store.lineage_tip(session_id))
    segments: list[SegmentView] = []
    previous: list[MessageRecord] = []
    for member in chain:
        messages = store.load_transcript(member)
        summary_id, carried = None, 0
        if (
            segments
            and messages
            and messages[0].role == "system"
            and (messages[0].content or "").startswith(SUMMARY_HEADER)
        ):
            summary_id = messages[0].id
            carried = carried_over(previous, messages[1:])
        segments.append(
            SegmentView(
                session=session_view(store.get_session(member)),
                messages=[message_view(m) for m in messages],
                attachments=[_attachment(a) for a in store.attachments.for_session(member)],
                summary_id=summary_id,
                carried=carried,
            )
        )
        previous = messages
    return TranscriptView(session_id=chain[-1], segments=segments)


def export_lineage(store: StoreInterface, session_id: str) -> bytes:
    """The lineage through ``session_id`` as JSONL, root first, in one read transaction."""
    store.get_session(session_id)
    with store.transaction():
        chain = store.lineage_chain(store.lineage_tip(session_id))
        return b"".join(encode_export_line(e) for member in chain for e in store.iter_exports(session_id=member))
