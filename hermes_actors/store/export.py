"""Reading whole sessions out of the store: the JSONL export, and a session's direct children.

An export line is one session with all its messages in id order and the attachments of those messages
(:class:`SessionExport`; each attachment names its message), so a file of them can be read back a line at a time.
Sessions are read in pages of :data:`PAGE_SIZE` and one transcript at a time, so exporting a large database holds
one session in memory, not the database. Run the iteration inside ``store.transaction()`` to read one consistent
snapshot while the daemon keeps writing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from hermes_actors.store.records import AttachmentRecord, MessageRecord, SessionRecord

if TYPE_CHECKING:
    from hermes_actors.store.store import Store

__all__ = [
    "PAGE_SIZE",
    "SessionExport",
    "child_session_ids",
    "count_exports",
    "decode_export_line",
    "encode_export_line",
    "iter_exports",
]

PAGE_SIZE = 200

_SESSION_COLUMNS = ", ".join(SessionRecord.__struct_fields__)
# Messages name their session by sessions.ref; the query puts the session id back as ?1.
_MESSAGE_COLUMNS = ", ".join("?1" if f == "session_id" else f for f in MessageRecord.__struct_fields__)
_encoder = msgspec.json.Encoder()
# JSON allows U+2028/U+2029 raw inside strings, but many line readers (Python's str.splitlines among them) split
# on them; escaped, every export line is one line to any reader.
_LINE_BREAKS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


class SessionExport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of an export: a session's metadata and all its messages, oldest first.

    ``attachments`` lists the files of those messages (by ``message_id``, in message order); a session without
    any leaves the key out, so its line reads as it did before attachments existed.
    """

    session: SessionRecord
    messages: list[MessageRecord]
    attachments: list[AttachmentRecord] = msgspec.field(default_factory=list)


_decoder = msgspec.json.Decoder(SessionExport)


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


def count_exports(store: Store, *, source: str | None = None, session_id: str | None = None) -> int:
    """Return how many sessions :func:`iter_exports` with the same arguments yields."""
    where, params = _where(source, session_id)
    return int(store._connection.execute(f"SELECT count(*) FROM sessions WHERE 1{where}", params).get)


def _session(columns: tuple[Any, ...]) -> SessionRecord:
    return SessionRecord(**dict(zip(SessionRecord.__struct_fields__, columns, strict=True)))


def _transcript(store: Store, ref: int, session_id: str) -> list[MessageRecord]:
    rows = store._connection.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ?2 ORDER BY id", (session_id, ref)
    )
    return [MessageRecord(**dict(zip(MessageRecord.__struct_fields__, row, strict=True))) for row in rows]


def iter_exports(store: Store, *, source: str | None = None, session_id: str | None = None) -> Iterator[SessionExport]:
    """Yield every session (of ``source``, or just ``session_id``, when given) with its messages, oldest first.

    Sessions come in the order they were created; each page of sessions is a fresh query, so the caller may
    write between them.
    """
    where, params = _where(source, session_id)
    after = 0
    while True:
        page: list[tuple[Any, ...]] = store._connection.execute(
            f"SELECT ref, {_SESSION_COLUMNS} FROM sessions WHERE ref > ?{where} ORDER BY ref LIMIT {PAGE_SIZE}",
            [after, *params],
        ).fetchall()
        for row in page:
            ref, session = int(row[0]), _session(row[1:])
            yield SessionExport(
                session=session,
                messages=_transcript(store, ref, session.id),
                attachments=store.attachments.for_session(session.id),
            )
        if len(page) < PAGE_SIZE:
            return
        after = int(page[-1][0])


def encode_export_line(export: SessionExport) -> bytes:
    """Return ``export`` as one line of JSON, newline included; no character in it breaks the line."""
    line = _encoder.encode(export)
    for raw, escaped in _LINE_BREAKS:
        line = line.replace(raw, escaped)
    return line + b"\n"


def decode_export_line(line: bytes | str) -> SessionExport:
    """Parse one export line; raises ``msgspec.ValidationError``/``DecodeError`` naming the bad field."""
    return _decoder.decode(line)


def child_session_ids(store: Store, session_id: str) -> list[str]:
    """Return the ids of the sessions whose parent is ``session_id``, oldest first (any end reason)."""
    rows = store._connection.execute(
        "SELECT id FROM sessions WHERE parent_session_id = ? ORDER BY started_at, id", (session_id,)
    )
    return [str(sid) for (sid,) in rows]
