"""The email platform against a real gateway, the IMAP4rev1 server of ``imap_fake`` (which :mod:`imaplib` talks to
unchanged) and an aiosmtpd SMTP server, all on loopback.

Mail is put into the fake's INBOX as a client would send it and replies are read back from the SMTP server, so
both directions are checked on the wire; the poller is waited for through the fake's recorded commands, the
inbox rows and the SMTP server's arrivals, never by sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_actors.agents.base import EchoAgent
from hermes_actors.errors import ConfigError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakePlatform, poll_until
from platforms import registry
from platforms.base import Adapter, SendError, ThreadCreator
from platforms.email import EmailAccount, EmailAdapter, EmailConfig, strip_history
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.imap_fake import FakeImap, FakeSmtp, mail
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages, wait_on

USER = "agent@example.org"
PASSWORD = "imap-secret-1"
ALICE = "alice@example.com"


@pytest.fixture
def imap() -> Iterator[FakeImap]:
    fake = FakeImap(USER, PASSWORD).start()
    yield fake
    fake.stop()


@pytest.fixture
def smtp() -> Iterator[FakeSmtp]:
    fake = FakeSmtp(USER, PASSWORD).start()
    yield fake
    fake.stop()


def account(imap: FakeImap, smtp: FakeSmtp, **fields: Any) -> EmailAccount:
    values: dict[str, Any] = {
        "address": USER,
        "imap_host": "127.0.0.1",
        "imap_port": imap.port,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp.port,
        "smtp_security": "none",
        "password": PASSWORD,
        "allowed_senders": [ALICE, "@trusted.example"],
    }
    return EmailAccount(**(values | fields))


def config_for(imap: FakeImap, smtp: FakeSmtp, *, options: dict[str, Any] | None = None, **fields: Any) -> EmailConfig:
    settings = {"retry_s": 0.05, "retry_max_s": 0.2, "poll_interval_s": 0.05, "timeout_s": 5.0} | (options or {})
    return EmailConfig(accounts={"main": account(imap, smtp, **fields)}, **settings)


@dataclass(frozen=True)
class Email(RunningAdapter[EmailAdapter]):
    imap: FakeImap
    db: Path

    def cursor(self) -> str | None:
        with self.gateway.read() as store:
            return store.kv.get_cursor("email", "main")

    def wait_for_rows(self, count: int) -> list[tuple[str, ...]]:
        poll_until(lambda: len(self.inbox_rows("id")) >= count or None, 10, what=f"{count} inbox rows")
        return self.inbox_rows("platform_message_id", "routing_key")


StartEmail = Callable[..., Email]


def said(message: Any) -> str:
    """The reply's text without the stand-in lines of the attachments it echoes (the kept whole mail)."""
    return str(message.get_content()).replace("\r\n", "\n").split("\n[attached ")[0].strip()


@pytest.fixture
def start_email(tmp_path: Path, imap: FakeImap, smtp: FakeSmtp, start_gateway: StartGateway) -> StartEmail:
    def start(*, agent: EchoAgent | None = None, media: MediaConfig | None = None, **fields: Any) -> Email:
        adapter = EmailAdapter(config_for(imap, smtp, **fields), environ={})
        gateway = start_gateway(adapter, agent=agent, tick_interval_s=0.1, media=media)
        assert adapter.pollers["main"].connected.wait(10), "the mailbox was never selected"
        return Email(adapter=adapter, gateway=gateway, imap=imap, db=tmp_path / "state.db")

    return start


# -- a mail in, a threaded reply out -------------------------------------------------------------------------------


def test_an_allowed_mail_becomes_a_turn_and_the_reply_is_threaded_for_mail_clients(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email()
    uid = imap.deliver(
        mail(
            "Can you send the totals?",
            message_id="<m2@mail.example.com>",
            subject="Re: Quarterly numbers",
            in_reply_to="<m1@mail.example.com>",
            references=["<m0@mail.example.com>", "<m1@mail.example.com>"],
        )
    )
    received = smtp.take()
    reply = received.message
    assert (received.mail_from, received.rcpt_tos) == (USER, (ALICE,))
    assert (reply["From"], reply["To"], reply["Subject"]) == (USER, ALICE, "Re: Quarterly numbers")
    assert reply["In-Reply-To"] == "<m2@mail.example.com>"
    assert reply["References"] == "<m0@mail.example.com> <m1@mail.example.com> <m2@mail.example.com>"
    assert reply["Auto-Submitted"] == "auto-replied"
    assert said(reply) == "echo: Can you send the totals?"
    assert running.inbox_rows("platform_message_id", "routing_key") == [
        ("<m2@mail.example.com>", "agent:main:email~main:dm:alice@example.com")
    ]
    assert running.cursor() == f"{imap.uidvalidity}:{uid}"
    assert imap.seen() == []  # BODY.PEEK[]: the user's client still shows it unread


def test_a_new_thread_starts_with_its_subject_and_idle_announces_it(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    start_email()
    assert imap.idling.wait(10)
    imap.deliver(mail("What changed since March?", subject="Budget", message_id="<b1@mail.example.com>"))
    reply = smtp.take().message
    assert said(reply) == "echo: Subject: Budget\n\nWhat changed since March?"
    assert (reply["Subject"], reply["References"]) == ("Re: Budget", "<b1@mail.example.com>")
    assert {"IDLE", "DONE", "UID FETCH"} <= set(imap.commands)


def test_without_idle_the_mailbox_is_polled(tmp_path: Path, smtp: FakeSmtp, start_gateway: StartGateway) -> None:
    imap = FakeImap(USER, PASSWORD, idle=False).start()
    try:
        adapter = EmailAdapter(config_for(imap, smtp), environ={})
        start_gateway(adapter)
        assert adapter.pollers["main"].connected.wait(10)
        imap.deliver(mail("polled?", message_id="<p1@mail.example.com>"))
        assert said(smtp.take().message).endswith("polled?")
        assert "IDLE" not in imap.commands
    finally:
        imap.stop()


def test_quoted_history_and_the_signature_are_cut_and_the_whole_mail_is_kept(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email()
    body = (
        "Yes, Tuesday works.\n\nSee you then.\n\n-- \nAlice Example\nHead of Finance\n\n"
        "On Mon, 30 Nov 2026 at 09:12, Agent <agent@example.org> wrote:\n> Does Tuesday work?\n> \n"
    )
    raw = mail(body, message_id="<q1@mail.example.com>", in_reply_to="<a0@example.org>")
    imap.deliver(raw)
    assert said(smtp.take().message) == "echo: Yes, Tuesday works.\n\nSee you then."
    (stored,) = inbound_messages(running.gateway, "email")
    (whole,) = stored.attachments
    assert (whole.mime_type, whole.name, whole.size) == ("message/rfc822", "message.eml", len(raw))
    assert whole.path is not None
    assert Path(whole.path).read_bytes() == raw


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Sure.\n\nOn Tue, Dec 1, 2026 at 10:00 AM Bob <bob@example.com>\nwrote:\n> earlier\n", "Sure."),
        ("Fine by me\n> quoted\n>> older\nand one more line", "Fine by me\nand one more line"),
        ("Noted.\n\n-----Original Message-----\nFrom: Agent\nSent: Monday\n\nold text", "Noted."),
        ("Thanks\n\nFrom: Agent <agent@example.org>\nSent: Monday, 30 November 2026 09:12\nSubject: x", "Thanks"),
        ("Short answer\n--\nAlice", "Short answer"),
        (
            "Le 1 déc. 2026, Bob a écrit :\nnot an English attribution",
            "Le 1 déc. 2026, Bob a écrit :\nnot an English attribution",
        ),
        (
            "I wrote: this line is mine and has more text after it",
            "I wrote: this line is mine and has more text after it",
        ),
    ],
)
def test_history_and_signatures_are_cut_at_the_usual_markers(text: str, kept: str) -> None:
    assert strip_history(text) == kept


def test_an_html_only_mail_is_read_as_text(start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp) -> None:
    start_email()
    markup = (
        "<html><head><style>p {color: red}</style></head><body><p>Totals &amp; notes</p>"
        "<blockquote>old quoted text</blockquote></body></html>"
    )
    imap.deliver(mail(None, html=markup, message_id="<h1@mail.example.com>", in_reply_to="<x@example.org>"))
    assert said(smtp.take().message) == "echo: Totals & notes"
