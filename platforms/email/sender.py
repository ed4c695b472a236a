"""Replies over SMTP, threaded: ``In-Reply-To`` the answered mail, ``References`` its thread, ``Subject: Re: …``.

A reply goes to the correspondent's From address (never to a ``Reply-To`` the mail named: an allowed sender's
name cannot be used to make the agent write elsewhere), and only to an address ``allowed_senders`` admits. It
carries ``Auto-Submitted: auto-replied`` (RFC 3834), so well-behaved robots do not answer it, and a Message-ID
derived from its outbox id: a retry after an unknown outcome sends the same Message-ID, which mail stores and
clients recognise as one message.

SMTP answers decide what a failure is: 4xx (mailbox busy, greylisting, server shutting down) is retried later,
5xx (no such user, policy refusal, message refused) gives the reply up with the server's words; a refused login
is retried (the fix is in the config, and the outbox's backoff spaces the attempts); a connection that breaks
after the message was handed over is retried flagged as a possible duplicate. A handoff opens a new mail thread:
:meth:`EmailSender.create_thread` reserves its root Message-ID and the first message sent in it is that root.

A reply carrying a document (``/save``) is one mail with the caption as its text and the file as a MIME
attachment; when the server refuses it (too large), the reply's text is mailed instead
(:mod:`platforms.support.documents`).
"""

from __future__ import annotations

import email.utils
import logging
import secrets
import smtplib
import ssl
import time
from collections.abc import Callable, Mapping
from email.message import EmailMessage

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.email.config import EmailConfig, ResolvedAccount
from platforms.email.threads import Threads, ThreadState
from platforms.support.documents import posting_failed, send_document
from platforms.support.progress import reply_identity
from platforms.support.ratelimit import Rate, RateLimiter

__all__ = ["PLATFORM", "EmailSender", "reply_subject"]

_log = logging.getLogger(__name__)

PLATFORM = "email"
_MAX_SLEEP_S = 1.0  # a pacing wait longer than this goes back to the outbox


def reply_subject(subject: str) -> str:
    """``Re: <subject>``, without stacking ``Re:`` on a subject that has one."""
    subject = subject.strip() or "your message"
    return subject if subject.lower().startswith("re:") else f"Re: {subject}"


class EmailSender:
    """Sends every account's replies (the reply's ``account_id`` picks the account) and opens mail threads."""

    platform = PLATFORM
    idempotent_sends = False  # SMTP servers do not drop a repeated Message-ID

    def __init__(
        self,
        accounts: Mapping[str, ResolvedAccount],
        threads: Threads,
        config: EmailConfig,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._accounts = dict(accounts)
        self._threads = threads
        self._timeout = config.timeout_s
        self._limiter = RateLimiter(per_key=Rate(per_second=config.messages_per_minute / 60, burst=3), clock=monotonic)

    def send(self, message: OutboundMessage) -> str | None:
        """Mail ``message`` to its correspondent, in its thread; return the Message-ID it was sent with."""
        account = self._account(message.account_id)
        where = f"email account '{account.name}': a reply to {message.chat_id}"
        if not message.chat_id or not account.allows(message.chat_id):
            raise SendError(f"{where}: the address is not in allowed_senders, so nothing is sent", permanent=True)
        return send_document(
            message,
            lambda document: self._mail_file(account, message, document, where),
            lambda: self._mail(account, message, None, where),
            where,
        )

    def _mail_file(
        self, account: ResolvedAccount, message: OutboundMessage, document: OutboundDocument, where: str
    ) -> str | None:
        try:
            return self._mail(account, message, document, where)
        except SendError as exc:
            raise posting_failed(exc) from None

    def _mail(
        self, account: ResolvedAccount, message: OutboundMessage, document: OutboundDocument | None, where: str
    ) -> str | None:
        """Mail the reply's text, or ``document`` as an attachment under its caption; return the Message-ID."""
        assert message.chat_id is not None
        if document is None and not message.text.strip():
            _log.info("email account %r: an empty reply to %s is not sent", account.name, message.chat_id)
            return None
        state = self._threads.find(account.name, message.chat_id, message.thread_id)
        domain = account.config.address.rpartition("@")[2]
        mail = EmailMessage()
        mail["From"] = account.config.address
        mail["To"] = message.chat_id
        mail["Date"] = email.utils.formatdate(localtime=False, usegmt=True)
        mail["Auto-Submitted"] = "auto-replied"
        root = state is not None and state.opened and state.message_id == message.thread_id
        if state is not None and root:  # the first message of a thread create_thread opened: it is the root
            mail["Message-ID"] = state.message_id
            mail["Subject"] = state.subject
        else:
            mail["Message-ID"] = f"<hermes.{reply_identity(message)[:32]}@{domain}>"
            mail["Subject"] = reply_subject(state.subject if state is not None else "")
            _thread(mail, message.reply_to, state)
        if document is None:
            mail.set_content(message.text)
        else:
            mail.set_content(f"{document.caption}\n\nAttached: {document.name}\n".lstrip())
            maintype, _, subtype = document.mime_type.split(";", 1)[0].strip().partition("/")
            mail.add_attachment(
                document.data,
                maintype=maintype or "application",
                subtype=subtype or "octet-stream",
                filename=document.name,
            )
        self._pace(account.name, message.chat_id, where)
        self._deliver(account, mail, message.chat_id, where)
        if state is not None and root:
            sent = ThreadState(message_id=state.message_id, subject=state.subject)
            self._threads.remember(account.name, message.chat_id, message.thread_id, sent)
        return str(mail["Message-ID"])

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Reserve a new thread's root Message-ID for ``chat_id`` under the subject ``title``; nothing is sent
        until the first message in it."""
        account = self._account(account_id)
        if not account.allows(chat_id):
            raise SendError(f"email account '{account.name}': {chat_id} is not in allowed_senders", permanent=True)
        domain = account.config.address.rpartition("@")[2]
        root = f"<hermes.thread.{secrets.token_hex(10)}@{domain}>"  # short: a folded header reads back with a space
        subject = " ".join(title.split())[:200] or "Handoff"
        self._threads.remember(account.name, chat_id, root, ThreadState(message_id=root, subject=subject, opened=True))
        return root

    def _account(self, account_id: str) -> ResolvedAccount:
        account = self._accounts.get(account_id)
        if account is None and not account_id and len(self._accounts) == 1:
            account = next(iter(self._accounts.values()))
        if account is None:
            raise SendError(f"email: no account {account_id!r} is configured; add it under platforms.email.accounts")
        return account

    def _pace(self, account: str, chat_id: str, where: str) -> None:
        wait = self._limiter.delay(f"{account}:{chat_id}")
        if wait > _MAX_SLEEP_S:
            raise SendError(f"{where}: held back {wait:.0f} s by messages_per_minute", retry_after_s=wait)
        if wait > 0:
            time.sleep(wait)

    def _deliver(self, account: ResolvedAccount, mail: EmailMessage, to: str, where: str) -> None:
        config = account.config
        server = f"{config.smtp_host}:{config.smtp_port}"
        try:
            smtp: smtplib.SMTP
            if config.smtp_security == "tls":
                context = ssl.create_default_context()
                smtp = smtplib.SMTP_SSL(config.smtp_host, config.smtp_port, timeout=self._timeout, context=context)
            else:
                smtp = smtplib.SMTP(config.smtp_host, config.smtp_port, timeout=self._timeout)
        except (OSError, smtplib.SMTPException) as exc:
            raise SendError(
                f"{where}: the SMTP server {server} cannot be reached ({exc}); it will be retried"
            ) from None
        try:
            with smtp:
                if config.smtp_security == "starttls":
                    smtp.starttls(context=ssl.create_default_context())
                if account.password:
                    smtp.login(account.username, account.password)
                smtp.send_message(mail, from_addr=config.address, to_addrs=[to])
        except smtplib.SMTPNotSupportedError as exc:
            raise SendError(f"{where}: {server} does not support {exc}; check smtp_security") from None
        except smtplib.SMTPAuthenticationError as exc:
            raise SendError(
                f"{where}: {server} refused the login ({exc.smtp_code} {_said(exc.smtp_error)}); check the account's "
                "username and password; it will be retried"
            ) from None
        except smtplib.SMTPRecipientsRefused as exc:
            code, said = next(iter(exc.recipients.values()), (550, b"refused"))
            raise _coded(where, server, code, said) from None
        except smtplib.SMTPResponseException as exc:
            raise _coded(where, server, exc.smtp_code, exc.smtp_error) from None
        except (OSError, smtplib.SMTPException) as exc:
            raise SendError(
                f"{where}: the connection to {server} broke ({exc or type(exc).__name__}); it will be retried and "
                "flagged as a possible duplicate",
                outcome_unknown=True,
            ) from None
        _log.info("email account %r: sent %s to %s", account.name, mail["Message-ID"], to)


def _thread(mail: EmailMessage, reply_to: str | None, state: ThreadState | None) -> None:
    """``In-Reply-To`` the answered mail (the inbound message id, else the conversation's latest) and
    ``References`` its ancestors and it."""
    parent = reply_to if reply_to and reply_to.startswith("<") else None
    parent = parent or (state.message_id if state is not None else None)
    if parent is None:
        return
    ancestors = list(state.references) if state is not None else []
    if state is not None and state.message_id not in ancestors:
        ancestors.append(state.message_id)
    if parent not in ancestors:
        ancestors.append(parent)
    mail["In-Reply-To"] = parent
    mail["References"] = " ".join(ancestors)


def _said(text: bytes | str) -> str:
    decoded = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return " ".join(decoded.split())[:200]


def _coded(where: str, server: str, code: int, said: bytes | str) -> SendError:
    """4xx: try again later; 5xx: no retry can succeed."""
    if 400 <= code < 500:
        return SendError(f"{where}: {server} answered {code} {_said(said)}; it will be retried later")
    return SendError(f"{where}: {server} refused it with {code} {_said(said)}; the reply is given up", permanent=True)
