"""One IMAP connection as the poller uses it: log in, select the mailbox (its ``UIDVALIDITY`` and ``UIDNEXT``),
search and fetch by UID without setting ``\\Seen`` (``BODY.PEEK[]``), and wait for new mail with IDLE.

:mod:`imaplib` does the protocol except IDLE (RFC 2177), which it lacks before Python 3.14: the command is sent
through the connection and its responses are read from the socket here, so the wait can end on new mail
(``* n EXISTS``), on the renewal time, or at once when :meth:`Connection.close` shuts the socket from another
thread (how the adapter stops).
"""

from __future__ import annotations

import contextlib
import imaplib
import itertools
import re
import select
import socket
import ssl
import time
from collections.abc import Iterator

from platforms.email.config import EmailAccount

__all__ = ["Connection", "ImapError"]

_FETCHED_UID = re.compile(rb"\bUID (\d+)")
_EXISTS = re.compile(rb"^\* \d+ EXISTS\b", re.IGNORECASE)
_tags = itertools.count(1)


class ImapError(Exception):
    """The server refused something or the connection broke; ``login`` says the credentials were refused."""

    def __init__(self, message: str, *, login: bool = False) -> None:
        super().__init__(message)
        self.login = login


class Connection:
    """A logged-in connection with ``mailbox`` selected."""

    def __init__(self, account: EmailAccount, username: str, password: str, *, timeout_s: float) -> None:
        self._timeout = timeout_s
        where = f"{account.imap_host}:{account.imap_port}"
        try:
            if account.imap_security == "tls":
                context = ssl.create_default_context()
                self.imap: imaplib.IMAP4 = imaplib.IMAP4_SSL(
                    account.imap_host, account.imap_port, ssl_context=context, timeout=timeout_s
                )
            else:
                self.imap = imaplib.IMAP4(account.imap_host, account.imap_port, timeout=timeout_s)
                if account.imap_security == "starttls":
                    self.imap.starttls(ssl.create_default_context())
        except (OSError, imaplib.IMAP4.error) as exc:
            raise ImapError(f"the IMAP server {where} cannot be reached ({exc or type(exc).__name__})") from None
        try:
            self.imap.login(username, password)
        except imaplib.IMAP4.error as exc:
            self.close()
            raise ImapError(f"{where} refused the login for {username} ({_said(exc)})", login=True) from None
        self.idle = "IDLE" in self.imap.capabilities

    def select(self, mailbox: str) -> tuple[int, int | None]:
        """Select ``mailbox``; return its ``UIDVALIDITY`` and ``UIDNEXT`` (``None`` when the server does not say)."""
        typ, data = self.imap.select(f'"{mailbox}"')
        if typ != "OK":
            raise ImapError(f"the mailbox {mailbox!r} cannot be selected ({_said(data)})")
        validity = self._number("UIDVALIDITY")
        if validity is None:
            raise ImapError(f"the server gave no UIDVALIDITY for {mailbox!r}")
        return validity, self._number("UIDNEXT")

    def _number(self, name: str) -> int | None:
        _, data = self.imap.response(name)
        for value in data or ():
            if isinstance(value, bytes) and value.strip().isdigit():
                return int(value)
        return None

    def uids_after(self, last: int) -> list[int]:
        """The UIDs above ``last``, ascending (``n:*`` always matches the highest UID, which may be lower)."""
        typ, data = self.imap.uid("SEARCH", f"UID {last + 1}:*")
        if typ != "OK":
            raise ImapError(f"UID SEARCH failed ({_said(data)})")
        found = {int(word) for line in data if isinstance(line, bytes) for word in line.split() if word.isdigit()}
        return sorted(uid for uid in found if uid > last)

    def highest_uid(self) -> int:
        """The highest UID in the mailbox (0 when it is empty)."""
        uids = self.uids_after(0)
        return uids[-1] if uids else 0

    def fetch(self, uids: list[int]) -> Iterator[tuple[int, bytes]]:
        """(UID, the whole message) for ``uids``, without marking them read."""
        typ, data = self.imap.uid("FETCH", ",".join(str(uid) for uid in uids), "(UID BODY.PEEK[])")
        if typ != "OK":
            raise ImapError(f"UID FETCH failed ({_said(data)})")
        for index, item in enumerate(data):
            if not isinstance(item, tuple) or len(item) != 2:
                continue
            header, raw = item
            found = _FETCHED_UID.search(header)
            if found is None and index + 1 < len(data) and isinstance(data[index + 1], bytes):
                found = _FETCHED_UID.search(data[index + 1])  # UID after the literal: "BODY[] {n} ... UID 7)"
            if found is not None:
                yield int(found[1]), raw

    def wait(self, renew_s: float) -> bool:
        """IDLE until new mail is announced (``True``) or ``renew_s`` passed (``False``)."""
        tag = f"HIDLE{next(_tags)}".encode()
        self.imap.send(tag + b" IDLE\r\n")
        lines = _Lines(self.imap.socket())
        arrived = False
        while True:  # untagged data may come before the continuation
            first = lines.read(self._timeout)
            if first is None or not first.startswith((b"+", b"* ")):
                raise ImapError(f"the server refused IDLE ({(first or b'no answer')[:100]!r})")
            arrived = arrived or bool(_EXISTS.match(first))
            if first.startswith(b"+"):
                break
        deadline = time.monotonic() + renew_s
        while not arrived:
            line = lines.read(deadline - time.monotonic())
            if line is None:
                break
            arrived = bool(_EXISTS.match(line))
        self.imap.send(b"DONE\r\n")
        while True:
            line = lines.read(self._timeout)
            if line is None:
                raise ImapError("the server did not end IDLE")
            if line.startswith(tag + b" "):
                if not line[len(tag) + 1 :].upper().startswith(b"OK"):
                    raise ImapError(f"IDLE ended with {line[:100]!r}")
                return arrived

    def close(self) -> None:
        """Shut the socket (also from another thread, ending a wait at once); never raises."""
        with contextlib.suppress(OSError):
            self.imap.socket().shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.imap.shutdown()

    def logout(self) -> None:
        """Log out politely, then close."""
        with contextlib.suppress(OSError, imaplib.IMAP4.error):
            self.imap.logout()
        self.close()


class _Lines:
    """Lines read straight from the socket during IDLE, each wait bounded."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def read(self, timeout: float) -> bytes | None:
        """The next line, or ``None`` when none came within ``timeout`` seconds."""
        deadline = time.monotonic() + max(0.0, timeout)
        while b"\r\n" not in self._buffer:
            pending = isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0
            if not pending:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._sock], [], [], left)[0]:
                    return None
            try:
                chunk = self._sock.recv(4096)
            except OSError as exc:
                raise ImapError(f"the connection broke ({exc})") from None
            if not chunk:
                raise ImapError("the server closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line


def _said(value: object) -> str:
    if isinstance(value, list):
        value = b" ".join(item for item in value if isinstance(item, bytes))
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return " ".join(text.split())[:200]
