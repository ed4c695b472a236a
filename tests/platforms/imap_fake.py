"""A local mail provider: an IMAP4rev1 server written here (RFC 3501, with IDLE of RFC 2177) and an SMTP server
on aiosmtpd, both on loopback.

:class:`FakeImap` speaks the protocol as :mod:`imaplib` expects it, unchanged: the ``* OK`` greeting,
``CAPABILITY`` (``IDLE`` only when the server is made with ``idle=True``), ``LOGIN`` (quoted strings; ``NO
[AUTHENTICATIONFAILED]`` for a wrong password), ``SELECT``/``EXAMINE`` with ``EXISTS``, ``RECENT``, ``FLAGS``,
``[UIDVALIDITY n]`` and ``[UIDNEXT n]``, ``UID SEARCH UID a:b`` (``*`` is the highest UID, so ``n:*`` matches it
even when n is higher), ``UID FETCH set (UID BODY.PEEK[])`` / ``BODY[]`` / ``RFC822`` as literals (the non-peek
forms set ``\\Seen``), ``NOOP``, ``IDLE`` (``+ idling``, ``* n EXISTS`` as mail arrives, ``DONE``) and ``LOGOUT``.
Anything else is ``BAD``. :meth:`FakeImap.deliver` puts a message in the INBOX, :meth:`FakeImap.renumber` gives
the mailbox a new ``UIDVALIDITY`` with new UIDs (as a server does after a rebuild), :meth:`FakeImap.drop`
closes every connection. Every command is recorded.

:class:`FakeSmtp` is an aiosmtpd server with ``AUTH`` (over plain TCP, as on loopback) that keeps every message it
accepted, and answers what :meth:`FakeSmtp.fail_next` scripts (a 4xx or 5xx at ``RCPT`` or ``DATA``).
:func:`mail` builds a message as a mail client sends it.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import email.utils
import os
import re
import select
import socket
import socketserver
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from tests.platforms.support import Arrivals

__all__ = ["FakeImap", "FakeSmtp", "Received", "mail"]

_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|(\S+)')


def _tokens(text: str) -> list[str]:
    return [re.sub(r"\\(.)", r"\1", quoted) if quoted or atom == "" else atom for quoted, atom in _TOKEN.findall(text)]


@dataclass
class _Message:
    uid: int
    raw: bytes
    flags: set[str] = field(default_factory=set)


class FakeImap:
    """One user's INBOX over IMAP4rev1 on 127.0.0.1."""

    def __init__(self, user: str, password: str, *, idle: bool = True, uidvalidity: int = 1764460800) -> None:
        self.user = user
        self.password = password
        self.idle = idle
        self.uidvalidity = uidvalidity
        self.commands: list[str] = []
        self.logins = 0
        self.idling = threading.Event()  # set whenever a client enters IDLE; a test clears it to wait for the next
        self.changed = threading.Condition()
        self._messages: list[_Message] = []
        self._next_uid = 1
        self._lock = threading.Lock()
        self._wakers: set[int] = set()  # write ends of the pipes of idling connections
        self._sockets: set[socket.socket] = set()
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                _Session(fake, self.request, self.rfile).run()

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), name="fake-imap", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> FakeImap:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.drop()
        self._thread.join(10)

    def drop(self) -> None:
        """Close every client connection (as a server restart does)."""
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def deliver(self, raw: bytes) -> int:
        """Put ``raw`` in the INBOX; return its UID (idling clients hear ``* n EXISTS``)."""
        with self._lock:
            uid = self._next_uid
            self._next_uid += 1
            self._messages.append(_Message(uid=uid, raw=raw))
            for waker in self._wakers:  # under the lock: an idle that ends removes its pipe before closing it
                os.write(waker, b"!")
        return uid

    def renumber(self, uidvalidity: int) -> None:
        """A new ``UIDVALIDITY``: every message gets a new UID from 1 (the old ones mean nothing now)."""
        with self._lock:
            self.uidvalidity = uidvalidity
            for number, message in enumerate(self._messages, start=1):
                message.uid = number
            self._next_uid = len(self._messages) + 1

    def seen(self) -> list[int]:
        """The UIDs flagged ``\\Seen``."""
        with self._lock:
            return [m.uid for m in self._messages if "\\Seen" in m.flags]

    def _record(self, command: str) -> None:
        with self.changed:
            self.commands.append(command)
            self.changed.notify_all()


class _Session:
    """One client connection."""

    def __init__(self, fake: FakeImap, sock: socket.socket, rfile: Any) -> None:
        self.fake = fake
        self.sock = sock
        self.rfile = rfile
        self.authenticated = False
        self.selected = False
        self.known = 0  # the message count this client was last told (EXISTS)

    def send(self, *lines: str | bytes) -> None:
        data = b"".join((line.encode() if isinstance(line, str) else line) + b"\r\n" for line in lines)
        self.sock.sendall(data)

    def run(self) -> None:
        with self.fake._lock:
            self.fake._sockets.add(self.sock)
        try:
            self.send("* OK [CAPABILITY IMAP4rev1] fake IMAP ready")
            while True:
                line = self.rfile.readline(65536)
                if not line:
                    return
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                tag, _, rest = text.partition(" ")
                if not self.command(tag, rest):
                    return
        except OSError:
            return
        finally:
            with self.fake._lock:
                self.fake._sockets.discard(self.sock)

    def capabilities(self) -> str:
        return "IMAP4rev1 AUTH=PLAIN" + (" IDLE" if self.fake.idle else "")

    def command(self, tag: str, rest: str) -> bool:
        words = _tokens(rest)
        name = words[0].upper() if words else ""
        if name == "UID" and len(words) > 1:
            name = f"UID {words[1].upper()}"
            words = words[1:]
        self.fake._record(name)
        args = words[1:]
        if name == "CAPABILITY":
            self.send(f"* CAPABILITY {self.capabilities()}", f"{tag} OK CAPABILITY completed")
        elif name == "NOOP":
            self.send(f"{tag} OK NOOP completed")
        elif name == "LOGOUT":
            self.send("* BYE logging out", f"{tag} OK LOGOUT completed")
            return False
        elif name == "LOGIN":
            if args[:2] == [self.fake.user, self.fake.password]:
                self.authenticated = True
                self.fake.logins += 1
                self.send(f"{tag} OK [CAPABILITY {self.capabilities()}] LOGIN completed")
            else:
                self.send(f"{tag} NO [AUTHENTICATIONFAILED] Invalid credentials")
        elif not self.authenticated:
            self.send(f"{tag} BAD log in first")
        elif name in ("SELECT", "EXAMINE"):
            self.select(tag, name, args)
        elif not self.selected:
            self.send(f"{tag} BAD select a mailbox first")
        elif name == "UID SEARCH":
            self.announce()
            self.search(tag, args)
        elif name == "UID FETCH":
            self.fetch(tag, args)
        elif name == "IDLE" and self.fake.idle:
            self.idle(tag)
        else:
            self.send(f"{tag} BAD unknown command {name}")
        return True

    def announce(self) -> None:
        """``* n EXISTS`` when the mailbox grew since this client was last told (RFC 3501 7.3.1)."""
        with self.fake._lock:
            count = len(self.fake._messages)
        if count != self.known:
            self.known = count
            self.send(f"* {count} EXISTS")

    def select(self, tag: str, name: str, args: list[str]) -> None:
        if [a.upper() for a in args] != ["INBOX"]:
            self.send(f"{tag} NO [NONEXISTENT] no such mailbox")
            return
        with self.fake._lock:
            count, validity, uid_next = len(self.fake._messages), self.fake.uidvalidity, self.fake._next_uid
        self.selected = True
        self.known = count
        mode = "READ-ONLY" if name == "EXAMINE" else "READ-WRITE"
        self.send(
            "* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)",
            f"* {count} EXISTS",
            "* 0 RECENT",
            f"* OK [UIDVALIDITY {validity}] UIDs valid",
            f"* OK [UIDNEXT {uid_next}] Predicted next UID",
            f"{tag} OK [{mode}] {name} completed",
        )

    def _uids(self, spec: str) -> set[int]:
        with self.fake._lock:
            uids = [m.uid for m in self.fake._messages]
        highest = max(uids, default=0)
        wanted: set[int] = set()
        for part in spec.split(","):
            low, _, high = part.partition(":")
            first = highest if low == "*" else int(low)
            last = first if not high else (highest if high == "*" else int(high))
            first, last = min(first, last), max(first, last)
            wanted.update(uid for uid in uids if first <= uid <= last)
        return wanted

    def search(self, tag: str, args: list[str]) -> None:
        if len(args) != 2 or args[0].upper() != "UID":
            self.send(f"{tag} BAD only UID SEARCH UID <set> is served")
            return
        found = sorted(self._uids(args[1]))
        self.send(f"* SEARCH {' '.join(map(str, found))}".rstrip(), f"{tag} OK SEARCH completed")

    def fetch(self, tag: str, args: list[str]) -> None:
        items = " ".join(args[1:]).upper()
        wanted = self._uids(args[0])
        with self.fake._lock:
            messages = [(number, m) for number, m in enumerate(self.fake._messages, start=1) if m.uid in wanted]
            peek = "BODY.PEEK[]" in items
            for _, message in messages:
                if not peek:
                    message.flags.add("\\Seen")
        item = "RFC822" if "RFC822" in items else "BODY[]"
        for number, message in messages:
            head = f"* {number} FETCH (UID {message.uid} {item} {{{len(message.raw)}}}\r\n".encode()
            self.sock.sendall(head + message.raw + b")\r\n")
        self.send(f"{tag} OK FETCH completed")

    def idle(self, tag: str) -> None:
        wake_read, wake_write = os.pipe()
        with self.fake._lock:
            self.fake._wakers.add(wake_write)
        try:
            self.send("+ idling")
            self.announce()  # mail that came since the client was last told
            self.fake.idling.set()
            while True:
                ready, _, _ = select.select([self.sock.fileno(), wake_read], [], [])
                if wake_read in ready:
                    os.read(wake_read, 64)
                    self.announce()
                if self.sock.fileno() in ready:
                    line = self.rfile.readline(1024)
                    if not line or line.strip().upper() == b"DONE":
                        self.fake._record("DONE")
                        self.send(f"{tag} OK IDLE terminated")
                        return
        finally:
            with self.fake._lock:
                self.fake._wakers.discard(wake_write)
            os.close(wake_read)
            os.close(wake_write)


# -- SMTP --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """One message the SMTP server accepted: the envelope and the parsed message."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    message: EmailMessage


class FakeSmtp:
    """An SMTP server on 127.0.0.1 accepting ``AUTH`` as ``user``/``password``."""

    def __init__(self, user: str, password: str) -> None:
        self.user = user
        self.password = password
        self.attempts = 0  # DATA commands (accepted or refused)
        self._arrivals: Arrivals[Received] = Arrivals("mailed", "the fake SMTP server")
        self._script: deque[tuple[str, int, str]] = deque()
        self._lock = threading.Lock()
        with socket.socket() as probe:  # aiosmtpd needs a port it can connect to before it says it started
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._controller = Controller(
            self,
            hostname="127.0.0.1",
            port=self.port,
            authenticator=self._authenticate,
            auth_require_tls=False,
        )

    def start(self) -> FakeSmtp:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def fail_next(self, code: int, text: str, *, stage: str = "DATA") -> None:
        """Answer the next ``stage`` (``RCPT`` or ``DATA``) with ``code text``."""
        with self._lock:
            self._script.append((stage, code, text))

    def take(self, timeout: float = 10.0) -> Received:
        return self._arrivals.take(timeout)

    def nothing_more(self, wait: float = 0.2) -> bool:
        return self._arrivals.nothing_more(wait)

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (
            self.user.encode(),
            self.password.encode(),
        )
        return AuthResult(success=ok, handled=False)

    def _scripted(self, stage: str) -> str | None:
        with self._lock:
            if self._script and self._script[0][0] == stage:
                _, code, text = self._script.popleft()
                return f"{code} {text}"
        return None

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        scripted = self._scripted("RCPT")
        if scripted is not None:
            return scripted
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self._lock:
            self.attempts += 1
        scripted = self._scripted("DATA")
        if scripted is not None:
            return scripted
        if not session.authenticated:
            return "530 5.7.0 Authentication required"
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        message = email.message_from_bytes(content, policy=email.policy.default)
        self._arrivals.put(
            Received(mail_from=str(envelope.mail_from), rcpt_tos=tuple(envelope.rcpt_tos), message=message)
        )
        return "250 OK queued"


def mail(
    text: str | None,
    *,
    sender: str = "Alice <alice@example.com>",
    to: str = "agent@example.org",
    subject: str = "Quarterly numbers",
    message_id: str | None = None,
    in_reply_to: str | None = None,
    references: Iterable[str] = (),
    headers: dict[str, str] | None = None,
    html: str | None = None,
    files: Iterable[tuple[str, str, bytes]] = (),
) -> bytes:
    """A message as a mail client sends it: ``text`` (``None``: only ``html``), ``html`` as an alternative, and
    ``files`` ((name, MIME type, bytes)) attached."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Date"] = email.utils.formatdate(1764460800, usegmt=True)
    message["Message-ID"] = message_id or email.utils.make_msgid(domain="mail.example.com")
    if in_reply_to is not None:
        message["In-Reply-To"] = in_reply_to
    refs = list(references)
    if refs:
        message["References"] = " ".join(refs)
    for name, value in (headers or {}).items():
        message[name] = value
    if text is not None:
        message.set_content(text)
        if html is not None:
            message.add_alternative(html, subtype="html")
    elif html is not None:
        message.set_content(html, subtype="html")
    for name, mime, data in files:
        major, _, minor = mime.partition("/")
        message.add_attachment(data, maintype=major, subtype=minor, filename=name)
    return message.as_bytes()
