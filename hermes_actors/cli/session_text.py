"""How ``hermesctl sessions`` shows sessions: the tables of ``list``, the summary and transcript of ``show``.

A listing shows conversations: one row per compression lineage, by its tip (its newest segment), with the lineage's
message total and compressions (:meth:`~hermes_actors.store.Store.list_lineages`); ``--segments`` lists every
segment, marked with its lineage. :func:`lineage_text` says where a segment stands in its lineage, for any command
that names one. A listing has an ``AGENT`` column when one of its sessions is answered by a named agent other than
the default (``agents:`` in config.yaml); ``show`` always names the agent.
"""

from __future__ import annotations

import json

import msgspec

from hermes_actors.agents.history import is_capped, is_summary
from hermes_actors.cli.formatting import (
    format_timestamp,
    one_line,
    plural,
    relative_time,
    render_table,
    terminal_safe,
    truncate,
)
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT
from hermes_actors.store import LineagePage, LineageRow, MessageRecord, Role, SessionRecord, StoreInterface
from hermes_actors.store.content import split_content

__all__ = [
    "PREVIEW_WIDTH",
    "TITLE_WIDTH",
    "SessionDetails",
    "agent_text",
    "lineage_json",
    "lineage_table",
    "lineage_text",
    "listing_note",
    "load_details",
    "message_lines",
    "segment_table",
    "session_table",
    "session_user",
    "status_text",
    "summary_lines",
    "title_text",
    "transcript_lines",
]

TITLE_WIDTH = 40
PREVIEW_WIDTH = 30
TOOL_ARGS_WIDTH = 80
TOOL_RESULT_LINES = 10


class SessionDetails(msgspec.Struct, frozen=True, kw_only=True):
    """A session with what ``show`` says around it: its lineage, children and the process running it."""

    record: SessionRecord
    lineage: list[str]
    children: list[str]
    running_in: str | None


def load_details(store: StoreInterface, record: SessionRecord) -> SessionDetails:
    """Read what ``show`` says about ``record``."""
    return SessionDetails(
        record=record,
        lineage=store.lineage_chain(record.id),
        children=store.child_session_ids(record.id),
        running_in=store.leases.holder(record.id),
    )


def title_text(record: SessionRecord) -> str:
    return one_line(record.title) if record.title else "—"


def status_text(record: SessionRecord) -> str:
    return "live" if record.ended_at is None else f"ended ({record.end_reason})"


def agent_text(record: SessionRecord) -> str:
    """The agent that answers ``record``: the name it recorded (``default`` for a session from before names)."""
    return one_line(record.agent or DEFAULT_AGENT)


def _with_agents(headers: list[str], cells: list[list[str]], records: list[SessionRecord]) -> None:
    """Add an ``AGENT`` column after ``SOURCE`` when one of ``records`` (one per row) has a named agent."""
    if all(r.agent in (None, DEFAULT_AGENT) for r in records):
        return
    at = headers.index("SOURCE") + 1
    headers.insert(at, "AGENT")
    for row, record in zip(cells, records, strict=True):
        row.insert(at, agent_text(record))


def session_table(records: list[SessionRecord], *, now: float, numbered: bool = False) -> list[str]:
    headers = ["ID", "TITLE", "SOURCE", "MESSAGES", "LAST ACTIVE", "STATUS"]
    rows = [
        [
            r.id,
            truncate(title_text(r), TITLE_WIDTH),
            one_line(r.source),
            str(r.message_count),
            relative_time(r.last_active_at, now=now),
            status_text(r),
        ]
        for r in records
    ]
    _with_agents(headers, rows, records)
    if numbered:
        headers.insert(0, "#")
        for number, row in enumerate(rows, start=1):
            row.insert(0, str(number))
    counts = headers.index("MESSAGES")
    return render_table(headers, rows, right_aligned=(0, counts) if numbered else (counts,))


def lineage_table(rows: list[LineageRow], *, now: float, numbered: bool = False) -> list[str]:
    """The table of ``sessions list`` and ``browse``: one row per conversation, shown by its tip."""
    headers = ["ID", "TITLE", "PREVIEW", "SOURCE", "MESSAGES", "COMPRESSIONS", "LAST ACTIVE", "STATUS"]
    cells = [
        [
            row.tip.id,
            truncate(title_text(row.tip), TITLE_WIDTH),
            truncate(one_line(row.preview), PREVIEW_WIDTH) if row.preview else "—",
            one_line(row.tip.source),
            str(row.message_count),
            str(row.compressions),
            relative_time(row.tip.last_active_at, now=now),
            status_text(row.tip),
        ]
        for row in rows
    ]
    _with_agents(headers, cells, [row.tip for row in rows])
    if numbered:
        headers.insert(0, "#")
        for number, line in enumerate(cells, start=1):
            line.insert(0, str(number))
    counts = (headers.index("MESSAGES"), headers.index("COMPRESSIONS"))
    return render_table(headers, cells, right_aligned=(0, *counts) if numbered else counts)


def segment_table(rows: list[LineageRow], segments: dict[str, SessionRecord], *, now: float) -> list[str]:
    """The table of ``sessions list --segments``: every segment of each conversation, newest first, marked with
    its lineage's root and its position (a single-segment conversation is marked ``—``)."""
    headers = ["ID", "LINEAGE", "SEGMENT", "TITLE", "SOURCE", "MESSAGES", "LAST ACTIVE", "STATUS"]
    cells, records = [], []
    for row in rows:
        count = len(row.members)
        for position in range(count, 0, -1):
            record = segments.get(row.members[position - 1])
            if record is None:  # deleted since the listing was read
                continue
            records.append(record)
            cells.append(
                [
                    record.id,
                    row.root_id if count > 1 else "—",
                    f"{position} of {count}" if count > 1 else "—",
                    truncate(title_text(record), TITLE_WIDTH),
                    one_line(record.source),
                    str(record.message_count),
                    relative_time(record.last_active_at, now=now),
                    status_text(record),
                ]
            )
    _with_agents(headers, cells, records)
    return render_table(headers, cells, right_aligned=(headers.index("MESSAGES"),))


def lineage_json(row: LineageRow, segments: dict[str, SessionRecord] | None = None) -> dict[str, object]:
    """A listed conversation for ``--json``: its tip's fields at the top level (as a session record), its lineage
    beside them, and with ``segments`` the records of its segments, root first."""
    entry: dict[str, object] = msgspec.to_builtins(row.tip)
    entry["user"] = session_user(row.tip)
    entry["lineage"] = {
        "root_id": row.root_id,
        "members": row.members,
        "message_count": row.message_count,
        "compressions": row.compressions,
        "preview": row.preview,
    }
    if segments is not None:
        entry["segments"] = [msgspec.to_builtins(segments[m]) for m in row.members if m in segments]
    return entry


def session_user(record: SessionRecord) -> str | None:
    """The user a session speaks for: its ``user_id``, except an API conversation that named none (its user id is
    then its own conversation name), which has no user."""
    if record.source == "api_server" and record.user_id == record.chat_id:
        return None
    return record.user_id


def listing_note(page: LineagePage) -> str | None:
    """What a listing cut by its limit says under the table: ``20 of 25 (--limit N for more, ...)``."""
    if page.total <= len(page.rows):
        return None
    return f"{len(page.rows)} of {page.total} (--limit N for more, --limit 0 for all)"


def lineage_text(store: StoreInterface, record: SessionRecord) -> str | None:
    """Where ``record`` stands in its compression lineage, in one line (``None`` for a single-segment session):
    ``segment 3 of 15 of lineage ROOT; the conversation continues in TIP``, or ``segment 15 of 15 (the newest)
    of lineage ROOT`` for the tip."""
    return _position_text(store.lineage_chain(record.id), record.id)


def _position_text(chain: list[str], session_id: str) -> str | None:
    if len(chain) < 2:
        return None
    position = chain.index(session_id) + 1
    where = f"segment {position} of {len(chain)}"
    if position == len(chain):
        return f"{where} (the newest) of lineage {chain[0]}"
    return f"{where} of lineage {chain[0]}; the conversation continues in {chain[-1]}"


def origin_text(record: SessionRecord) -> str:
    parts = [record.source]
    if record.chat_type:
        parts.append(record.chat_type)
    if record.chat_id:
        parts.append(f"chat {record.chat_id}" + (f" ({record.chat_name})" if record.chat_name else ""))
    if record.thread_id:
        parts.append(f"thread {record.thread_id}")
    if record.user_id or record.user_name:
        who = record.user_name or record.user_id
        parts.append(f"user {who}" + (f" ({record.user_id})" if record.user_name and record.user_id else ""))
    return one_line(" · ".join(p for p in parts if p))


def summary_lines(details: SessionDetails, *, now: float) -> list[str]:
    """The metadata block ``show`` prints first (and ``browse`` prints for the chosen session)."""
    r = details.record
    fields: list[tuple[str, str]] = [("Session", r.id), ("Title", title_text(r)), ("Source", origin_text(r))]
    if r.model:
        fields.append(("Model", one_line(r.model)))
    fields.append(("Agent", agent_text(r)))
    fields.append(("Started", f"{format_timestamp(r.started_at)} ({relative_time(r.started_at, now=now)})"))
    if r.ended_at is not None:
        fields.append(("Ended", f"{format_timestamp(r.ended_at)} ({r.end_reason})"))
    else:
        fields.append(("Status", f"live, last active {relative_time(r.last_active_at, now=now)}"))
    if details.running_in:
        fields.append(("Running", f"in {details.running_in}"))
    if r.parent_session_id:
        fields.append(("Parent", r.parent_session_id))
    if details.children:
        fields.append(("Children", ", ".join(details.children)))
    position = _position_text(details.lineage, r.id)
    if position is not None:
        fields.append(("Lineage", position))
        fields.append(("Segments", " → ".join(details.lineage)))
    fields.append(("Messages", f"{r.message_count} ({plural(r.tool_call_count, 'tool call')})"))
    estimated = " (estimated)" if r.tokens_estimated else ""  # some turn's model reported no usage
    fields.append(("Tokens", f"{r.input_tokens} in, {r.output_tokens} out{estimated}"))
    return [f"{label + ':':<10}{value}" for label, value in fields]


def tool_call_text(call: object) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    source = function if isinstance(function, dict) else call if isinstance(call, dict) else {}
    name = str(source.get("name") or "?")
    arguments = source.get("arguments", "")
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f"[tool call: {one_line(name)}({truncate(one_line(args), TOOL_ARGS_WIDTH)})]"


def tool_calls_text(raw: str) -> list[str]:
    try:
        calls = json.loads(raw)
    except ValueError:
        return [f"[tool calls: {truncate(one_line(raw), TOOL_ARGS_WIDTH)}]"]
    return [tool_call_text(call) for call in (calls if isinstance(calls, list) else [calls])]


def indent_lines(lines: list[str], first: str, rest: str) -> list[str]:
    return [(first if i == 0 else rest) + line for i, line in enumerate(lines)]


def cap_marks(message: MessageRecord, cap: int) -> str:
    """What ``show`` notes about how the model sees ``message``: a compression summary, cut to the cap."""
    marks = ["[summary]"] if is_summary(message) else []
    if is_capped(message, cap):
        marks.append(f"[capped for the model at {cap:,} chars]")
    return "".join(f" {mark}" for mark in marks)


def message_lines(message: MessageRecord, cap: int = 0) -> list[str]:
    stamp = f"[{format_timestamp(message.created_at)}]"
    body = terminal_safe(split_content(message.content or "")[0]).splitlines()  # imported multimodal: text only
    marks = cap_marks(message, cap)
    if message.role == Role.TOOL:
        label = f"[tool result: {one_line(message.tool_name or '?')}]{marks}"
        shown = body[:TOOL_RESULT_LINES]
        if len(body) > len(shown):
            shown.append(f"… {len(body) - len(shown)} more lines")
        return indent_lines([f"{stamp} {label}", *shown], "    ↳ ", "      ")
    if message.tool_calls:
        body += tool_calls_text(message.tool_calls)
    return indent_lines(body or [""], f"{stamp} {message.role}{marks}: ", "    ")


def transcript_lines(messages: list[MessageRecord], omitted: int, cap: int = 0) -> list[str]:
    lines = [f"… {plural(omitted, 'earlier message')} …"] if omitted else []
    for message in messages:
        lines.extend(message_lines(message, cap))
    return lines
