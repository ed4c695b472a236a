"""A received mail read once: who sent it, which thread it is in, the new text without quoted history or signature,
and its attached files.

The turn's text is what the sender wrote this time. Quoted lines (``>``), the history a client appends after an
attribution line ("On Tue, 1 Dec 2026 at 10:00, Alice <alice@example.com> wrote:", also wrapped over two lines,
and Outlook's "-----Original Message-----" or "From: … Sent: …" header block) and the signature after the
``-- `` delimiter are cut. The whole message is kept in the media store (``message/rfc822``), so nothing is lost.

Mail that must never start a turn is recognised here: automatic replies (``Auto-Submitted`` other than ``no``,
``Precedence: bulk/junk/list``, ``X-Autoreply``), bounces (an empty or ``MAILER-DAEMON`` return path), so an agent
and an out-of-office robot never answer each other in a loop.

The sender is the one mailbox of the one ``From`` header, read strictly (:mod:`email.headerregistry`): a header
with any defect, more than one mailbox, a group or no domain name is a :class:`FromError`, so the address read here
is the one a DMARC verifier judges (``alice@example.com (alice) <evil@evil.com>`` is refused, not read as alice).
With a trusted server (``trusted_authserv_id``), the topmost ``Authentication-Results`` header must be that
server's and report exactly one ``dmarc=pass`` whose ``header.from`` is the From domain
(:mod:`platforms.email.authres`); headers below it were written by someone else, perhaps the sender.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import html
import re
from email.headerregistry import Address, AddressHeader, BaseHeader
from email.message import EmailMessage
from typing import cast

import msgspec

from platforms.email.authres import AuthResError, dmarc_problem, parse_authres

__all__ = [
    "FilePart",
    "FromError",
    "ParsedMail",
    "automatic",
    "from_mailbox",
    "parse_mail",
    "strip_history",
    "unvouched",
]

_ATTRIBUTION = re.compile(r"^(on\b.{0,300}\bwrote:|.{0,200}\bwrote:)\s*$", re.IGNORECASE)
_OUTLOOK = re.compile(r"^-{2,}\s*original message\s*-{2,}$|^_{10,}$", re.IGNORECASE)
_HEADER_BLOCK = re.compile(r"^from:\s.+$", re.IGNORECASE)
_TAGS = re.compile(r"<[^>]{0,500}>")
_BLOCKS = re.compile(r"<\s*(br|/p|/div|/li|/tr)\b[^>]{0,100}>", re.IGNORECASE)
_HIDDEN = re.compile(r"<(style|script|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,500}>")
_MAX_FILES = 20
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


class FromError(ValueError):
    """The mail names no single, cleanly written From mailbox; the message says what is wrong."""


class FilePart(msgspec.Struct, frozen=True, kw_only=True):
    """An attached file: its bytes, type and name."""

    data: bytes
    mime_type: str
    name: str | None


class ParsedMail(msgspec.Struct, frozen=True, kw_only=True):
    """What the adapter uses of a mail."""

    message_id: str
    sender: str  # the From address, lower case
    sender_name: str | None
    subject: str
    references: tuple[str, ...]  # References, then In-Reply-To when not in them: the thread's ancestors, oldest first
    text: str  # the new text, history and signature cut
    files: tuple[FilePart, ...]
    automatic: str | None  # why this is an automatic mail that starts no turn, or None
    unvouched: str | None = None  # why the trusted server does not vouch for the From address (None: it does)

    @property
    def thread_root(self) -> str:
        """The Message-ID that names the thread: the oldest ancestor, or the mail itself."""
        return self.references[0] if self.references else self.message_id


def _ids(value: str | None) -> list[str]:
    return _MESSAGE_ID.findall(value or "")


def automatic(message: EmailMessage) -> str | None:
    """Why ``message`` was written by a machine (an auto-reply, a bounce, a list), or ``None``."""
    auto = str(message.get("Auto-Submitted", "no")).strip().lower()
    if auto and auto != "no":
        return f"an automatic mail (Auto-Submitted: {auto[:40]})"
    precedence = str(message.get("Precedence", "")).strip().lower()
    if precedence in ("bulk", "junk", "list", "auto_reply"):
        return f"a bulk mail (Precedence: {precedence})"
    if message.get("X-Autoreply") is not None or message.get("X-Autorespond") is not None:
        return "an automatic reply (X-Autoreply)"
    return_path = message.get("Return-Path")
    if return_path is not None and str(return_path).strip() in ("<>", ""):
        return "a bounce (empty Return-Path)"
    return None


def from_mailbox(message: EmailMessage) -> Address:
    """The one mailbox of the one ``From`` header of ``message``; :class:`FromError` naming why there is none."""
    fields = message.get_all("From") or []
    if len(fields) != 1:
        raise FromError(f"it has {len(fields)} From headers" if fields else "it has no From header")
    header = fields[0]
    if not isinstance(header, AddressHeader):
        raise FromError("its From header is not an address header")
    defects = cast("BaseHeader", header).defects  # the registry's header classes mix BaseHeader in
    if defects:
        raise FromError(f"its From header does not parse cleanly ({' '.join(str(defects[0]).split())[:100]})")
    if any(group.display_name is not None for group in header.groups):
        raise FromError("its From header is a group, not a mailbox")
    if len(header.addresses) != 1:
        count = len(header.addresses) or "no"
        raise FromError(f"its From header names {count} mailboxes (exactly one is required)")
    (mailbox,) = header.addresses
    if not mailbox.username or not _DOMAIN_NAME.fullmatch(mailbox.domain):
        raise FromError(f"its From address {mailbox.addr_spec[:100]!r} is not local-part@domain-name")
    if any(char.isspace() for char in mailbox.addr_spec):
        raise FromError(f"its From address {mailbox.addr_spec[:100]!r} contains white space")
    return mailbox


def unvouched(message: EmailMessage, domain: str, trusted: str) -> str | None:
    """Why the server ``trusted`` does not vouch for ``message`` coming from ``domain``; ``None`` when it does.

    Only the topmost ``Authentication-Results`` header counts (the receiving server prepends its own, and RFC 8601
    section 5 has it remove any copy of its authserv-id that arrived with the mail): it must be ``trusted``'s and
    report exactly one ``dmarc=pass`` for ``domain``. It is read raw, without decoding encoded words.
    """
    topmost = next((value for name, value in message.raw_items() if name.lower() == "authentication-results"), None)
    if topmost is None:
        return "it has no Authentication-Results header"
    try:
        results = parse_authres(str(topmost))
    except AuthResError as exc:
        return f"its topmost Authentication-Results cannot be read ({exc})"
    if results.authserv_id != trusted.lower():
        return f"its topmost Authentication-Results is by {results.authserv_id[:100]}, not {trusted}"
    return dmarc_problem(results, domain)


def strip_history(text: str) -> str:
    """``text`` without quoted lines, the history after an attribution line, and the signature."""
    kept: list[str] = []
    lines = text.replace("\r\n", "\n").split("\n")
    for index, line in enumerate(lines):
        stripped = line.strip()
        if line.rstrip("\n") in ("-- ", "--"):
            break  # the signature delimiter (RFC 3676): everything after it is the signature
        if _OUTLOOK.match(stripped):
            break
        if (
            _HEADER_BLOCK.match(stripped)
            and index + 1 < len(lines)
            and lines[index + 1].lower().startswith(("sent:", "date:"))
        ):
            break
        joined = f"{stripped} {lines[index + 1].strip()}" if index + 1 < len(lines) else stripped
        if _ATTRIBUTION.match(stripped) or (stripped.lower().startswith("on ") and _ATTRIBUTION.match(joined)):
            break
        if stripped.startswith(">"):
            continue
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


def _html_text(markup: str) -> str:
    text = _HIDDEN.sub("", markup)
    text = _BLOCKS.sub("\n", text)
    text = re.sub(r"<blockquote\b.*?</blockquote\s*>", "", text, flags=re.IGNORECASE | re.DOTALL)
    return html.unescape(_TAGS.sub("", text))


def _body_text(message: EmailMessage) -> str:
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    try:
        content = body.get_content()
    except (LookupError, ValueError, AssertionError):  # an unknown charset or a broken transfer encoding
        payload = body.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    return _html_text(content) if body.get_content_type() == "text/html" else content


def _files(message: EmailMessage) -> tuple[FilePart, ...]:
    files: list[FilePart] = []
    for part in message.iter_attachments():
        if len(files) >= _MAX_FILES:
            break
        if not isinstance(part, EmailMessage) or part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            continue
        name = part.get_filename()
        files.append(FilePart(data=payload, mime_type=part.get_content_type(), name=(name or None) and name[:200]))
    return tuple(files)


def _bounded(references: list[str], limit: int = 50) -> tuple[str, ...]:
    """At most ``limit`` references: the root and the newest (RFC 5322 trims the middle)."""
    if len(references) <= limit:
        return tuple(references)
    return (references[0], *references[-(limit - 1) :])


def parse_mail(raw: bytes, *, trusted: str | None = None) -> ParsedMail:
    """``raw`` read as a mail; :class:`FromError` when it has no usable From address. With ``trusted`` (an
    authserv-id), :attr:`ParsedMail.unvouched` says why that server does not vouch for the From address."""
    message = email.message_from_bytes(raw, policy=email.policy.default)
    mailbox = from_mailbox(message)
    found = _ids(str(message.get("Message-ID", "")))
    message_id = found[0] if found else f"<sha256.{hashlib.sha256(raw).hexdigest()[:40]}@hermes.invalid>"
    references = _ids(str(message.get("References", "")))
    for parent in _ids(str(message.get("In-Reply-To", ""))):
        if parent not in references:
            references.append(parent)
    return ParsedMail(
        message_id=message_id,
        sender=mailbox.addr_spec.lower(),
        sender_name=mailbox.display_name or None,
        subject=" ".join(str(message.get("Subject", "")).split())[:300],
        references=_bounded([ref for ref in references if ref != message_id]),
        text=strip_history(_body_text(message)),
        files=_files(message),
        automatic=automatic(message),
        unvouched=None if trusted is None else unvouched(message, mailbox.domain, trusted),
    )
