"""Each mailbox read on its own thread: new mail by UID, committed with the ``UIDVALIDITY:UID`` cursor it moves.

The cursor is ``<UIDVALIDITY>:<highest UID handled>``. A batch of new messages is committed with
``inbox.accept_many(batch, cursor=...)``, so the inbox rows and the cursor land in one transaction: a crash before
it fetches the batch again, a crash after it never does. A mail that starts no turn (not allowed, automatic,
unreadable) still moves the cursor past its UID. On the first start, and when the server's ``UIDVALIDITY``
changed (the old UIDs mean nothing any more), reading starts from the mailbox's current state: mail already
there is not accepted (any that was, is recognised by its Message-ID anyway).

Between fetches the poller waits with IDLE where the server has it (``use_idle``), else ``poll_interval_s``.
A failed connection is logged and tried again after ``retry_s`` doubling to ``retry_max_s``; a refused login is
logged with the fix. :meth:`MailboxPoller.stop` ends the wait at once. Each account's connection state is kept
in the adapter's :class:`~platforms.support.links.Links`: a selected mailbox says it is up, a failed connection or
login says why until the mailbox is selected again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermes_actors.messages import Attachment, InboundMessage
from hermes_actors.ports import PollCursor
from hermes_actors.routing import SessionSource
from platforms.email.config import EmailConfig, ResolvedAccount
from platforms.email.imap import Connection, ImapError
from platforms.email.mail import FromError, ParsedMail, parse_mail
from platforms.email.sender import PLATFORM
from platforms.email.threads import Threads, ThreadState
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["MailboxPoller", "to_inbound"]

_log = logging.getLogger(__name__)


def to_inbound(
    mail: ParsedMail, account: ResolvedAccount, attachments: tuple[Attachment, ...], now: float
) -> InboundMessage:
    """The inbound message of an allowed ``mail``: keyed by correspondent (and thread, with ``sessions: thread``);
    a mail that starts a thread begins with its subject."""
    text = mail.text
    if mail.subject and not mail.references:
        text = f"Subject: {mail.subject}\n\n{text}".strip()
    source = SessionSource(
        platform=PLATFORM,
        account_id=account.name,
        chat_type="dm",
        chat_id=mail.sender,
        thread_id=mail.thread_root if account.config.sessions == "thread" else None,
        user_id=mail.sender,
        user_name=mail.sender_name,
        chat_name=mail.subject or None,
        message_id=mail.message_id,
    )
    return InboundMessage(
        source=source, text=text or mail.subject, message_id=mail.message_id, attachments=attachments, received_at=now
    )


class MailboxPoller:
    """Reads one account's mailbox into ``inbox`` on its own thread."""

    def __init__(
        self,
        account: ResolvedAccount,
        inbox: ChatInbox,
        threads: Threads,
        config: EmailConfig,
        links: Links,
        *,
        clock: Callable[[], float],
    ) -> None:
        self._account = account
        self._links = links
        self._inbox = inbox
        self._threads = threads
        self._config = config
        self._clock = clock
        self._stopping = threading.Event()
        self._connection: Connection | None = None
        self._thread = threading.Thread(target=self._run, name=f"hermes-email-{account.name}", daemon=True)
        self.connected = threading.Event()  # set once the mailbox is selected and its position known

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """End the wait (or the connection attempt) and the thread; a batch being committed finishes first."""
        self._stopping.set()
        connection = self._connection
        if connection is not None:
            connection.close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            _log.warning("email account %r: the mailbox thread did not stop within %.1f s", self._account.name, timeout)

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                self._session()
                failures = 0
            except ImapError as exc:
                if self._stopping.is_set():
                    break
                failures += 1
                wait = self._backoff(failures)
                fix = f"; check platforms.email.accounts.{self._account.name}.username and password"
                self._links.failed(self._account.name, f"{exc}{fix if exc.login else ''}")
                if exc.login:
                    wait = self._config.retry_max_s
                    _log.error(
                        "email account %r: %s; check platforms.email.accounts.%s.username and password; trying again "
                        "in %.0f s",
                        self._account.name,
                        exc,
                        self._account.name,
                        wait,
                    )
                else:
                    _log.warning("email account %r: %s; trying again in %.1f s", self._account.name, exc, wait)
                self._stopping.wait(wait)
            except Exception as exc:
                if self._stopping.is_set():
                    break
                failures += 1
                wait = self._backoff(failures)
                self._links.failed(self._account.name, f"reading the mailbox failed ({str(exc) or type(exc).__name__})")
                _log.exception(
                    "email account %r: reading the mailbox failed; trying again in %.1f s", self._account.name, wait
                )
                self._stopping.wait(wait)

    def _backoff(self, failures: int) -> float:
        return float(min(self._config.retry_max_s, self._config.retry_s * 2 ** (failures - 1)))

    def _session(self) -> None:
        account = self._account
        connection = Connection(account.config, account.username, account.password, timeout_s=self._config.timeout_s)
        self._connection = connection
        try:
            if self._stopping.is_set():
                return
            validity, uid_next = connection.select(account.config.mailbox)
            last = self._position(connection, validity, uid_next)
            self.connected.set()
            self._links.connected(account.name)
            idle = self._config.use_idle and connection.idle
            while not self._stopping.is_set():
                last = self._read_new(connection, validity, last)
                if idle:
                    connection.wait(self._config.idle_renew_s)
                else:
                    self._stopping.wait(self._config.poll_interval_s)
        finally:
            self._connection = None
            connection.logout()

    def _position(self, connection: Connection, validity: int, uid_next: int | None) -> int:
        """The highest UID handled: from the stored cursor, or the mailbox's current state (committed)."""
        name = self._account.name
        stored = self._inbox.poll_cursor(PLATFORM, name)
        stored_validity, _, stored_uid = (stored or "").partition(":")
        if stored is not None and stored_validity == str(validity) and stored_uid.isdigit():
            return int(stored_uid)
        current = uid_next - 1 if uid_next is not None else connection.highest_uid()
        if stored is None:
            _log.info("email account %r: first start; reading mail that arrives after UID %d", name, current)
        else:
            _log.warning(
                "email account %r: UIDVALIDITY changed (stored %r, now %d); reading from the mailbox's current state "
                "(mail already there is not taken again)",
                name,
                stored,
                validity,
            )
        self._commit([], validity, current)
        return current

    def _read_new(self, connection: Connection, validity: int, last: int) -> int:
        uids = connection.uids_after(last)
        for start in range(0, len(uids), self._config.max_batch):
            chunk = uids[start : start + self._config.max_batch]
            batch: list[InboundMessage] = []
            for uid, raw in connection.fetch(chunk):
                inbound = self._read(uid, raw)
                if inbound is not None:
                    batch.append(inbound)
            last = chunk[-1]
            self._commit(batch, validity, last)
        return last

    def _read(self, uid: int, raw: bytes) -> InboundMessage | None:
        """The inbound message of one fetched mail, or ``None`` (logged) when it starts no turn."""
        name = self._account.name
        trusted = self._account.config.trusted_authserv_id
        try:
            mail = parse_mail(raw, trusted=trusted)
        except FromError as exc:
            _log.warning("email account %r: skipped UID %d: it has no usable From address: %s", name, uid, exc)
            return None
        except Exception as exc:  # the email package raises many kinds on hostile headers
            _log.warning("email account %r: skipped UID %d, which cannot be read as mail (%s)", name, uid, exc)
            return None
        if mail.sender == self._account.config.address.lower():
            _log.debug("email account %r: skipped UID %d: our own mail", name, uid)
            return None
        if not self._account.allows(mail.sender):
            _log.info(
                "email account %r: skipped UID %d from %s: not in allowed_senders (no turn is started)",
                name,
                uid,
                mail.sender[:100],
            )
            return None
        if mail.unvouched is not None:
            _log.warning(
                "email account %r: skipped UID %d from %s: %s does not vouch for its From address: %s (no turn is "
                "started)",
                name,
                uid,
                mail.sender[:100],
                trusted,
                mail.unvouched,
            )
            return None
        if mail.automatic is not None:
            _log.info("email account %r: skipped UID %d from %s: %s", name, uid, mail.sender[:100], mail.automatic)
            return None
        if not (mail.text or mail.subject or mail.files):
            _log.info("email account %r: skipped UID %d: no text, subject or files", name, uid)
            return None
        inbound = to_inbound(mail, self._account, self._attachments(mail, raw), self._clock())
        state = ThreadState(message_id=mail.message_id, subject=mail.subject, references=mail.references)
        self._threads.remember(name, mail.sender, inbound.source.thread_id, state)
        return inbound

    def _attachments(self, mail: ParsedMail, raw: bytes) -> tuple[Attachment, ...]:
        media = self._inbox.media
        records = [media.save(part.data, mime_type=part.mime_type, name=part.name) for part in mail.files]
        if media.check("document", len(raw)) is None:
            records.append(media.save(raw, kind="document", mime_type="message/rfc822", name="message.eml"))
        else:
            _log.info(
                "email account %r: the whole of %s is not kept: over media.max_bytes",
                self._account.name,
                mail.message_id,
            )
        return tuple(records)

    def _commit(self, batch: list[InboundMessage], validity: int, last: int) -> None:
        cursor = PollCursor(platform=PLATFORM, cursor=f"{validity}:{last}", account_id=self._account.name)
        self._inbox.accept_many(batch, cursor=cursor)
