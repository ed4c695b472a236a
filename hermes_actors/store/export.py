"""Reading whole sessions out of the store and back in: the JSONL export, and a session's direct children.

An export line is one session in the reference system's layout: the session's fields at the top level beside
``"messages"``, its messages oldest first. A message's ``content`` is what the agent saw: a string, or, for the
reference system's structured content (multimodal parts an import kept, see :mod:`.content`), that JSON array or
object itself, never our stored encoding of it. ``tool_calls`` is the JSON array it holds (a string when it holds
no JSON array or object). A message's files are listed under its ``attachments`` (left out when it has none).
Message ids are left out: a message is its place in the list, so a line reads back into any store.

Sessions are read in pages of :data:`PAGE_SIZE` and one transcript at a time, so exporting a large database holds
one session in memory, not the database. Run the iteration inside ``store.transaction()`` to read one consistent
snapshot while the daemon keeps writing. :class:`ExportLine` reads a line back (ours or the reference system's);
:func:`insert_session_export` writes one session with its messages and their files, as they are. The functions are
written once for both stores (:class:`ExportedTables`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import msgspec

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.content import HERMES_JSON_PREFIX, split_content
from hermes_actors.store.records import AttachmentRecord, MessageRecord, MessageRow, SessionRecord
from hermes_actors.store.sql import SqlDb

__all__ = [
    "PAGE_SIZE",
    "AttachmentRow",
    "ExportLine",
    "ExportedAttachment",
    "ExportedMessage",
    "ExportedTables",
    "LineMessage",
    "SessionExport",
    "child_session_ids",
    "count_exports",
    "decode_export_line",
    "encode_export_line",
    "export_content",
    "insert_session_export",
    "iter_exports",
]

PAGE_SIZE = 200

_SESSION_COLUMNS = ", ".join(SessionRecord.__struct_fields__)
_encoder = msgspec.json.Encoder()
# JSON allows U+2028/U+2029 raw inside strings, but many line readers (Python's str.splitlines among them) split
# on them; escaped, every export line is one line to any reader.
_LINE_BREAKS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


class ExportedTables(Protocol):
    """What an export reads and an import writes of a store (both stores have it)."""

    @property
    def sql(self) -> SqlDb:
        """The database."""
        ...

    @property
    def attachments(self) -> Attachments:
        """The ``attachments`` table."""
        ...

    def load_transcript(self, session_id: str) -> list[MessageRecord]:
        """The session's messages in id order, their content as the agent saw it."""
        ...

    def insert_session(self, record: SessionRecord) -> None:
        """Insert ``record`` exactly as it is."""
        ...

    def insert_messages(self, session_id: str, rows: Sequence[MessageRow]) -> None:
        """Append message rows as they are to a session."""
        ...


class SessionExport(msgspec.Struct, frozen=True, kw_only=True):
    """One session as :func:`iter_exports` reads it: its row, all its messages (oldest first) and their files
    (by ``message_id``, in message order). :func:`encode_export_line` writes it as a line."""

    session: SessionRecord
    messages: list[MessageRecord]
    attachments: list[AttachmentRecord] = msgspec.field(default_factory=list)


class ExportedAttachment(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A message's file in an export line: the row without its ids (the file itself is not in the export)."""

    kind: str
    created_at: float
    mime_type: str | None = None
    size: int | None = None
    path: str | None = None
    sha256: str | None = None
    source_url: str | None = None
    name: str | None = None
    error: str | None = None


class ExportedMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A message as an export line writes it."""

    role: str
    content: str | msgspec.Raw | None
    created_at: float
    tool_calls: str | msgspec.Raw | None
    tool_name: str | None
    tool_call_id: str | None
    token_count: int | None
    platform_message_id: str | None
    attachments: list[ExportedAttachment] = msgspec.field(default_factory=list)


class LineMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message of an export line as read back: ours, or the reference system's (``timestamp``, ``active``).

    ``content`` and ``tool_calls`` are the raw JSON (empty when absent): a string, an array or object, or null.
    """

    role: str
    content: msgspec.Raw = msgspec.Raw()
    created_at: float | None = None
    timestamp: float | str | None = None
    tool_calls: msgspec.Raw = msgspec.Raw()
    tool_name: str | None = None
    tool_call_id: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None
    active: bool | int = True
    attachments: list[ExportedAttachment] = msgspec.field(default_factory=list)


class ExportLine(msgspec.Struct, frozen=True, kw_only=True):
    """An export line as read back: our session fields, or the reference system's (``session_key``,
    ``display_name``, ``origin_json``; no ``last_active_at``), beside ``messages``. Other fields are ignored."""

    id: str
    source: str
    started_at: float
    messages: list[LineMessage]
    last_active_at: float | None = None
    user_id: str | None = None
    user_name: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    chat_name: str | None = None
    thread_id: str | None = None
    scope_id: str | None = None
    account_id: str | None = None
    routing_key: str | None = None
    model: str | None = None
    title: str | None = None
    system_prompt: str | None = None
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    message_count: int | None = None
    tool_call_count: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    tools: str | None = None
    tokens_estimated: int | None = None
    agent: str | None = None
    session_key: str | None = None
    display_name: str | None = None
    origin_json: str | None = None


AttachmentRow = ExportedAttachment
"""A file of a message to write with :func:`insert_session_export`."""

_decoder = msgspec.json.Decoder(ExportLine)


def _where(source: str | None, session_id: str | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if source is not None:
        clauses.append("source = ?")
        params.append(source)
    if session_id is not None:
        clauses.append("id = ?")
        params.append(session_id)
    return "".join(f" AND {c}" for c in clauses), params


def count_exports(store: ExportedTables, *, source: str | None = None, session_id: str | None = None) -> int:
    """Return how many sessions :func:`iter_exports` with the same arguments yields."""
    where, params = _where(source, session_id)
    return int(store.sql.value(f"SELECT count(*) FROM sessions WHERE TRUE{where}", params) or 0)


def _session(columns: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(**dict(zip(SessionRecord.__struct_fields__, columns, strict=True)))


def _transcript(store: ExportedTables, session_id: str) -> list[MessageRecord]:
    try:
        return store.load_transcript(session_id)
    except SessionNotFoundError:  # deleted since its page was read: exported as it is now, without messages
        return []


def iter_exports(
    store: ExportedTables, *, source: str | None = None, session_id: str | None = None
) -> Iterator[SessionExport]:
    """Yield every session (of ``source``, or just ``session_id``, when given) with its messages, oldest first.

    Sessions come in the order they were created; each page of sessions is a fresh query, so the caller may
    write between them.
    """
    where, params = _where(source, session_id)
    after = 0
    while True:
        page = store.sql.execute(
            f"SELECT ref, {_SESSION_COLUMNS} FROM sessions WHERE ref > ?{where} ORDER BY ref LIMIT {PAGE_SIZE}",
            [after, *params],
        )
        for row in page:
            session = _session(row[1:])
            yield SessionExport(
                session=session,
                messages=_transcript(store, session.id),
                attachments=store.attachments.for_session(session.id),
            )
        if len(page) < PAGE_SIZE:
            return
        after = int(page[-1][0])


def _json_structure(text: str) -> msgspec.Raw | None:
    """``text`` as raw JSON when it is a JSON array or object, else ``None``."""
    stripped = text.strip()
    if not stripped.startswith(("[", "{")):
        return None
    raw = stripped.encode("utf-8", "surrogatepass")
    try:
        msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, ValueError):
        return None
    # Outside its strings (where JSON has them escaped) a line break is white space: it must not end the line.
    return msgspec.Raw(raw.replace(b"\r", b" ").replace(b"\n", b" "))


def export_content(content: str | None) -> str | msgspec.Raw | None:
    """A stored ``content`` as an export writes it: its text, or the structured JSON value an import kept.

    A structured value that is no JSON array or object is written as the reference system stored it (a string
    beginning with ``"\\x00json:"``), which reads back into the same stored content.
    """
    if content is None:
        return None
    text, value = split_content(content)
    if value is None:
        return text
    structure = _json_structure(value[len(HERMES_JSON_PREFIX) :])
    return value if structure is None else structure


def _exported(message: MessageRecord, files: list[AttachmentRecord]) -> ExportedMessage:
    calls = message.tool_calls
    structure = None if calls is None else _json_structure(calls)
    return ExportedMessage(
        role=message.role,
        content=export_content(message.content),
        created_at=message.created_at,
        tool_calls=calls if structure is None else structure,
        tool_name=message.tool_name,
        tool_call_id=message.tool_call_id,
        token_count=message.token_count,
        platform_message_id=message.platform_message_id,
        attachments=[
            ExportedAttachment(
                **{f: getattr(a, f) for f in ExportedAttachment.__struct_fields__},
            )
            for a in files
        ],
    )


def encode_export_line(export: SessionExport) -> bytes:
    """Return ``export`` as one line of JSON in the reference layout, newline included; no character in it
    breaks the line."""
    files: dict[int, list[AttachmentRecord]] = {}
    for attachment in export.attachments:
        files.setdefault(attachment.message_id, []).append(attachment)
    fields = msgspec.structs.asdict(export.session)
    fields["messages"] = [_exported(m, files.get(m.id, [])) for m in export.messages]
    line = _encoder.encode(fields)
    for raw, escaped in _LINE_BREAKS:
        line = line.replace(raw, escaped)
    return line + b"\n"


def decode_export_line(line: bytes | str) -> ExportLine:
    """Parse one export line (ours or the reference system's); raises ``msgspec.ValidationError``/``DecodeError``
    naming the bad field."""
    return _decoder.decode(line)


def insert_session_export(
    store: ExportedTables, record: SessionRecord, messages: Sequence[tuple[MessageRow, Sequence[AttachmentRow]]]
) -> None:
    """Insert ``record`` as it is, then its messages in order with their files, in one transaction (an import; the
    title must be free and the parent, if any, present)."""
    db = store.sql
    with db.transaction(savepoint=False):
        store.insert_session(record)
        store.insert_messages(record.id, [row for row, _ in messages])
        if not any(files for _, files in messages):
            return
        # The session is new in this transaction: its messages are those just inserted, and ids ascend.
        ids = db.execute(
            "SELECT id FROM messages WHERE session_ref = (SELECT ref FROM sessions WHERE id = ?) ORDER BY id",
            (record.id,),
        )
        db.executemany(
            "INSERT INTO attachments (message_id, kind, created_at, mime_type, size, path, sha256, source_url, "
            "name, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (message_id, *msgspec.structs.astuple(file))
                for (message_id,), (_, files) in zip(ids, messages, strict=True)
                for file in files
            ],
        )


def child_session_ids(store: ExportedTables, session_id: str) -> list[str]:
    """Return the ids of the sessions whose parent is ``session_id``, oldest first (any end reason)."""
    rows = store.sql.execute(
        "SELECT id FROM sessions WHERE parent_session_id = ? ORDER BY started_at, id", (session_id,)
    )
    return [str(sid) for (sid,) in rows]
