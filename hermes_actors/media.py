"""The media store: files that come with messages, saved once under ``$HERMES_HOME/media`` and passed on as records.

Adapters hand every image, audio clip, video or document to the gateway as an
:class:`~hermes_actors.messages.Attachment` made here, never as bytes in a message. :meth:`MediaStore.save` checks
the limits of :class:`MediaConfig` (size, allowed kinds), writes the bytes once, named by their sha256
(``media/ab/ab12….jpg``: the same bytes twice are one file), and returns the record with the local path. An
attachment over the limit, of a kind not allowed, or whose download failed becomes a record with an ``error`` and
no file (:meth:`MediaStore.refuse`); the text of its message still runs, and the reply starts with what could not
be read (:func:`unread_note`).

The turn that carries attachments gives the agent the records (``TurnInput.attachments``: a vision-capable model
gets images as image parts), and the user message stored in the transcript gets a text stand-in
(:func:`user_content`): kind, name, type, size and path, and a description where one was made when the file was
saved (the first kilobytes of a plain-text document, or what the configured ``describe`` step said). The
description is made once, at the edge, and travels in the record, so a replayed turn does not run it again.
Later turns carry only that text, never the bytes. Deleting a session removes the files no other row names
(:mod:`hermes_actors.store.attachments`). Files are 0600 and directories 0700 whatever the umask.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import hashlib
import importlib
import logging
import mimetypes
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.messages import Attachment, AttachmentKind, InboundMessage

__all__ = [
    "KINDS",
    "AttachmentKind",
    "Describe",
    "MediaConfig",
    "MediaStore",
    "check_describe",
    "for_agent",
    "format_size",
    "kind_of",
    "stand_in",
    "unread_note",
    "user_content",
]

KINDS: tuple[AttachmentKind, ...] = tuple(AttachmentKind)

Kind = AttachmentKind | str
"""A kind as callers give it: the member, or (for now) its value; records always hold the member."""

Describe = Callable[[Path, Attachment], str | None]
"""A describe step: the saved file and its record in, a short text description (or ``None``) out."""

_log = logging.getLogger(__name__)

_MB = 1024 * 1024
_MaxBytes = Annotated[int, Rule(Meta(ge=1), f"must be a positive number of bytes; the default is {20 * _MB}")]
_ExcerptBytes = Annotated[int, Rule(Meta(ge=0), "must be 0 (no text excerpts) or a positive number of bytes")]
_Function = Annotated[
    str,
    Rule(
        Meta(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z"),
        "must name a function as module:function, such as mypkg.vision:describe",
    ),
]
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,10}")
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/yaml", "application/x-yaml", "application/x-ndjson"}
)


class MediaConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``media:`` section of ``config.yaml``: what attachments are accepted and how they are described.

    ``max_bytes`` bounds one file; ``allowed_kinds`` lists the kinds accepted (of :data:`KINDS`). A plain-text
    document (``text/*``, JSON, XML, YAML) gets its first ``excerpt_bytes`` written into the conversation as its
    stand-in (0: none). ``describe`` names a :data:`Describe` function as ``module:function``; it runs once when a
    file is saved, on the adapter's thread, so it should be quick (or queue the work elsewhere).
    """

    max_bytes: _MaxBytes = 20 * _MB
    allowed_kinds: tuple[str, ...] = KINDS
    excerpt_bytes: _ExcerptBytes = 4096
    describe: _Function | None = None

    def __post_init__(self) -> None:
        check_section(self, "media")
        for kind in self.allowed_kinds:
            if kind not in KINDS:
                raise ConfigError("media.allowed_kinds", f"{kind!r} is not a kind; use some of: {', '.join(KINDS)}")


def format_size(size: int) -> str:
    """``size`` bytes for people: ``512 bytes``, ``12 KB``, ``30 MB`` (binary units, one decimal at most)."""
    if size < 1024:
        return f"{size} bytes"
    value, unit = (size / _MB, "MB") if size >= _MB else (size / 1024, "KB")
    return f"{value:.1f}".removesuffix(".0") + f" {unit}"


def kind_of(mime_type: str | None) -> AttachmentKind:
    """The attachment kind of a MIME type: ``image/png`` is an image; anything unknown is a document."""
    major = (mime_type or "").split("/", 1)[0].lower()
    return _MAJOR_KINDS.get(major, AttachmentKind.DOCUMENT)


_MAJOR_KINDS = {kind.value: kind for kind in (AttachmentKind.IMAGE, AttachmentKind.AUDIO, AttachmentKind.VIDEO)}


def _member(kind: Kind) -> AttachmentKind:
    """``kind`` as the member; a string that names none is a programming error of the caller (ValueError)."""
    try:
        return AttachmentKind(kind)
    except ValueError:
        raise ValueError(f"{kind!r} is not an attachment kind; use one of: {', '.join(KINDS)}") from None


def _is_text(mime_type: str) -> bool:
    mime = mime_type.lower()
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def _suffix(mime_type: str, name: str | None) -> str:
    """The file name suffix of a saved file: the sender's, when it looks like one, else the MIME type's."""
    given = Path(name).suffix if name else ""
    if _SUFFIX.fullmatch(given):
        return given.lower()
    return mimetypes.guess_extension(mime_type, strict=False) or ""


def check_describe(config: MediaConfig) -> None:
    """Raise :class:`ConfigError` if ``config.describe`` names a function that cannot be loaded (as
    :class:`MediaStore` would when built)."""
    _load_describe(config.describe)


def _load_describe(reference: str | None) -> Describe | None:
    if reference is None:
        return None
    module_name, _, attribute = reference.partition(":")
    try:
        found: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("media.describe", f"cannot load {reference!r} ({exc}); check the module and name") from None
    if not callable(found):
        raise ConfigError("media.describe", f"{reference!r} is not a function")
    describe: Describe = found
    return describe


class MediaStore:
    """Saves attachments' bytes once under ``directory`` and makes their records; safe to use from any thread.

    ``describe`` overrides the step named by ``config.describe``. Raises :class:`ConfigError` when that name
    cannot be loaded.
    """

    def __init__(self, directory: str | Path, config: MediaConfig | None = None, *, describe: Describe | None = None):
        self.directory = Path(directory).resolve()
        self._tighten()
        self.config = config or MediaConfig()
        self._describe = describe if describe is not None else _load_describe(self.config.describe)

    def _tighten(self) -> None:
        """Take group and other access from a media directory an older install left open: it holds what users sent."""
        try:
            mode = self.directory.stat().st_mode
            if mode & 0o077:
                self.directory.chmod(mode & 0o700)
        except FileNotFoundError:
            pass  # made 0700 with the first file
        except OSError as exc:
            _log.warning("media: cannot make %s private to its owner: %s", self.directory, exc.strerror or exc)

    def check(self, kind: Kind, size: int | None) -> str | None:
        """Why an attachment of ``kind`` and ``size`` bytes (``None``: not known yet) would be refused, or ``None``."""
        if kind not in self.config.allowed_kinds:
            allowed = ", ".join(self.config.allowed_kinds) or "none"
            return f"{kind} files are not accepted here (media.allowed_kinds: {allowed})"
        if size is not None and size > self.config.max_bytes:
            return f"it is {format_size(size)}, over the {format_size(self.config.max_bytes)} limit"
        return None

    def refuse(
        self,
        problem: str,
        *,
        kind: Kind,
        mime_type: str | None = None,
        name: str | None = None,
        size: int | None = None,
        source_url: str | None = None,
    ) -> Attachment:
        """The record of an attachment that was not read, saying why (``problem`` completes "I could not read X: ")."""
        return Attachment(
            kind=_member(kind),
            mime_type=mime_type,
            name=name,
            size=size,
            source_url=source_url,
            error=problem.rstrip("."),
        )

    def link(self, url: str, *, kind: Kind, mime_type: str | None = None, name: str | None = None) -> Attachment:
        """The record of a file known only by its URL (nothing is fetched); refused if its kind is not allowed."""
        problem = self.check(kind, None)
        if problem is not None:
            return self.refuse(problem, kind=kind, mime_type=mime_type, name=name, source_url=url)
        return Attachment(kind=_member(kind), mime_type=mime_type, name=name, source_url=url)

    def save(
        self,
        data: bytes,
        *,
        kind: Kind | None = None,
        mime_type: str | None = None,
        name: str | None = None,
        source_url: str | None = None,
    ) -> Attachment:
        """Check ``data`` against the limits, write it once and return its record (or a refused one, saying why).

        Without ``mime_type`` the type is guessed from ``name``; without ``kind``, it follows from the type.
        """
        mime = (
            mime_type or (mimetypes.guess_type(name, strict=False)[0] if name else None) or "application/octet-stream"
        )
        kind = _member(kind) if kind else kind_of(mime)
        problem = self.check(kind, len(data))
        if problem is not None:
            return self.refuse(problem, kind=kind, mime_type=mime, name=name, size=len(data), source_url=source_url)
        digest = hashlib.sha256(data).hexdigest()
        target = self.directory / digest[:2] / f"{digest}{_suffix(mime, name)}"
        try:
            _write_once(target, data)
        except OSError as exc:
            _log.error("media: could not save %s to %s: %s", name or kind, target, exc)
            return self.refuse(
                f"it could not be saved ({exc.strerror or exc})",
                kind=kind,
                mime_type=mime,
                name=name,
                size=len(data),
                source_url=source_url,
            )
        saved = Attachment(
            kind=kind, mime_type=mime, name=name, size=len(data), path=str(target), sha256=digest, source_url=source_url
        )
        description = self._excerpt(data, mime) or self._described(target, saved)
        return msgspec.structs.replace(saved, description=description) if description else saved

    def save_base64(
        self, encoded: str, *, kind: Kind | None = None, mime_type: str | None = None, name: str | None = None
    ) -> Attachment:
        """Decode and :meth:`save` ``encoded``; one over the size limit is refused before it is decoded."""
        mime = mime_type or "application/octet-stream"
        kind = _member(kind) if kind else kind_of(mime)
        text = encoded.strip()
        size = len(text) * 3 // 4 - len(text) + len(text.rstrip("="))
        problem = self.check(kind, size)
        if problem is not None:
            return self.refuse(problem, kind=kind, mime_type=mime, name=name, size=size)
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return self.refuse("it is not valid base64", kind=kind, mime_type=mime, name=name)
        return self.save(data, kind=kind, mime_type=mime, name=name)

    def _excerpt(self, data: bytes, mime_type: str) -> str | None:
        """The first ``excerpt_bytes`` of a plain-text file as its stand-in, or ``None``."""
        limit = self.config.excerpt_bytes
        if limit == 0 or not _is_text(mime_type):
            return None
        head = data[:limit]
        if b"\x00" in head:
            return None  # not text, whatever the sender called it
        text = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=len(data) <= limit)
        if not text.strip():
            return None
        shown = "Its text:" if len(data) <= limit else f"Its first {format_size(limit)}:"
        return f"{shown}\n{text}"

    def _described(self, path: Path, attachment: Attachment) -> str | None:
        if self._describe is None:
            return None
        try:
            described = self._describe(path, attachment)
        except Exception:
            _log.exception("media: the describe step failed for %s; it goes on without a description", path)
            return None
        if not isinstance(described, str) or not described.strip():
            return None
        return described.strip()


def _make_directories(directory: Path) -> None:
    """Create ``directory`` and its missing parents 0700 whatever the umask (existing ones are left as they are)."""
    missing: list[Path] = []
    while not directory.is_dir():
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        created.mkdir(mode=0o700, exist_ok=True)
        created.chmod(0o700)  # mkdir's mode is reduced by the umask, never widened


def _write_once(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` unless it is there already: a temporary file, flushed, renamed into place.

    Files are 0600 (``mkstemp``) and the directories 0700, so attachments are private to the owner.
    """
    if target.is_file() and target.stat().st_size == len(data):
        return
    if not target.parent.is_dir():
        _make_directories(target.parent)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())  # the inbox row that names it commits next; the bytes must be there first
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _label(attachment: Attachment) -> str:
    return attachment.name or f"the {attachment.kind}"


def stand_in(attachment: Attachment) -> str:
    """The text an attachment leaves in the transcript: what it was, where it is, and its description if any."""
    named = f"{attachment.kind} {attachment.name}" if attachment.name else attachment.kind
    if attachment.error is not None:
        return f"[{named} was not read: {attachment.error}]"
    facts = [attachment.mime_type or "unknown type"]
    if attachment.size is not None:
        facts.append(format_size(attachment.size))
    if attachment.path is not None:
        where = f"saved at {attachment.path}"
    elif attachment.source_url is not None:
        where = f"at {attachment.source_url} (not downloaded)"
    else:
        where = "not saved"
    line = f"[attached {named} ({', '.join(facts)}), {where}]"
    return f"{line}\n{attachment.description}" if attachment.description else line


def user_content(message: InboundMessage) -> str:
    """The user message a turn stores for ``message``: its text, then a stand-in line for each attachment."""
    if not message.attachments:
        return message.text
    parts = [message.text] if message.text.strip() else []
    parts.extend(stand_in(attachment) for attachment in message.attachments)
    return "\n".join(parts)


def for_agent(messages: Iterable[InboundMessage]) -> tuple[Attachment, ...]:
    """The attachments of ``messages`` an agent can take natively: read, with a file or a URL."""
    return tuple(
        attachment
        for message in messages
        for attachment in message.attachments
        if attachment.error is None and (attachment.path is not None or attachment.source_url is not None)
    )


def unread_note(messages: Iterable[InboundMessage]) -> str | None:
    """What the reply to ``messages`` says about attachments that could not be read, or ``None``."""
    failed = [a for message in messages for a in message.attachments if a.error is not None]
    if not failed:
        return None
    return " ".join(f"I could not read {_label(a)}: {a.error}." for a in failed)
