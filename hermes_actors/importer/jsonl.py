"""``hermesctl sessions import``: read back a ``sessions export`` file, ours or the reference system's.

A line is one session (:class:`~hermes_actors.store.export.ExportLine`). Our lines carry our session fields and
are written as they are. The reference system's lines (no ``last_active_at``) are mapped as the database import
maps its rows (:mod:`.rows`): ``session_key`` becomes the routing key, ``display_name`` and ``origin_json`` fill
the chat's name and the user, end reasons are translated, messages carry ``timestamp``, rows that are no longer
``active`` there (compacted or rewound away) are not imported, and the counters are counted from what is.

The whole file is read and checked first (:func:`check_lines`): a malformed line is an error naming its number,
and nothing is imported. Then each batch of whole sessions commits in one transaction, so an import that fails
midway leaves whole sessions behind and can be run again. A session whose id is already here is skipped and
counted, so importing a file twice changes nothing. A title another session holds here is made unique as
``"title (2)"`` (the lowest free number; never ``"#N"``, which is lineage numbering: the imported session does not
continue the local one), as the database import does, and reported; a parent that is not here is dropped and
reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import msgspec

from hermes_actors.errors import HermesError, TitleError
from hermes_actors.importer.report import SessionNote, TitleNote
from hermes_actors.importer.rows import END_REASONS, ROLES, bare_record, routing_key, tool_call_count
from hermes_actors.importer.source_records import HermesSession, json_value, origin_value, timestamp_value
from hermes_actors.importer.tenancy import REFERENCE_RULES
from hermes_actors.store import EndReason, SessionRecord, StoreInterface
from hermes_actors.store.content import HERMES_JSON_PREFIX, store_content
from hermes_actors.store.export import AttachmentRow, ExportLine, LineMessage, decode_export_line
from hermes_actors.store.records import MessageRow
from hermes_actors.titles import MAX_TITLE_LENGTH, sanitize_title

__all__ = [
    "BATCH_MESSAGES",
    "ExportFileError",
    "JsonlImport",
    "Lines",
    "ParsedSession",
    "check_lines",
    "import_lines",
    "parse_line",
]

BATCH_MESSAGES = 5000
_TITLE_PROBES = 1000

Lines = Callable[[], Iterable[bytes]]
"""Reads the file from its start, a line at a time (each call reads it again)."""


class ExportFileError(HermesError):
    """A line of an export file that cannot be imported (its number and why)."""


class ParsedSession(msgspec.Struct, frozen=True, kw_only=True):
    """One line made ready to write: the session's row (title and parent not yet checked against the store) and
    its messages with their files; ``inactive`` counts reference rows not imported."""

    record: SessionRecord
    messages: list[tuple[MessageRow, list[AttachmentRow]]]
    inactive: int = 0


class JsonlImport(msgspec.Struct, kw_only=True):
    """What an import of an export file did."""

    sessions_in_file: int = 0
    sessions_imported: int = 0
    messages_imported: int = 0
    sessions_present: list[str] = msgspec.field(default_factory=list)  # already here: skipped
    inactive_messages: int = 0  # reference rows compacted or rewound away there: not imported
    titles: list[TitleNote] = msgspec.field(default_factory=list)
    parent_links_dropped: list[SessionNote] = msgspec.field(default_factory=list)


def _numbered(lines: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, line


def _text(number: int, where: str, raw: msgspec.Raw, *, structured: bool) -> str | None:
    """A raw ``content``/``tool_calls`` value as stored text (structured content in our stored encoding)."""
    data = bytes(raw).strip()
    if not data or data == b"null":
        return None
    if data.startswith(b'"'):
        text = msgspec.json.decode(data, type=str)
        return store_content(text) if structured else text
    if data.startswith((b"[", b"{")):
        value = data.decode("utf-8")
        return store_content(HERMES_JSON_PREFIX + value) if structured else value
    raise ExportFileError(f"line {number}: {where} must be a string, a JSON array or object, or null")


def _message(number: int, index: int, message: LineMessage, *, ours: bool) -> MessageRow:
    where = f"messages[{index}]"
    role = ROLES.get(message.role)
    if role is None:
        raise ExportFileError(f"line {number}: {where}.role {message.role!r} is none of system, user, assistant, tool")
    created_at = message.created_at if ours else timestamp_value(message.timestamp)
    if created_at is None:
        field = "created_at" if ours else "timestamp"
        raise ExportFileError(f"line {number}: {where} has no {field} (seconds since the epoch)")
    return (
        role.value,
        _text(number, f"{where}.content", message.content, structured=True),
        _text(number, f"{where}.tool_calls", message.tool_calls, structured=False),
        message.tool_name,
        message.tool_call_id,
        message.token_count,
        created_at,
        message.platform_message_id,
    )


def _ours(number: int, line: ExportLine, messages: list[tuple[MessageRow, list[AttachmentRow]]]) -> SessionRecord:
    if (line.ended_at is None) != (line.end_reason is None):
        raise ExportFileError(f"line {number}: ended_at and end_reason must both be set or both be null")
    fields = {f: getattr(line, f) for f in SessionRecord.__struct_fields__ if getattr(line, f) is not None}
    return SessionRecord(**fields)


def _reference(number: int, line: ExportLine, messages: list[tuple[MessageRow, list[AttachmentRow]]]) -> SessionRecord:
    session = HermesSession(
        id=line.id,
        source=line.source,
        started_at=line.started_at,
        user_id=line.user_id,
        session_key=line.session_key,
        chat_id=line.chat_id,
        chat_type=line.chat_type,
        thread_id=line.thread_id,
        display_name=line.display_name,
        origin=origin_value(json_value(line.origin_json), line.source),
        model=line.model,
        system_prompt=line.system_prompt,
        parent_session_id=line.parent_session_id,
        title=line.title,
    )
    last_active = max([line.started_at, *(row[6] for row, _ in messages)])
    ended_at, end_reason = None, None
    if line.ended_at is not None or line.end_reason is not None:
        ended_at = line.ended_at if line.ended_at is not None else last_active
        end_reason = END_REASONS.get(line.end_reason or "", EndReason.IMPORTED).value
    return msgspec.structs.replace(
        bare_record(session),
        last_active_at=last_active,
        routing_key=routing_key(session, REFERENCE_RULES),  # the reference's key, Slack's moved to its workspace
        title=line.title,
        parent_session_id=line.parent_session_id,
        ended_at=ended_at,
        end_reason=end_reason,
        message_count=len(messages),
        tool_call_count=sum(tool_call_count(row[2]) for row, _ in messages),
        input_tokens=line.input_tokens or 0,
        output_tokens=line.output_tokens or 0,
    )


def parse_line(number: int, data: bytes) -> ParsedSession:
    """Read line ``number``; raise :class:`ExportFileError` naming the line and what is wrong with it."""
    try:
        line = decode_export_line(data)
    except msgspec.ValidationError as exc:
        raise ExportFileError(f"line {number}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ExportFileError(
            f"line {number} is not one JSON object ({exc}); is this a 'sessions export' file?"
        ) from None
    ours = line.last_active_at is not None
    live = [m for m in line.messages if ours or bool(m.active)]
    messages = [(_message(number, i, m, ours=ours), list(m.attachments)) for i, m in enumerate(live)]
    record = (_ours if ours else _reference)(number, line, messages)
    return ParsedSession(record=record, messages=messages, inactive=len(line.messages) - len(live))


def check_lines(lines: Iterable[bytes]) -> int:
    """Read every line; return how many sessions there are, or raise :class:`ExportFileError` for the first bad one."""
    count = 0
    for number, data in _numbered(lines):
        parse_line(number, data)
        count += 1
    return count


class _Writer:
    def __init__(self, store: StoreInterface, result: JsonlImport) -> None:
        self.store = store
        self.result = result

    def distinct(self, title: str) -> str:
        """``"title (N)"`` for the lowest N no session holds."""
        for number in range(2, _TITLE_PROBES + 2):
            suffix = f" ({number})"
            candidate = title[: MAX_TITLE_LENGTH - len(suffix)].rstrip() + suffix
            if self.store.title_holder(candidate) is None:
                return candidate
        raise ExportFileError(f"no free title like {title!r} in {_TITLE_PROBES} tries; rename those sessions")

    def title(self, record: SessionRecord) -> str | None:
        wanted = record.title
        if wanted is None:
            return None
        try:
            clean = sanitize_title(wanted)
        except TitleError:
            clean = sanitize_title(wanted[:MAX_TITLE_LENGTH])
        if clean != wanted:
            reason = "sanitised" if clean is not None else "nothing left after sanitising"
            self.result.titles.append(TitleNote(session_id=record.id, source_title=wanted, title=clean, reason=reason))
        if clean is None:
            return None
        holder = self.store.title_holder(clean)
        if holder is None:
            return clean
        free = self.distinct(clean)
        self.result.titles.append(
            TitleNote(
                session_id=record.id,
                source_title=wanted,
                title=free,
                reason=f"Title '{clean}' is already in use by session {holder}",
            )
        )
        return free

    def parent(self, record: SessionRecord) -> str | None:
        parent = record.parent_session_id
        if parent is None or self.store.find_session(parent) is not None:
            return parent
        reason = f"its parent {parent} is neither here nor earlier in the file; the link was dropped"
        self.result.parent_links_dropped.append(SessionNote(session_id=record.id, reason=reason))
        return None

    def write(self, parsed: ParsedSession) -> None:
        record = parsed.record
        if self.store.find_session(record.id) is not None:
            self.result.sessions_present.append(record.id)
            return
        record = msgspec.structs.replace(record, title=self.title(record), parent_session_id=self.parent(record))
        self.store.insert_session_export(record, parsed.messages)
        self.result.sessions_imported += 1
        self.result.messages_imported += len(parsed.messages)
        self.result.inactive_messages += parsed.inactive


def import_lines(
    lines: Lines,
    store: StoreInterface,
    *,
    progress: Callable[[int, int], None] | None = None,
    batch_messages: int = BATCH_MESSAGES,
) -> JsonlImport:
    """Check the whole file, then import its sessions in batches of whole sessions, one transaction each.

    ``lines`` is called twice (checking, importing). ``progress`` gets (sessions done, sessions in all). Raises
    :class:`ExportFileError` (nothing imported) when a line is malformed.
    """
    try:
        result = JsonlImport(sessions_in_file=check_lines(lines()))
    except ExportFileError as exc:
        raise ExportFileError(f"{exc}; nothing was imported (fix or remove that line and import again)") from None
    writer = _Writer(store, result)
    done = 0
    batch: list[ParsedSession] = []
    weight = 0

    def flush() -> None:
        nonlocal done, weight
        with store.transaction():
            for parsed in batch:
                writer.write(parsed)
        done += len(batch)
        batch.clear()
        weight = 0
        if progress is not None:
            progress(done, result.sessions_in_file)

    if progress is not None:
        progress(0, result.sessions_in_file)
    for number, data in _numbered(lines()):
        batch.append(parse_line(number, data))
        weight += len(batch[-1].messages) + 1
        if weight >= batch_messages:
            flush()
    if batch:
        flush()
    return result
