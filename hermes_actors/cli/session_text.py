"""How ``hermesctl sessions`` shows sessions: the table of ``list``, the summary and transcript of ``show``."""

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
from hermes_actors.store import MessageRecord, Role, SessionRecord, StoreInterface
from hermes_actors.store.content import split_content

__all__ = [
    "TITLE_WIDTH",
    "SessionDetails",
    "load_details",
    "message_lines",
    "session_table",
    "status_text",
    "summary_lines",
    "title_text",
    "transcript_lines",
]

TITLE_WIDTH = 40
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
    if numbered:
        headers.insert(0, "#")
        for number, row in enumerate(rows, start=1):
            row.insert(0, str(number))
    counts = headers.index("MESSAGES")
    return render_table(headers, rows, right_aligned=(0, counts) if numbered else (counts,))


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
    if len(details.lineage) > 1:
        position = details.lineage.index(r.id) + 1
        fields.append(("Lineage", f"{' → '.join(details.lineage)} ({position} of {len(details.lineage)})"))
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
