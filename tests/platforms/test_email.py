"""The email platform against a real gateway, the IMAP4rev1 server of ``imap_fake`` (which :mod:`imaplib` talks to
unchanged) and an aiosmtpd SMTP server, all on loopback.

Mail is put into the fake's INBOX as a client would send it and replies are read back from the SMTP server, so
both directions are checked on the wire; the poller is waited for through the fake's recorded commands, the
inbox rows and the SMTP server's arrivals, never by sleeping.
"""

from __future__ import annotations

import logging
import re
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
from platforms.base import Adapter, ConnectionReporter, SendError, ThreadCreator
from platforms.email import EmailAccount, EmailAdapter, EmailConfig, strip_history
from platforms.email.authres import AuthResError, AuthResult, AuthResults, parse_authres
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.imap_fake import FakeImap, FakeSmtp, mail
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages, wait_on, wait_problem

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


@pytest.mark.slow
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


# -- who may write, and what starts no turn -----------------------------------------------------------------------


class LogSeen(logging.Handler):
    """Sets ``seen`` once a record containing ``text`` is logged (from any thread)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.seen = threading.Event()
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if record.levelno >= logging.WARNING:
            self.warnings.append(record.getMessage())
        if self.text in record.getMessage():
            self.seen.set()


@pytest.fixture
def email_log() -> Iterator[Callable[[str], LogSeen]]:
    logger = logging.getLogger("platforms.email")
    handlers: list[LogSeen] = []
    previous = logger.level
    logger.setLevel(logging.DEBUG)

    def watch(text: str) -> LogSeen:
        handler = LogSeen(text)
        handlers.append(handler)
        logger.addHandler(handler)
        return handler

    yield watch
    for handler in handlers:
        logger.removeHandler(handler)
    logger.setLevel(previous)


def test_strangers_automatic_mail_bounces_and_our_own_mail_start_no_turn(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, email_log: Callable[[str], LogSeen]
) -> None:
    running = start_email()
    log = email_log("skipped UID")
    skipped = [
        (mail("let me in", sender="mallory@evil.example"), "not in allowed_senders"),
        (mail("away", headers={"Auto-Submitted": "auto-replied"}), "an automatic mail (Auto-Submitted: auto-replied)"),
        (mail("digest", headers={"Precedence": "bulk"}), "a bulk mail (Precedence: bulk)"),
        (mail("undeliverable", headers={"Return-Path": "<>"}), "a bounce (empty Return-Path)"),
        (mail("loop", sender=USER), "our own mail"),
        (b"not a mail at all\r\n", "no usable From address"),
    ]
    for raw, _ in skipped:
        imap.deliver(raw)
    last = imap.deliver(mail("from a trusted domain", sender="Bob <bob@trusted.example>", message_id="<t1@x>"))
    assert said(smtp.take().message) == "echo: Subject: Quarterly numbers\n\nfrom a trusted domain"
    assert [row[0] for row in running.inbox_rows("platform_message_id")] == ["<t1@x>"]
    for _, reason in skipped:
        assert any(reason in line for line in log.lines), reason
    assert running.cursor() == f"{imap.uidvalidity}:{last}"  # the skipped mail is stepped over for good
    assert smtp.nothing_more()


def test_one_message_id_runs_one_turn(start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp) -> None:
    running = start_email()
    raw = mail("once only", message_id="<dup@mail.example.com>")
    imap.deliver(raw)
    imap.deliver(raw)  # filed twice (a copy moved back, a rule that copies)
    imap.deliver(mail("next", message_id="<next@mail.example.com>", in_reply_to="<dup@mail.example.com>"))
    assert said(smtp.take().message).endswith("once only")
    assert said(smtp.take().message) == "echo: next"
    assert smtp.nothing_more()
    assert [row[0] for row in running.inbox_rows("platform_message_id")] == [
        "<dup@mail.example.com>",
        "<next@mail.example.com>",
    ]


def test_with_thread_sessions_each_mail_thread_is_a_session_of_its_own(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email(sessions="thread")
    imap.deliver(mail("first topic", subject="Budget", message_id="<r1@x>"))
    imap.deliver(mail("second topic", subject="Hiring", message_id="<r2@x>"))
    imap.deliver(
        mail("more on budget", subject="Re: Budget", message_id="<r3@x>", in_reply_to="<r1@x>", references=["<r1@x>"])
    )
    replies = {said(r.message): r.message for r in (smtp.take(), smtp.take(), smtp.take())}
    assert replies["echo: more on budget"]["References"] == "<r1@x> <r3@x>"
    assert running.inbox_rows("routing_key") == [
        ("agent:main:email~main:dm:alice@example.com:<r1@x>",),
        ("agent:main:email~main:dm:alice@example.com:<r2@x>",),
        ("agent:main:email~main:dm:alice@example.com:<r1@x>",),
    ]
    (_, _, (role, content), _) = running.transcript("agent:main:email~main:dm:alice@example.com:<r1@x>")
    assert (role, str(content).split("\n")[0]) == ("user", "more on budget")


# -- the cursor ----------------------------------------------------------------------------------------------------


def test_the_first_start_reads_only_mail_that_arrives_after_it(
    tmp_path: Path, imap: FakeImap, smtp: FakeSmtp, start_gateway: StartGateway
) -> None:
    old = imap.deliver(mail("years of history", message_id="<old@x>"))
    adapter = EmailAdapter(config_for(imap, smtp), environ={})
    gateway = start_gateway(adapter)
    assert adapter.pollers["main"].connected.wait(10)
    with gateway.read() as store:
        assert store.kv.get_cursor("email", "main") == f"{imap.uidvalidity}:{old}"
    imap.deliver(mail("new", message_id="<new@x>", in_reply_to="<a@x>"))
    assert said(smtp.take().message) == "echo: new"
    assert smtp.nothing_more()


def test_a_restart_reads_what_arrived_meanwhile_and_nothing_twice(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, start_gateway: StartGateway
) -> None:
    running = start_email()
    imap.deliver(mail("before", message_id="<s1@x>", in_reply_to="<a@x>"))
    assert said(smtp.take().message) == "echo: before"
    assert running.gateway.wait_idle()
    running.adapter.stop()
    imap.deliver(mail("while stopped", message_id="<s2@x>", in_reply_to="<a@x>"))
    again = EmailAdapter(running.adapter.config, environ={})
    again.start(GatewayInbox(running.gateway))
    try:
        assert said(smtp.take().message) == "echo: while stopped"
        assert smtp.nothing_more()
    finally:
        again.stop()
    assert [row[0] for row in running.inbox_rows("platform_message_id")] == ["<s1@x>", "<s2@x>"]


def test_a_new_uidvalidity_restarts_from_the_current_state_without_taking_mail_again(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, email_log: Callable[[str], LogSeen]
) -> None:
    running = start_email()
    imap.deliver(mail("one", message_id="<v1@x>", in_reply_to="<a@x>"))
    imap.deliver(mail("two", message_id="<v2@x>", in_reply_to="<a@x>"))
    assert [said(smtp.take().message) for _ in range(2)] == ["echo: one", "echo: two"]
    changed = email_log("UIDVALIDITY changed")
    imap.renumber(4242)
    imap.drop()  # the server rebuilt the mailbox and dropped its clients
    assert changed.seen.wait(10)
    imap.deliver(mail("three", message_id="<v3@x>", in_reply_to="<a@x>"))
    assert said(smtp.take().message) == "echo: three"
    assert smtp.nothing_more()
    assert running.cursor() == "4242:3"
    assert len(running.inbox_rows("id")) == 3


@pytest.mark.slow
def test_a_dropped_connection_is_opened_again_and_a_refused_login_is_logged_and_reported_with_the_fix(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, email_log: Callable[[str], LogSeen]
) -> None:
    running = start_email()
    assert isinstance(running.adapter, ConnectionReporter)
    assert running.adapter.connection_problem() is None
    refused = email_log("refused the login")
    imap.password = "rotated"
    imap.drop()
    assert refused.seen.wait(10)
    assert any("check platforms.email.accounts.main.username and password" in line for line in refused.lines)
    problem = wait_problem(running.adapter, "login")
    assert problem.startswith("account 'main': reconnecting (")
    assert problem.endswith("; check platforms.email.accounts.main.username and password)")
    logins = imap.logins
    imap.password = PASSWORD
    wait_on(imap.changed, lambda: imap.logins > logins, 10, lambda: "the poller never logged in again")
    poll_until(lambda: running.adapter.connection_problem() is None, what="the selected mailbox to clear the problem")
    imap.deliver(mail("back", message_id="<c1@x>", in_reply_to="<a@x>"))
    assert said(smtp.take().message) == "echo: back"


# -- files ---------------------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(120))


def test_attached_files_are_saved_into_the_media_store_and_big_ones_refused(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, tmp_path: Path
) -> None:
    running = start_email(media=MediaConfig(max_bytes=2048))
    files = [("plot.png", "image/png", PNG), ("scan.pdf", "application/pdf", bytes(4096))]
    imap.deliver(mail("see attached", message_id="<f1@x>", in_reply_to="<a@x>", files=files))
    text = said(smtp.take().message)
    assert text.startswith("I could not read scan.pdf: it is 4 KB, over the 2 KB limit.")
    (stored,) = inbound_messages(running.gateway, "email")
    plot, scan = stored.attachments  # the whole mail is over the limit too: it is not kept
    assert (plot.kind, plot.name, plot.size, plot.error) == ("image", "plot.png", len(PNG), None)
    assert plot.path is not None
    assert Path(plot.path).read_bytes() == PNG
    assert (scan.name, scan.path) == ("scan.pdf", None)


# -- sending -------------------------------------------------------------------------------------------------------


def outbound(text: str, **fields: Any) -> OutboundMessage:
    return OutboundMessage(platform="email", text=text, **({"account_id": "main", "chat_id": ALICE} | fields))


def test_smtp_4xx_is_retried_later_and_5xx_gives_the_reply_up(imap: FakeImap, smtp: FakeSmtp) -> None:
    sender = EmailAdapter(config_for(imap, smtp, options={"messages_per_minute": 6000.0}), environ={}).sender
    smtp.fail_next(451, "4.7.1 greylisted, try again later")
    with pytest.raises(SendError, match=r"answered 451 4\.7\.1 greylisted") as busy:
        sender.send(outbound("hi", outbox_id=1))
    assert (busy.value.permanent, busy.value.outcome_unknown) == (False, False)
    smtp.fail_next(550, "5.1.1 no such user", stage="RCPT")
    with pytest.raises(SendError, match=r"refused it with 550 5\.1\.1 no such user") as gone:
        sender.send(outbound("hi", outbox_id=2))
    assert gone.value.permanent
    smtp.fail_next(554, "5.7.1 message refused")
    with pytest.raises(SendError, match="554") as refused:
        sender.send(outbound("hi", outbox_id=3))
    assert refused.value.permanent
    with pytest.raises(SendError, match="not in allowed_senders") as stranger:
        sender.send(outbound("hi", chat_id="mallory@evil.example"))
    assert stranger.value.permanent
    assert sender.send(outbound("   ")) is None
    message_id = sender.send(outbound("finally", outbox_id=4))
    received = smtp.take()
    assert received.message["Message-ID"] == message_id
    assert said(received.message) == "finally"
    # The same reply sent again (an unknown outcome) carries the same Message-ID.
    assert sender.send(outbound("finally", outbox_id=4)) == message_id
    wrong = EmailAdapter(config_for(imap, smtp, password="wrong"), environ={}).sender
    with pytest.raises(SendError, match="refused the login \\(535") as login:
        wrong.send(outbound("hi"))
    assert not login.value.permanent
    unreachable = EmailAdapter(config_for(imap, smtp, smtp_port=1), environ={}).sender
    with pytest.raises(SendError, match="cannot be reached") as down:
        unreachable.send(outbound("hi"))
    assert (down.value.permanent, down.value.outcome_unknown) == (False, False)


def test_the_outbox_retries_a_greylisted_reply_until_it_is_accepted(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email()
    smtp.fail_next(451, "4.7.1 greylisted")
    imap.deliver(mail("patience", message_id="<g1@x>", in_reply_to="<a@x>"))
    assert said(smtp.take().message) == "echo: patience"
    assert smtp.attempts == 2
    assert running.gateway.wait_idle()
    assert smtp.nothing_more()


def test_a_handoff_to_email_opens_a_new_thread_whose_first_mail_is_its_root(
    tmp_path: Path, imap: FakeImap, smtp: FakeSmtp
) -> None:
    adapter = EmailAdapter(config_for(imap, smtp), environ={})
    assert isinstance(adapter.sender, ThreadCreator)
    cli = FakePlatform("cli")
    gateway = Gateway(tmp_path / "state.db", senders=[cli, *adapter.senders()], tick_interval_s=0.1)
    cli.attach(gateway)
    adapter.start(GatewayInbox(gateway))
    try:
        assert adapter.pollers["main"].connected.wait(10)
        imap.deliver(mail("/sethome", message_id="<home@x>", in_reply_to="<a@x>"))
        assert said(smtp.take().message) == "This chat is now the home channel for email."
        cli.push("let us plan the offsite", chat_id="terminal")
        assert cli.pop().text == "echo: let us plan the offsite"
        assert gateway.wait_idle()
        cli.push("/handoff email", chat_id="terminal")
        root = smtp.take().message
        assert said(root).startswith("echo: [handoff] This conversation was just handed off here from cli.")
        assert root["In-Reply-To"] is None
        assert root["Subject"]
        assert cli.pop().text.startswith("Handed off to email (chat ")
        # Alice answers the handoff mail: the reply stays in that thread.
        imap.deliver(
            mail(
                "sounds good",
                message_id="<h2@x>",
                in_reply_to=root["Message-ID"].strip(),
                references=[root["Message-ID"].strip()],
            )
        )
        answer = smtp.take().message
        assert (answer["In-Reply-To"], answer["References"].split()) == (
            "<h2@x>",
            [root["Message-ID"].strip(), "<h2@x>"],
        )
    finally:
        adapter.stop()
        gateway.stop()


# -- hostile mail --------------------------------------------------------------------------------------------------

_header_names = st.sampled_from(
    [
        "From",
        "Subject",
        "Message-ID",
        "References",
        "In-Reply-To",
        "Content-Type",
        "Content-Transfer-Encoding",
        "Date",
        "Auto-Submitted",
    ]
)
_header_values = st.one_of(
    st.text(max_size=60),
    st.just("=?utf-8?b?////?="),
    st.just("multipart/mixed; boundary="),
    st.just("<" * 50),
    st.just("alice@example.com"),
    st.just("Alice <alice@example.com>"),
)


@st.composite
def _hostile_mail(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["headers", "bytes", "body"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    lines = [f"From: {ALICE}"] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 4))):
        value = draw(_header_values).replace("\r", " ").replace("\n", " ")
        lines.append(f"{draw(_header_names)}: {value}")
    body = draw(st.text(max_size=200)) if kind == "body" else "hi"
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode("utf-8", "surrogatepass")


@pytest.mark.slow
def test_hostile_mail_is_skipped_or_read_never_kills_the_reader_and_the_next_mail_runs(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email(options={"messages_per_minute": 60000.0})

    @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(raw=_hostile_mail())
    def check(raw: bytes) -> None:
        uid = imap.deliver(raw)
        poll_until(lambda: running.cursor() == f"{imap.uidvalidity}:{uid}" or None, 10, what=f"the cursor past {uid}")

    check()
    imap.deliver(
        mail("still reading?", sender="Carol <carol@trusted.example>", message_id="<z@x>", in_reply_to="<a@x>")
    )
    while said(smtp.take(30).message) != "echo: still reading?":  # hostile mail from Alice may be answered too
        pass


# -- configuration -------------------------------------------------------------------------------------------------

_GOOD = {
    "address": USER,
    "imap_host": "imap.example.org",
    "smtp_host": "smtp.example.org",
    "password": "x",
    "allowed_senders": [ALICE],
}


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        (
            {"accounts": {"a": _GOOD | {"allowed_senders": []}}},
            "platforms.email.accounts.a.allowed_senders",
            "open agent",
        ),
        (
            {"accounts": {"a": _GOOD | {"allowed_senders": ["everyone"]}}},
            "platforms.email.accounts.a.allowed_senders[0]",
            "a domain",
        ),
        ({"accounts": {"a": _GOOD | {"address": "agent"}}}, "platforms.email.accounts.a.address", "email address"),
        ({"accounts": {"a": _GOOD | {"password": None}}}, "platforms.email.accounts.a.password", "is required"),
        ({"accounts": {"a": _GOOD | {"password_env": "E"}}}, "platforms.email.accounts.a.password_env", "not both"),
        (
            {"accounts": {"a": _GOOD | {"imap_security": "ssl"}}},
            "platforms.email.accounts.a.imap_security",
            "tls, starttls, none",
        ),
        ({"accounts": {"a": _GOOD | {"smtp_port": 0}}}, "platforms.email.accounts.a.smtp_port", "1..65535"),
        (
            {"accounts": {"a": _GOOD | {"imap_host": "imap example"}}},
            "platforms.email.accounts.a.imap_host",
            "host name",
        ),
        ({"accounts": {"a": _GOOD | {"sessions": "chat"}}}, "platforms.email.accounts.a.sessions", "sender, thread"),
        (
            {"accounts": {"a": _GOOD | {"trusted_authserv_id": "mx example"}}},
            "platforms.email.accounts.a.trusted_authserv_id",
            "server name",
        ),
        ({"accounts": {"a": _GOOD | {"mailbox": 'In"box'}}}, "platforms.email.accounts.a.mailbox", "mailbox name"),
        ({"accounts": {"a b": _GOOD}}, "platforms.email.accounts.a b", "an account name is"),
        ({"idle_renew_s": 3600}, "platforms.email.idle_renew_s", "RFC 2177"),
        ({"poll_interval_s": 0}, "platforms.email.poll_interval_s", "positive"),
        ({"retry_s": 10, "retry_max_s": 5}, "platforms.email.retry_max_s", "not be smaller"),
        ({"max_batch": 0}, "platforms.email.max_batch", "1..500"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, registry.config_type("email"))
    assert error.value.path == path
    assert problem in str(error.value)


def test_the_password_from_the_environment_is_read_when_the_adapter_is_built(imap: FakeImap, smtp: FakeSmtp) -> None:
    config = config_for(imap, smtp, password=None, password_env="MAIL_PASSWORD")
    adapter = EmailAdapter(config, environ={"MAIL_PASSWORD": PASSWORD})
    assert "(password from $MAIL_PASSWORD)" in adapter.describe()[0]
    assert adapter.sender.send(outbound("hi"))
    assert said(smtp.take().message) == "hi"
    with pytest.raises(ConfigError, match="MAIL_PASSWORD is not set") as missing:
        EmailAdapter(config, environ={})
    assert missing.value.path == "platforms.email.accounts.main.password_env"


def test_the_registry_builds_the_adapter_and_the_banner_says_who_may_write(imap: FakeImap, smtp: FakeSmtp) -> None:
    empty: Adapter = registry.build("email", EmailConfig(), {})
    assert empty.capabilities.threads
    assert empty.describe() == ["Email: no accounts; add one under platforms.email.accounts in config.yaml"]
    adapter = registry.build("email", config_for(imap, smtp), {})
    (line,) = adapter.describe()
    assert line.startswith(f"Email account 'main' <{USER}> (password in config.yaml): reads INBOX on imap://127.0.0.1:")
    assert line.endswith("one session per sender; only mail from @trusted.example, alice@example.com starts turns")
    (vouched,) = registry.build("email", config_for(imap, smtp, trusted_authserv_id="mx.example.org"), {}).describe()
    assert vouched.endswith("starts turns, when mx.example.org reports dmarc=pass for its From domain")


# -- a crash between accept and reply -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(
    tmp_path: Path, imap: FakeImap, smtp: FakeSmtp
) -> None:
    db = tmp_path / "state.db"
    config = config_for(imap, smtp)
    worker = AdapterWorker.start(db, "email", config, agent="hold")
    try:
        wait_on(imap.changed, lambda: "IDLE" in imap.commands, 20, lambda: "the worker never began to wait for mail")
        imap.deliver(mail("survive", message_id="<k1@x>", in_reply_to="<a@x>"))
        assert wait_for_inbox(db, 1) == [("<k1@x>", "pending")]
    finally:
        worker.kill()
    fetches = imap.commands.count("UID FETCH")
    worker = AdapterWorker.start(db, "email", config, agent="echo")
    try:
        assert said(smtp.take(timeout=20).message) == "echo: survive"
        assert smtp.nothing_more(0.3)
    finally:
        worker.stop()
    assert imap.commands.count("UID FETCH") == fetches  # the stored cursor: the mail is not fetched again
    assert inbox_rows(db) == [("<k1@x>", "done")]


def test_with_a_trusted_authserv_id_only_mail_its_server_vouches_for_starts_turns(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, email_log: Callable[[str], LogSeen]
) -> None:
    running = start_email(trusted_authserv_id="mx.example.org")
    log = email_log("does not vouch for its From address")
    passed = (
        "mx.example.org; spf=pass smtp.mailfrom=example.com; dkim=pass header.d=example.com; dmarc=pass "
        "header.from=example.com"
    )
    imap.deliver(mail("forged", message_id="<d1@x>", in_reply_to="<a@x>"))  # no header at all
    imap.deliver(
        mail(
            "failed",
            message_id="<d2@x>",
            in_reply_to="<a@x>",
            headers={"Authentication-Results": passed.replace("dmarc=pass", "dmarc=fail")},
        )
    )
    other = "mx.attacker.example; dmarc=pass header.from=example.com"
    imap.deliver(
        mail("other server", message_id="<d3@x>", in_reply_to="<a@x>", headers={"Authentication-Results": other})
    )
    imap.deliver(mail("genuine", message_id="<d4@x>", in_reply_to="<a@x>", headers={"Authentication-Results": passed}))
    assert said(smtp.take().message) == "echo: genuine"
    assert [row[0] for row in running.inbox_rows("platform_message_id")] == ["<d4@x>"]
    assert len([line for line in log.lines if "does not vouch" in line]) == 3


# -- who vouches for the From address ------------------------------------------------------------------------------

TRUSTED = "mx.example.org"
GENUINE = (
    f"{TRUSTED}; spf=pass smtp.mailfrom=example.com; dkim=pass header.d=example.com; dmarc=pass header.from=example.com"
)
# What decoding the header would read as "); dmarc=pass header.from=example.com (": the raw header keeps it a comment.
_ENCODED = "=?utf-8?q?=29=3B_dmarc=3Dpass_header.from=3Dexample.com_=28?="


def received(raw: bytes, *results: str, sender: tuple[str, ...] = ()) -> bytes:
    """``raw`` as the receiving server files it: ``results`` prepended as ``Authentication-Results`` headers (the
    topmost first), and its From header written as ``sender`` (one header each) when given."""
    if sender:
        first, _, rest = raw.partition(b"\n")
        assert first.startswith(b"From: ")
        raw = b"".join(f"From: {value}\n".encode() for value in sender) + rest
    return b"".join(f"Authentication-Results: {value}\n".encode() for value in results) + raw


_FORGED = [
    pytest.param(
        (f"{TRUSTED}; spf=pass smtp.mailfrom=dmarc=pass@evil.com; dkim=none; dmarc=fail header.from=example.com",),
        (),
        "mx.example.org reports dmarc=fail",
        id="dmarc=pass in the envelope sender",
    ),
    pytest.param(
        (f"{TRUSTED}; dkim=fail (signature was dmarc=pass) header.d=example.com; dmarc=fail header.from=example.com",),
        (),
        "mx.example.org reports dmarc=fail",
        id="dmarc=pass in a comment",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass header.from=evil.com",),
        (),
        "dmarc=pass for evil.com, not for the From domain example.com",
        id="dmarc=pass for another domain",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass header.from=evil.com",),
        ("alice@example.com (alice) <evil@evil.com>",),
        "its From header does not parse cleanly",
        id="an address, a comment, then the address a verifier reads",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass header.from=evil.com",),
        ("alice@example.com, mallory@evil.com",),
        "its From header names 2 mailboxes",
        id="two mailboxes",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass header.from=evil.com",),
        ("alice@example.com", "mallory@evil.com"),
        "it has 2 From headers",
        id="two From headers",
    ),
    pytest.param(
        (
            f"{TRUSTED}; spf=pass ({TRUSTED}: domain of {_ENCODED}@evil.com designates 192.0.2.1 as permitted "
            "sender) smtp.mailfrom=evil.com; dmarc=fail header.from=example.com",
        ),
        (),
        "mx.example.org reports dmarc=fail",
        id="an encoded word in a comment",
    ),
    pytest.param(
        (GENUINE.replace("dmarc=pass", "dmarc=fail"), GENUINE),
        (),
        "mx.example.org reports dmarc=fail",
        id="the sender's own header below the server's",
    ),
    pytest.param(
        ("mx.relay.example; spf=pass smtp.mailfrom=example.com", GENUINE),
        (),
        "its topmost Authentication-Results is by mx.relay.example, not mx.example.org",
        id="the trusted server's header is not the topmost",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass header.from=example.com; dmarc=fail header.from=example.com",),
        (),
        "mx.example.org reports 2 dmarc results",
        id="two dmarc results",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass",),
        (),
        "mx.example.org reports dmarc=pass with no header.from",
        id="dmarc=pass for no domain",
    ),
    pytest.param(
        (f"{TRUSTED}; dmarc=pass (p=none header.from=example.com",),
        (),
        "its topmost Authentication-Results cannot be read (an unterminated comment",
        id="a header outside the grammar",
    ),
]


@pytest.mark.parametrize(("results", "sender", "why"), _FORGED)
def test_a_from_address_the_trusted_server_does_not_vouch_for_starts_no_turn_and_the_log_says_why(
    start_email: StartEmail,
    imap: FakeImap,
    smtp: FakeSmtp,
    email_log: Callable[[str], LogSeen],
    results: tuple[str, ...],
    sender: tuple[str, ...],
    why: str,
) -> None:
    running = start_email(trusted_authserv_id=TRUSTED)
    log = email_log("skipped UID")
    imap.deliver(received(mail("forged", message_id="<f1@x>", in_reply_to="<a@x>"), *results, sender=sender))
    last = imap.deliver(received(mail("genuine", message_id="<f2@x>", in_reply_to="<a@x>"), GENUINE))
    assert said(smtp.take().message) == "echo: genuine"
    assert [row[0] for row in running.inbox_rows("platform_message_id")] == ["<f2@x>"]
    assert [line for line in log.warnings if why in line], log.lines
    assert running.cursor() == f"{imap.uidvalidity}:{last}"  # stepped over for good, and left unread
    assert imap.seen() == []
    assert smtp.nothing_more()


@pytest.mark.parametrize(
    ("sender", "why"),
    [
        (("alice@example.com (alice) <evil@evil.com>",), "its From header does not parse cleanly"),
        (("alice@example.com, mallory@evil.com",), "its From header names 2 mailboxes"),
        (("alice@example.com", "mallory@evil.com"), "it has 2 From headers"),
        (("Friends: alice@example.com;",), "its From header is a group"),
        (("alice@[192.0.2.1]",), "is not local-part@domain-name"),
    ],
    ids=["a comment then another address", "two mailboxes", "two From headers", "a group", "a domain literal"],
)
def test_without_a_trusted_server_allowed_senders_is_checked_against_a_strictly_read_from(
    start_email: StartEmail,
    imap: FakeImap,
    smtp: FakeSmtp,
    email_log: Callable[[str], LogSeen],
    sender: tuple[str, ...],
    why: str,
) -> None:
    running = start_email()
    log = email_log("no usable From address")
    imap.deliver(received(mail("forged", message_id="<w1@x>", in_reply_to="<a@x>"), sender=sender))
    imap.deliver(mail("genuine", message_id="<w2@x>", in_reply_to="<a@x>"))
    assert said(smtp.take().message) == "echo: genuine"
    assert [row[0] for row in running.inbox_rows("platform_message_id")] == ["<w2@x>"]
    assert [line for line in log.warnings if why in line], log.lines


def test_a_genuine_dmarc_pass_as_servers_write_it_starts_a_turn(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email(trusted_authserv_id="MX.Example.ORG")
    written = (
        f"{TRUSTED} 1;\n\tdkim=pass (2048-bit key; unprotected) header.d=example.com header.i=@example.com "
        'header.s=sel1 header.b="AbC+/9xY";\n\tspf=pass (mx.example.org: domain of alice@example.com designates '
        "2001:db8::25 as permitted sender) smtp.mailfrom=alice@example.com;\n\tdmarc=pass (p=REJECT sp=REJECT "
        "dis=NONE) header.from=Example.COM"
    )
    forged_below = f"{TRUSTED}; dmarc=fail header.from=example.com"
    raw = mail("genuine", message_id="<g1@x>", in_reply_to="<a@x>")
    imap.deliver(received(raw, written, forged_below, sender=('"Alice B. Example" <Alice@EXAMPLE.com>',)))
    reply = smtp.take()
    assert said(reply.message) == "echo: genuine"
    assert reply.rcpt_tos == (ALICE,)
    assert running.inbox_rows("routing_key") == [("agent:main:email~main:dm:alice@example.com",)]


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("mx.example.org; none", AuthResults(authserv_id="mx.example.org", results=())),
        (
            '"MX.Example.org" 1 (v1) ; DMARC / 1 = Pass (p=none) reason="aligned; ok" header . FROM = "Example.com"',
            AuthResults(
                authserv_id="mx.example.org",
                results=(AuthResult(method="dmarc", result="pass", properties=(("header.from", "Example.com"),)),),
            ),
        ),
        (
            "mx.example.org;\r\n spf=pass smtp.mailfrom=dmarc=pass@evil.com;dkim=fail (signature was (not) "
            'dmarc=pass) header.i="a b"@example.com header.b=Ab+/9=',
            AuthResults(
                authserv_id="mx.example.org",
                results=(
                    AuthResult(method="spf", result="pass", properties=(("smtp.mailfrom", "dmarc=pass@evil.com"),)),
                    AuthResult(
                        method="dkim",
                        result="fail",
                        properties=(("header.i", "a b@example.com"), ("header.b", "Ab+/9=")),
                    ),
                ),
            ),
        ),
        (
            "mx.example.org; iprev=pass policy.iprev=2001:db8::1 (mail.example.com)",
            AuthResults(
                authserv_id="mx.example.org",
                results=(AuthResult(method="iprev", result="pass", properties=(("policy.iprev", "2001:db8::1"),)),),
            ),
        ),
    ],
    ids=["no result", "comments, quoting, versions and case", "values that look like results", "an IPv6 value"],
)
def test_authentication_results_are_read_by_the_rfc_8601_grammar(value: str, read: AuthResults) -> None:
    assert parse_authres(value) == read


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "expected the authserv-id"),
        ("mx.example.org", "expected ';' and the results"),
        ("mx.example.org;", "expected a method name at the end"),
        ("mx.example.org; dmarc", "expected '='"),
        ("mx.example.org; dmarc=pass header.from", "expected '='"),
        ("mx.example.org; dmarc=pass action=none header.from=example.com", "expected '.'"),
        ("mx.example.org; dmarc=pass header.from=example.com dmarc=pass", "expected '.'"),
        ("mx.example.org; dmarc=pass.x", "expected ';' or the end"),
        ("mx.example.org; dmarc=pass (p=none", "an unterminated comment"),
        ('mx.example.org; dmarc=pass header.from="example.com', "an unterminated quoted string"),
        ("mx.example.org; dmarc=pass header.from=exämple.com", "expected ';' or the end"),
        ("mx.example.org; dmarc=pass header.from=example.com\r\n", "expected ';' or the end"),
        ("mx.example.org; none; dkim=pass", "expected '='"),
    ],
)
def test_an_authentication_results_value_outside_the_grammar_is_an_error_saying_where(value: str, problem: str) -> None:
    with pytest.raises(AuthResError, match=re.escape(problem)):
        parse_authres(value)


@settings(max_examples=300, deadline=None)
@given(value=st.text(alphabet=st.sampled_from(list(' \t\r\n();=./@"\\ab1-é')), max_size=60))
def test_any_text_is_read_or_refused_with_an_authres_error(value: str) -> None:
    try:
        read = parse_authres(f"mx.example.org; {value}")
    except AuthResError:
        return
    assert read.authserv_id == "mx.example.org"


_keywords = st.from_regex(r"[a-z][a-z0-9-]{0,6}[a-z0-9]", fullmatch=True)
_values = st.text(alphabet=st.sampled_from(list('ab.-=@/;()" \\')), min_size=1, max_size=12)


def _written(value: str) -> str:
    if re.fullmatch(r"[a-b.\-=@/]+", value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@settings(max_examples=200, deadline=None)
@given(
    written=st.lists(
        st.tuples(_keywords, _keywords, st.lists(st.tuples(_keywords, _keywords, _values), max_size=3)),
        min_size=1,
        max_size=4,
    )
)
def test_results_are_read_back_as_written_whatever_their_values_hold(
    written: list[tuple[str, str, list[tuple[str, str, str]]]],
) -> None:
    header = "mx.example.org" + "".join(
        f"; {method}={result} (a comment; dmarc=pass)" + "".join(f" {t}.{p}={_written(v)}" for t, p, v in props)
        for method, result, props in written
    )
    expected = tuple(
        AuthResult(method=method, result=result, properties=tuple((f"{t}.{p}", v) for t, p, v in props))
        for method, result, props in written
    )
    assert parse_authres(header).results == expected


# -- /save ---------------------------------------------------------------------------------------------------------


def test_save_mails_the_markdown_as_an_attachment_in_the_thread(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp
) -> None:
    running = start_email()
    imap.deliver(mail("hello", message_id="<s1@mail.example.com>", subject="Plans"))
    assert said(smtp.take().message).endswith("hello")
    imap.deliver(mail("/save", message_id="<s2@mail.example.com>", in_reply_to="<s1@mail.example.com>"))
    saved = smtp.take().message
    assert running.gateway.wait_idle()
    assert saved["In-Reply-To"] == "<s2@mail.example.com>"
    (attachment,) = saved.iter_attachments()
    filename = attachment.get_filename()
    assert filename is not None
    assert filename.endswith(".md")
    assert attachment.get_content_type() == "text/markdown"
    payload = attachment.get_payload(decode=True)
    assert isinstance(payload, bytes)
    markdown = payload.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: Subject: Plans")  # the first mail of a thread: its subject
    body = saved.get_body(preferencelist=("plain",))
    assert body is not None
    assert "the conversation as Markdown (2 messages, 1 part(s))." in body.get_content()
    assert smtp.nothing_more()  # the file instead of the text, not beside it


def test_save_mails_the_text_when_the_server_refuses_the_attachment(
    start_email: StartEmail, imap: FakeImap, smtp: FakeSmtp, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_email()
    imap.deliver(mail("hello", message_id="<s1@mail.example.com>", subject="Plans"))
    smtp.take()
    smtp.fail_next(552, "5.3.4 Message size exceeds fixed maximum message size")
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        imap.deliver(mail("/save", message_id="<s2@mail.example.com>", in_reply_to="<s1@mail.example.com>"))
        text = smtp.take().message
        assert running.gateway.wait_idle()
    assert list(text.iter_attachments()) == []
    content = str(text.get_content())
    assert content.index("hello") < content.index("echo: Subject: Plans")
    assert smtp.attempts == 3  # the reply, the refused mail with the file, the text
    assert "5.3.4" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
