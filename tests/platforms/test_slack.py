"""The Slack platform against a real gateway, a real loopback server and the fake Slack of ``slack_fake``.

Events are signed and delivered by the fake's helpers (written from Slack's documentation, not from the adapter),
and replies are read back from the fake's ``chat.postMessage``, so both wire directions are checked end to end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_actors.agents.base import EchoAgent
from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakePlatform, GatedAgent, poll_until
from platforms import registry
from platforms.base import Adapter, SendError, ThreadCreator
from platforms.slack import SlackAdapter, SlackApp, SlackConfig, SlackSender
from platforms.support.fetch_policy import FetchSettings
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.fetch_canary import CANARY_BODY, Canary, running_canary, use_hosts
from tests.platforms.slack_fake import (
    Answer,
    Download,
    FakeSlack,
    app_mention,
    deliver,
    deliver_until_acknowledged,
    event_callback,
    message,
    sign,
    url_verification,
)
from tests.platforms.support import LogRecords, RunningAdapter, StartGateway, inbound_messages

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
OTHER_SECRET = "0123456789abcdef0123456789abcdef"
TOKEN = "xoxb-17-team-one-main"
OTHER_TOKEN = "xoxb-42-team-two-other"
TS = "1764460800.000100"
LATER_TS = "1764460900.000200"


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(tokens={TOKEN: "T1", OTHER_TOKEN: "T2"}).start()
    yield fake
    fake.stop()


def main_app(**fields: Any) -> dict[str, SlackApp]:
    return {"main": SlackApp(signing_secret=SECRET, bot_token=TOKEN, **fields)}


@dataclass(frozen=True)
class Slack(RunningAdapter[SlackAdapter]):
    db: Path

    def url(self, app: str = "main") -> str:
        return f"{self.adapter.url}/slack/events/{app}"

    def post(
        self, event: Mapping[str, Any], *, app: str = "main", secret: str = SECRET, team: str = "T1", **kw: Any
    ) -> Answer:
        """Deliver ``event`` in an ``event_callback`` envelope to ``app``'s Request URL."""
        envelope_fields = {k: kw.pop(k) for k in ("event_id", "bot_user") if k in kw}
        return deliver(self.url(app), event_callback(event, team=team, **envelope_fields), secret, **kw)

    def inbox(self) -> list[tuple[str, ...]]:
        """(platform message id, routing key) of every inbox row."""
        return self.inbox_rows("platform_message_id", "routing_key")


StartSlack = Callable[..., Slack]


@pytest.fixture
def start_slack(tmp_path: Path, slack: FakeSlack, start_gateway: StartGateway) -> StartSlack:
    """Start a gateway on ``tmp_path`` with the Slack adapter on port 0 pointed at the fake; both stop at the end."""

    def start(
        apps: Mapping[str, SlackApp] | None = None,
        *,
        agent: EchoAgent | None = None,
        media: MediaConfig | None = None,
        **options: Any,
    ) -> Slack:
        config = SlackConfig(port=0, api_base_url=slack.api_base_url, apps=dict(apps or main_app()), **options)
        adapter = SlackAdapter(config, environ={})
        gateway = start_gateway(adapter, agent=agent, tick_interval_s=0.1, media=media)
        return Slack(adapter=adapter, gateway=gateway, db=tmp_path / "state.db")

    return start


# -- the Request URL ---------------------------------------------------------------------------------------------


def test_the_url_verification_challenge_is_answered_when_signed(start_slack: StartSlack) -> None:
    running = start_slack()
    answer = deliver(running.url(), url_verification("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"), SECRET)
    assert (answer.status, answer.body) == (200, {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    forged = deliver(running.url(), url_verification("x"), OTHER_SECRET)
    assert forged.status == 401
    assert forged.body == {"error": "X-Slack-Signature does not match the body and the app's signing secret"}


def test_an_unknown_app_is_404(start_slack: StartSlack) -> None:
    answer = deliver(f"{start_slack().adapter.url}/slack/events/nope", url_verification("x"), SECRET)
    assert (answer.status, answer.body) == (
        404,
        {"error": "no Slack app 'nope'; add it under platforms.slack.apps"},
    )


# -- keys and where replies go -----------------------------------------------------------------------------------


def test_a_dm_is_keyed_by_workspace_app_and_channel_and_answered_in_the_dm(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack()
    answer = running.post(message("hello", channel="D1", channel_type="im"))
    assert answer.status == 200
    assert answer.body == {"ok": True, "duplicate": False, "routing_key": "agent:main:slack.T1~main:dm:D1"}
    posted = slack.take()
    assert (posted.token, posted.channel, posted.text, posted.thread_ts) == (TOKEN, "D1", "echo: hello", None)
    running.post(message("again", channel="D1", channel_type="im", ts=LATER_TS))
    assert slack.take().text == "echo: again"
    assert running.transcript("agent:main:slack.T1~main:dm:D1") == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
        ("user", "again"),
        ("assistant", "echo: again"),
    ]


def test_a_top_level_channel_message_is_answered_in_a_thread_that_becomes_its_shared_session(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack()
    first = running.post(message("plan the release", user="U1"))
    assert first.body["routing_key"] == f"agent:main:slack.T1~main:group:C1:{TS}"
    posted = slack.take()
    assert (posted.channel, posted.thread_ts, posted.text) == ("C1", TS, "echo: plan the release")
    # Another user answers in that thread: same session (threads are shared by default).
    second = running.post(message("I'll help", user="U2", ts=LATER_TS, thread_ts=TS))
    assert second.body["routing_key"] == first.body["routing_key"]
    assert (slack.take().thread_ts, running.transcript(first.body["routing_key"])[2]) == (TS, ("user", "I'll help"))


def test_without_reply_in_thread_each_user_in_a_channel_has_a_session_of_their_own(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack(reply_in_thread=False)
    alice = running.post(message("mine", user="U1"))
    bob = running.post(message("mine too", user="U2", ts=LATER_TS))
    assert alice.body["routing_key"] == "agent:main:slack.T1~main:group:C1:U1"
    assert bob.body["routing_key"] == "agent:main:slack.T1~main:group:C1:U2"
    replies = {p.text: p for p in (slack.take(), slack.take())}
    assert {text: (p.channel, p.thread_ts) for text, p in replies.items()} == {
        "echo: mine": ("C1", None),
        "echo: mine too": ("C1", None),
    }
    assert running.transcript(alice.body["routing_key"]) == [("user", "mine"), ("assistant", "echo: mine")]
    # Private channels and group DMs are groups too; a thread reply keeps its thread.
    private = running.post(message("hi", channel="G7", channel_type="group", ts="1764461000.000001"))
    mpim = running.post(message("hi", channel="G8", channel_type="mpim", ts="1764461000.000002"))
    threaded = running.post(message("in thread", ts="1764461000.000003", thread_ts=TS))
    dm_thread = running.post(message("dm thread", channel="D1", channel_type="im", ts="1764461000.4", thread_ts=TS))
    assert [a.body["routing_key"] for a in (private, mpim, threaded, dm_thread)] == [
        "agent:main:slack.T1~main:group:G7:U1",
        "agent:main:slack.T1~main:group:G8:U1",
        f"agent:main:slack.T1~main:group:C1:{TS}",
        f"agent:main:slack.T1~main:dm:D1:{TS}",
    ]
    by_text = {p.text: p.thread_ts for p in (slack.take() for _ in range(4))}
    assert by_text == {"echo: hi": None, "echo: in thread": TS, "echo: dm thread": TS}


def test_two_workspaces_and_two_apps_with_identical_ids_never_share_a_session(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    apps = {
        "main": SlackApp(signing_secret=SECRET, bot_token=TOKEN),
        "other": SlackApp(signing_secret=OTHER_SECRET, bot_token=OTHER_TOKEN),
    }
    running = start_slack(apps)
    event = message("same words", channel="D1", channel_type="im")
    keys = [
        running.post(event, app="main", team="T1").body["routing_key"],
        running.post(event, app="main", team="T2").body["routing_key"],
        running.post(event, app="other", secret=OTHER_SECRET, team="T1").body["routing_key"],
    ]
    assert keys == [
        "agent:main:slack.T1~main:dm:D1",
        "agent:main:slack.T2~main:dm:D1",
        "agent:main:slack.T1~other:dm:D1",
    ]
    assert running.gateway.wait_idle()
    sessions = {running.gateway.session_for(key) for key in keys}
    assert len(sessions) == 3
    assert None not in sessions
    tokens = sorted(p.token for p in (slack.take(), slack.take(), slack.take()))
    assert tokens == sorted([TOKEN, TOKEN, OTHER_TOKEN])  # each app answers with its own bot token


def test_an_app_bound_to_a_workspace_refuses_events_from_another(start_slack: StartSlack) -> None:
    running = start_slack(main_app(team_id="T1"))
    answer = running.post(message("hi"), team="T2")
    assert (answer.status, answer.headers["x-slack-no-retry"]) == (403, "1")
    assert answer.body == {"error": "app 'main' accepts workspace T1 only, not T2"}
    assert running.inbox() == []


# -- signatures --------------------------------------------------------------------------------------------------


def test_forged_stale_and_unsigned_requests_are_refused_with_401_and_nothing_is_stored(
    start_slack: StartSlack,
) -> None:
    running = start_slack()
    payload = event_callback(message("let me in"))
    # Signed at a fixed second and stamped with the next: the stamp differs from the signed one whenever the case
    # runs (deliver's own stamp, read from the clock when it sends, could have ticked over to "now + 1").
    signed_at = time.time()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"headers": {"X-Slack-Signature": None}}, "unsigned request"),
        ({"headers": {"X-Slack-Request-Timestamp": None}}, "unsigned request"),
        ({"headers": {"X-Slack-Signature": "v0=" + "0" * 64}}, "does not match"),
        ({"headers": {"X-Slack-Signature": "v1=" + "0" * 64}}, "does not match"),
        ({"headers": {"X-Slack-Request-Timestamp": "soon"}}, "integer number of Unix seconds"),
        (  # the stamp is signed: another stamp on the same body and signature fails
            {"timestamp": signed_at, "headers": {"X-Slack-Request-Timestamp": str(int(signed_at) + 1)}},
            "does not match",
        ),
        ({"timestamp": time.time() - 360}, "s old, outside the 300 s window"),
        ({"timestamp": time.time() + 360}, "s in the future, outside the 300 s window"),
    ]
    for options, reason in cases:
        answer = deliver(running.url(), payload, SECRET, **options)
        assert answer.status == 401, options
        assert reason in answer.body["error"], answer.body
    assert deliver(running.url(), payload, OTHER_SECRET).status == 401
    # The signature covers the body: a tampered body fails even with the original headers.
    stamp = str(int(time.time()))
    signed = sign(SECRET, stamp, json.dumps(payload).encode())
    tampered = json.dumps(event_callback(message("changed"))).encode()
    answer = deliver(
        running.url(), tampered, SECRET, headers={"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signed}
    )
    assert answer.status == 401
    assert running.inbox() == []
    with running.gateway.read() as store:
        assert store.list_sessions() == []


# -- retries and duplicates --------------------------------------------------------------------------------------


def test_retries_and_the_app_mention_copy_of_a_message_run_one_turn(start_slack: StartSlack, slack: FakeSlack) -> None:
    running = start_slack()
    event = message("<@UBOT> deploy?", ts=TS)
    answers = [
        running.post(event, event_id="Ev1"),
        running.post(event, event_id="Ev1", retry=(1, "http_timeout")),
        running.post(app_mention("deploy?", ts=TS), event_id="Ev2"),
        running.post(event, event_id="Ev1", retry=(2, "http_error")),
    ]
    assert [a.status for a in answers] == [200, 200, 200, 200]
    assert [a.body["duplicate"] for a in answers] == [False, True, True, True]
    assert {a.body["routing_key"] for a in answers} == {f"agent:main:slack.T1~main:group:C1:{TS}"}
    assert running.inbox() == [(f"T1:C1:{TS}", f"agent:main:slack.T1~main:group:C1:{TS}")]
    assert slack.take().text == "echo: deploy?"
    assert running.gateway.wait_idle()
    assert slack.nothing_more()
    assert running.transcript(answers[0].body["routing_key"]) == [("user", "deploy?"), ("assistant", "echo: deploy?")]


def test_a_retry_reason_that_is_not_utf_8_is_logged_escaped(
    start_slack: StartSlack, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_slack()
    caplog.set_level(logging.INFO)
    answer = running.post(message("hi", ts=TS), event_id="Ev9", retry=(1, "\xff\xfe timeout"))  # sent as latin-1
    assert answer.status == 200
    lines = [record.getMessage() for record in caplog.records if "retry" in record.getMessage()]
    assert len(lines) == 1
    lines[0].encode("utf-8")  # a log file written as UTF-8 takes it (no lone surrogate)
    assert "\\udcff" in lines[0]
    assert slack.take().text == "echo: hi"


def test_the_mention_arriving_first_gives_the_same_key_as_the_message_would(start_slack: StartSlack) -> None:
    running = start_slack(reply_in_thread=False)
    for channel, channel_type in (("C5", "channel"), ("G5", "group"), ("D5", "im")):
        mention = running.post(app_mention("hi", channel=channel), event_id=f"EvM{channel}")
        copy = running.post(message("<@UBOT> hi", channel=channel, channel_type=channel_type), event_id=f"Ev{channel}")
        assert mention.body["duplicate"] is False
        assert copy.body == {"ok": True, "duplicate": True, "routing_key": mention.body["routing_key"]}


def test_the_200_comes_after_the_durable_commit_and_well_inside_three_seconds(start_slack: StartSlack) -> None:
    agent = GatedAgent()
    running = start_slack(agent=agent)
    try:
        answer = running.post(message("durable?", channel="D1", channel_type="im"))
        assert answer.status == 200
        assert answer.seconds < 1.0  # Slack gives up after 3 s
        # The turn has not even finished, but the message is already committed.
        assert inbox_rows(running.db) == [(f"T1:D1:{TS}", "pending")]
    finally:
        agent.release.set()
    assert running.gateway.wait_idle()


def test_an_event_that_cannot_be_stored_gets_a_503_that_slack_retries(
    start_slack: StartSlack, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_slack()
    running.gateway.stop()  # the store is gone: accept fails
    with caplog.at_level(logging.ERROR, logger="platforms.slack"):
        outcomes = deliver_until_acknowledged(running.url(), event_callback(message("lost?")), SECRET)
    assert outcomes == [503, 503, 503, 503]
    assert f"could not accept message T1:C1:{TS}" in caplog.text


def test_slack_stops_retrying_a_refused_payload(start_slack: StartSlack) -> None:
    running = start_slack()
    broken = event_callback({"type": "message", "channel": "C1", "user": "U1", "text": "hi"})  # no ts
    assert deliver_until_acknowledged(running.url(), broken, SECRET) == [400]
    assert deliver_until_acknowledged(running.url(), event_callback(message("ok")), SECRET) == [200]


# -- what is skipped and how text is read -------------------------------------------------------------------------


def test_bot_own_edited_deleted_and_non_message_events_are_skipped_with_a_log_line(
    start_slack: StartSlack, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_slack()
    skipped = [
        (message("beep", bot_id="B9", subtype="bot_message"), "a bot's message"),
        (message("from another app", bot_id="B9"), "a bot's message"),
        (message("my own words", user="UBOT"), "our own message"),
        (message("", subtype="message_changed", message={"text": "edited"}), "a message_changed event"),
        (message("", subtype="message_deleted", deleted_ts=TS), "a message_deleted event"),
        (message("<@U1> has joined the channel", subtype="channel_join"), "'channel_join' message is not user text"),
        ({"type": "reaction_added", "user": "U1", "reaction": "+1"}, "'reaction_added' event is not a message"),
        ({"type": "channel_created", "channel": {"id": "C9", "name": "new"}}, "'channel_created' event"),
        (message("   "), "a message without text or files"),
    ]
    with caplog.at_level(logging.DEBUG, logger="platforms.slack"):
        for event, reason in skipped:
            answer = running.post(event)
            assert answer.status == 200, event
            assert reason in answer.body["ignored"]
            assert any(reason in r.getMessage() and "skipped event" in r.getMessage() for r in caplog.records)
    levels = {
        r.getMessage().rpartition(": ")[2]: r.levelno for r in caplog.records if "skipped event" in r.getMessage()
    }
    # Our own replies come back as events all the time: those lines stay at debug, edits and the rest at info.
    assert levels["our own message"] == levels["a bot's message (ours or another app's)"] == logging.DEBUG
    assert levels["a message_changed event (edits and deletions do not start turns)"] == logging.INFO
    assert running.inbox() == []
    assert deliver(running.url(), {"type": "app_rate_limited", "team_id": "T1"}, SECRET).status == 200


def test_entities_are_decoded_our_mention_is_dropped_files_get_stand_ins_and_replies_are_escaped(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack()
    running.post(message("<@UBOT> is 1 &lt; 2 &amp;&amp; 3 &gt; 2? ask <@U2>", channel="D1", channel_type="im"))
    assert slack.take().text == "echo: is 1 &lt; 2 &amp;&amp; 3 &gt; 2? ask &lt;@U2&gt;"
    files = [{"name": "plot.png", "mimetype": "image/png"}, {"name": "notes.pdf", "mimetype": "application/pdf"}]
    running.post(message("", channel="D1", channel_type="im", ts=LATER_TS, subtype="file_share", files=files))
    assert slack.take().text == "echo: [image: plot.png]\n[file: notes.pdf]"
    transcript = running.transcript("agent:main:slack.T1~main:dm:D1")
    assert transcript[0] == ("user", "is 1 < 2 && 3 > 2? ask <@U2>")


# -- files ---------------------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(120))
FAKE_FILES = FetchSettings(hosts=["127.0.0.1"], allow_private=["127.0.0.1"])  # the fake serves files on loopback


def shared(text: str, *files: Mapping[str, Any], ts: str = TS, channel: str = "D1") -> dict[str, Any]:
    """A ``file_share`` message in a DM carrying ``files``."""
    return message(text, channel=channel, channel_type="im", ts=ts, subtype="file_share", files=list(files))


def test_a_shared_file_is_downloaded_with_the_bot_token_before_the_event_is_acknowledged(
    start_slack: StartSlack, slack: FakeSlack, tmp_path: Path
) -> None:
    running = start_slack(fetch=FAKE_FILES)
    answer = running.post(shared("what is this?", slack.add_file("F1", PNG, name="plot.png", mimetype="image/png")))
    assert answer.status == 200
    assert slack.downloads == [Download(file_id="F1", token=TOKEN, status=200)]
    digest = hashlib.sha256(PNG).hexdigest()
    cached = tmp_path / "media" / digest[:2] / f"{digest}.png"
    assert cached.read_bytes() == PNG
    # The acknowledged inbox row already names the saved file.
    (message,) = inbound_messages(running.gateway, "slack")
    (attachment,) = message.attachments
    assert (attachment.kind, attachment.name, attachment.size, attachment.sha256, attachment.path) == (
        "image",
        "plot.png",
        len(PNG),
        digest,
        str(cached),
    )
    assert attachment.source_url is None  # a private URL is useless without the token
    assert slack.take().text == (
        "echo: what is this?\n[image: plot.png]\n"
        f"[attached image plot.png (image/png, {len(PNG)} bytes), saved at {cached}]"
    )
    session = running.gateway.session_for("agent:main:slack.T1~main:dm:D1")
    assert session is not None
    with running.gateway.read() as store:
        (row,) = store.attachments.for_session(session)
    assert (row.sha256, row.error) == (digest, None)


def test_a_file_over_the_limit_is_refused_without_being_fetched_and_the_text_still_runs(
    start_slack: StartSlack, slack: FakeSlack, tmp_path: Path
) -> None:
    running = start_slack(fetch=FAKE_FILES, media=MediaConfig(max_bytes=1024))
    big = slack.add_file("F2", bytes(4096), name="scan.pdf", mimetype="application/pdf")
    assert running.post(shared("please read", big)).status == 200
    assert slack.take().text == (
        "I could not read scan.pdf: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: please read\n[file: scan.pdf]\n[document scan.pdf was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert slack.downloads == []
    # A file that states a small size but sends more is cut off at the limit and refused all the same.
    liar = slack.add_file("F3", bytes(4096), name="liar.pdf", mimetype="application/pdf", size=10)
    assert running.post(shared("and this", liar, ts=LATER_TS)).status == 200
    assert slack.take().text.startswith("I could not read liar.pdf: it is 4 KB, over the 1 KB limit.")
    assert [d.file_id for d in slack.downloads] == ["F3"]
    assert not (tmp_path / "media").exists()


def test_files_that_cannot_be_fetched_become_refused_attachments_that_say_why(
    start_slack: StartSlack, slack: FakeSlack, tmp_path: Path
) -> None:
    running = start_slack(fetch=FAKE_FILES)
    broken = slack.add_file("F4", b"abc", name="broken.txt", mimetype="text/plain")
    slack.fail_next_download(500)
    gone = slack.add_file("F5", b"abc", name="gone.txt", mimetype="text/plain")
    slack.remove_file("F5")
    elsewhere = slack.add_file("F6", PNG, name="other.png", mimetype="image/png", team="T2")  # not our workspace
    deleted = {"id": "F7", "mode": "tombstone", "name": "old.png", "mimetype": "image/png"}
    outside = slack.add_file("F8", PNG, name="leak.png", mimetype="image/png") | {
        "url_private_download": "https://files.example.com/leak.png"
    }
    running.post(shared("five files", broken, gone, elsewhere, deleted, outside))
    reply = slack.take().text
    assert reply.split("\n\n")[0] == (
        "I could not read broken.txt: its download failed (HTTP 500). "
        "I could not read gone.txt: its download failed (HTTP 404). "
        "I could not read other.png: Slack answered with its sign-in page instead of the file; give the app the "
        "files:read scope and reinstall it. "
        "I could not read old.png: it was deleted. "
        "I could not read leak.png: Slack offered it from an address outside slack.com, where the bot token is not "
        "sent."
    )
    assert reply.split("\n\n", 1)[1].startswith("echo: five files\n[file: broken.txt]")
    assert [(d.file_id, d.status) for d in slack.downloads] == [("F4", 500), ("F5", 404), ("F6", 200)]
    assert not (tmp_path / "media").exists()


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


def test_a_file_download_that_redirects_into_the_network_is_refused(
    slack: FakeSlack, start_gateway: StartGateway, canary: Canary, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The fake answers as "localhost" (its API origin, where the token goes) and only that name may be private, so
    # the canary on 127.0.0.1 is not allowed by the fake's own opt-in.
    hosts = use_hosts(monkeypatch)
    hosts["localhost"] = hosts["files.slack.com"] = hosts["files-origin.slack.com"] = "127.0.0.1"
    api = slack.api_base_url.replace("127.0.0.1", "localhost")
    fetch = FetchSettings(hosts=["localhost"], allow_private=["localhost", "files-origin.slack.com"])
    adapter = SlackAdapter(SlackConfig(port=0, api_base_url=api, apps=main_app(), fetch=fetch), environ={})
    running = Slack(adapter=adapter, gateway=start_gateway(adapter, tick_interval_s=0.1), db=tmp_path / "state.db")

    def on_localhost(file: dict[str, Any]) -> dict[str, Any]:
        return file | {"url_private_download": file["url_private_download"].replace("127.0.0.1", "localhost")}

    inside = on_localhost(slack.add_file("F1", b"x", name="inside.txt", mimetype="text/plain"))
    slack.redirect_download("F1", canary.url("/metrics"))
    rebound = on_localhost(slack.add_file("F2", b"x", name="rebound.txt", mimetype="text/plain"))
    slack.redirect_download("F2", canary.url("/x", host="files.slack.com"))  # Slack's name, this host's address
    fine = on_localhost(slack.add_file("F3", CANARY_BODY, name="fine.txt", mimetype="text/plain"))
    origin = on_localhost(slack.add_file("F4", b"x", name="origin.txt", mimetype="text/plain"))
    slack.redirect_download("F4", canary.url("/origin.txt", host="files-origin.slack.com"))  # Slack's, allowed
    assert running.post(shared("four files", inside, rebound, fine, origin)).status == 200
    reply = slack.take().text
    refused = "its address points into the bot's own network, which the bot does not fetch from"
    assert reply.split("\n\n")[0] == (
        f"I could not read inside.txt: {refused}. I could not read rebound.txt: {refused}."
    )
    assert reply.count(f"Its text:\n{CANARY_BODY.decode()}") == 2  # fine.txt and origin.txt, from allowed hosts
    assert [(d.file_id, d.status) for d in slack.downloads] == [("F1", 302), ("F2", 302), ("F3", 200), ("F4", 302)]
    assert canary.hits == ["/origin.txt"]


def test_a_file_named_only_by_its_id_is_looked_up_with_files_info(
    start_slack: StartSlack, slack: FakeSlack, tmp_path: Path
) -> None:
    running = start_slack(fetch=FAKE_FILES)
    slack.add_file("F9", b"col1,col2\n1,2\n", name="data.csv", mimetype="text/csv")
    running.post(
        shared("", {"id": "F9", "file_access": "check_file_info"}, {"id": "F10", "file_access": "check_file_info"})
    )
    reply = slack.take().text
    assert reply.startswith(
        "I could not read the document: Slack does not know it any more (deleted, or the app cannot see it)."
    )
    assert "[attached document data.csv (text/csv, 14 bytes), saved at " in reply
    assert "Its text:\ncol1,col2\n1,2\n" in reply
    assert [d.file_id for d in slack.downloads] == ["F9"]


class LogSeen(logging.Handler):
    """Sets ``seen`` once a record containing ``text`` is logged (from any thread)."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.INFO)
        self.text = text
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


def test_a_copy_arriving_while_the_first_downloads_waits_for_it_and_fetches_nothing(
    start_slack: StartSlack, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_slack(reply_in_thread=False, fetch=FAKE_FILES)
    file = slack.add_file("F11", PNG, name="plot.png", mimetype="image/png")
    release = slack.hold_downloads()
    event = message("<@UBOT> look", subtype="file_share", files=[file])
    mention = app_mention("look", ts=TS) | {"files": [file]}
    answers: dict[str, Answer] = {}
    waiting = LogSeen("is being fetched already")
    caplog.set_level(logging.INFO, logger="platforms.slack")
    logging.getLogger("platforms.slack").addHandler(waiting)

    def post(name: str, payload: dict[str, Any], event_id: str) -> None:
        answers[name] = running.post(payload, event_id=event_id)

    first = threading.Thread(target=post, args=("message", event, "Ev1"))
    second = threading.Thread(target=post, args=("mention", mention, "Ev2"))
    try:
        first.start()
        assert slack.download_arrived.wait(10)
        second.start()
        assert waiting.seen.wait(10), "the second copy never waited for the first"
    finally:
        release.set()
        first.join(10)
        second.join(10)
        logging.getLogger("platforms.slack").removeHandler(waiting)
    assert (answers["message"].status, answers["message"].body["duplicate"]) == (200, False)
    assert (answers["mention"].status, answers["mention"].body["duplicate"]) == (200, True)
    assert [d.file_id for d in slack.downloads] == ["F11"]
    assert slack.take().text.startswith("echo: look\n[image: plot.png]\n[attached image plot.png")
    assert running.gateway.wait_idle()
    assert slack.nothing_more()


def test_a_long_reply_is_split_into_posts_within_the_limit_in_its_thread(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack(max_message_chars=100, messages_per_second=1000.0)
    words = " ".join(f"w{i}<>" for i in range(60))  # escaping makes each word longer on the wire
    running.post(message(words))
    assert running.gateway.wait_idle()
    parts = list(slack.posted)
    assert len(parts) == 8
    assert all(len(p.text) <= 100 for p in parts)
    assert {(p.channel, p.thread_ts) for p in parts} == {("C1", TS)}
    assert " ".join(p.text for p in parts) == ("echo: " + words).replace("<", "&lt;").replace(">", "&gt;")


# -- sending failures --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_outbox_retries_a_429_and_honours_retry_after(start_slack: StartSlack, slack: FakeSlack) -> None:
    running = start_slack()
    slack.fail_next(status=429, retry_after="1")
    running.post(message("patience", channel="D1", channel_type="im"))
    posted = slack.take()
    assert posted.text == "echo: patience"
    first_attempt, delivered = slack.attempts[0], slack.attempts[-1]
    assert len(slack.attempts) == 2
    assert delivered - first_attempt >= 1.0
    assert slack.nothing_more()


@pytest.mark.slow
def test_the_outbox_retries_ratelimited_and_5xx_answers_and_delivers_once(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack()
    slack.fail_next(status=500)
    slack.fail_next(status=503)
    slack.fail_next(status=200, error="ratelimited")
    running.post(message("eventually", channel="D1", channel_type="im"))
    assert slack.take(timeout=15).text == "echo: eventually"
    assert len(slack.attempts) == 4
    assert slack.nothing_more()


def sender_for(slack: FakeSlack, **options: Any) -> SlackSender:
    config = SlackConfig(api_base_url=slack.api_base_url, apps=main_app(), **options)
    return SlackAdapter(config, environ={}).sender


def reply(text: str, **fields: Any) -> OutboundMessage:
    return OutboundMessage(platform="slack", text=text, account_id="main", **({"chat_id": "C1"} | fields))


def test_send_errors_carry_retry_after_and_name_the_fix(slack: FakeSlack) -> None:
    sender = sender_for(slack)
    cases: list[tuple[dict[str, Any], str, float | None]] = [
        ({"status": 429, "retry_after": "7"}, "asked to slow down (HTTP 429)", 7.0),
        ({"status": 200, "error": "ratelimited", "retry_after": "3"}, "asked to slow down (ratelimited)", 3.0),
        ({"status": 200, "error": "ratelimited"}, "asked to slow down (ratelimited)", 1.0),
        ({"status": 502}, "failed with HTTP 502", None),
        ({"status": 200, "error": "not_in_channel"}, "invite it with /invite", None),
        ({"status": 200, "error": "missing_scope"}, "chat:write scope", None),
        ({"status": 200, "error": "something_new"}, "'something_new': it will be retried with backoff", None),
    ]
    for number, (failure, text, retry_after) in enumerate(cases):
        slack.fail_next(**failure)
        with pytest.raises(SendError) as error:
            sender.send(reply("hi", chat_id=f"C{number}"))  # a channel each: a penalty pauses only its channel
        assert text in str(error.value)
        assert error.value.retry_after_s == retry_after
    bad_token = SlackAdapter(
        SlackConfig(
            api_base_url=slack.api_base_url, apps={"main": SlackApp(signing_secret=SECRET, bot_token="xoxb-x")}
        ),
        environ={},
    ).sender
    with pytest.raises(SendError, match="'invalid_auth': the bot token is not valid; check the app's bot_token"):
        bad_token.send(reply("hi"))
    with pytest.raises(SendError, match="no app 'gone' is configured"):
        sender.send(OutboundMessage(platform="slack", text="hi", account_id="gone", chat_id="C1"))
    assert sender.send(reply("   ")) is None  # nothing to say, nothing posted
    assert slack.posted == []


def test_a_partly_sent_reply_resumes_after_the_parts_already_posted(slack: FakeSlack) -> None:
    sender = sender_for(slack, max_message_chars=100, messages_per_second=1000.0)
    text = "\n\n".join(f"paragraph {i} " + "x" * 80 for i in range(3))
    slack.fail_next(status=500, after=1)
    with pytest.raises(SendError):
        sender.send(reply(text, thread_id=TS))
    assert [p.text.split()[1] for p in slack.posted] == ["0"]
    first_ts = slack.posted[0].ts
    assert sender.send(reply(text, thread_id=TS)) == first_ts
    assert [p.text.split()[1] for p in slack.posted] == ["0", "1", "2"]
    assert {p.thread_ts for p in slack.posted} == {TS}
    # A different reply with the same text later starts from the beginning.
    sender.send(reply(text, thread_id=TS, session_id="other"))
    assert len(slack.posted) == 6


def test_sends_to_one_channel_are_paced(slack: FakeSlack) -> None:
    sender = sender_for(slack, messages_per_second=20.0)
    started = time.monotonic()
    for i in range(6):  # a burst of 3, then 20 per second
        sender.send(reply(f"m{i}"))
    assert time.monotonic() - started >= 0.14
    sender.send(OutboundMessage(platform="slack", text="elsewhere", account_id="main", chat_id="C2"))
    assert [p.channel for p in slack.posted] == ["C1"] * 6 + ["C2"]


# -- handoff threads ---------------------------------------------------------------------------------------------


def test_create_thread_posts_an_anchor_and_returns_its_ts(slack: FakeSlack) -> None:
    sender = sender_for(slack)
    assert isinstance(sender, ThreadCreator)
    thread = sender.create_thread("C1", "auth <refactor>", account_id="main")
    anchor = slack.take()
    assert (anchor.channel, anchor.text, anchor.thread_ts, anchor.ts) == ("C1", "auth &lt;refactor&gt;", None, thread)
    assert sender.create_thread("C1", "only one app", account_id="") == slack.take().ts
    slack.fail_next(status=200, error="not_in_channel")
    with pytest.raises(SendError, match="invite it"):
        sender.create_thread("C1", "t", account_id="main")


def test_a_handoff_to_slack_opens_a_thread_and_speaks_there(tmp_path: Path, slack: FakeSlack) -> None:
    adapter = SlackAdapter(SlackConfig(port=0, api_base_url=slack.api_base_url, apps=main_app()), environ={})
    cli = FakePlatform("cli")
    gateway = Gateway(tmp_path / "state.db", senders=[cli, *adapter.senders()], tick_interval_s=0.1)
    cli.attach(gateway)
    adapter.start(GatewayInbox(gateway))
    try:
        deliver(f"{adapter.url}/slack/events/main", event_callback(message("/sethome")), SECRET)
        assert slack.take().text == "This chat is now the home channel for slack."
        cli.push("let us refactor auth", chat_id="terminal")
        assert cli.pop().text == "echo: let us refactor auth"
        assert gateway.wait_idle()  # the reply arrives before the turn is over: a handoff then is refused
        cli.push("/handoff slack", chat_id="terminal")
        anchor = slack.take()
        first = slack.take()
        assert (anchor.channel, anchor.thread_ts) == ("C1", None)
        assert (first.channel, first.thread_ts) == ("C1", anchor.ts)
        assert first.text.startswith("echo: [handoff] This conversation was just handed off here from cli.")
        assert cli.pop().text.startswith("Handed off to slack (chat ")
    finally:
        adapter.stop()
        gateway.stop()


# -- hostile input -----------------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_fields = st.sampled_from(["type", "channel", "user", "text", "ts", "thread_ts", "channel_type", "subtype", "files"])
_texts = st.one_of(
    st.text(max_size=50),
    st.just("x" * 70_000),  # over the test's max_body_bytes: 413
    st.just("y " * 15_000),  # under it: accepted, and its echo is split into many posts
    st.just("\x00\u202e<@UBOT>&amp;<script>"),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10),
)


@st.composite
def _hostile(draw: st.DrawFn) -> tuple[bytes, str]:
    """A request body and how it is signed: a mangled message, a random JSON value, or raw bytes."""
    kind = draw(st.sampled_from(["event", "envelope", "json", "bytes"]))
    if kind == "event":
        event: dict[str, Any] = message(draw(_texts), ts=draw(st.sampled_from([TS, "1.2", "x", "9" * 30])))
        for name in draw(st.lists(_fields, max_size=3)):
            if draw(st.booleans()):
                event.pop(name, None)
            else:
                event[name] = draw(_json_values)
        body = json.dumps(event_callback(event, team=draw(st.sampled_from(["T1", "t-1", ""])))).encode()
    elif kind == "envelope":
        envelope = event_callback(message("hi"))
        envelope[draw(st.sampled_from(["type", "event", "team_id", "authorizations", "event_id"]))] = draw(_json_values)
        body = json.dumps(envelope).encode()
    elif kind == "json":
        body = json.dumps(draw(_json_values)).encode()
    else:
        body = draw(st.binary(max_size=64)) + draw(st.sampled_from([b"", b"\xff\xfe", b'{"type": "\xc3\x28"}']))
    signing = draw(st.sampled_from(["good", "good", "good", "other", "stale", "none"]))
    return body, signing


@pytest.mark.slow
def test_hostile_payloads_get_a_4xx_or_a_skip_a_log_line_and_the_adapter_keeps_working(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack(max_body_bytes=64 * 1024, messages_per_second=1000.0)
    handler = LogRecords()
    records = handler.records
    logger = logging.getLogger("platforms.slack")
    logger.addHandler(handler)
    previous_level = logger.level
    logger.setLevel(logging.DEBUG)
    statuses: set[int] = set()

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=_hostile())
    def check(case: tuple[bytes, str]) -> None:
        body, signing = case
        records.clear()
        options: dict[str, Any] = {}
        secret = OTHER_SECRET if signing == "other" else SECRET
        if signing == "stale":
            options["timestamp"] = time.time() - 3600
        if signing == "none":
            options["headers"] = {"X-Slack-Signature": None}
        answer = deliver(running.url(), body, secret, **options)
        statuses.add(answer.status)
        assert answer.status in (200, 400, 401, 403, 413), (answer, body[:200])
        if answer.status != 200:
            assert any("refused a request" in r.getMessage() for r in records)
            assert "error" in answer.body
        elif answer.body.get("ignored"):
            assert any("skipped event" in r.getMessage() or "ignored a" in r.getMessage() for r in records)

    try:
        check()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
    assert {200, 400, 401} <= statuses
    # Nothing died: a good message still runs a turn and its reply arrives.
    slack.drain()
    answer = running.post(message("still there?", channel="D99", channel_type="im", ts="1764469999.000001"))
    assert answer.status == 200
    assert running.gateway.wait_idle(timeout=60)
    assert "echo: still there?" in [posted.text for posted in slack.drain()]


def test_an_oversized_body_is_413(start_slack: StartSlack) -> None:
    running = start_slack(max_body_bytes=2048)
    answer = running.post(message("x" * 5000))
    assert answer.status == 413
    assert "larger than 2048 bytes" in answer.body["error"]


# -- configuration -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"apps": {"a": {"bot_token": TOKEN}}}, "platforms.slack.apps.a.signing_secret", "is required"),
        ({"apps": {"a": {"signing_secret": SECRET}}}, "platforms.slack.apps.a.bot_token", "is required"),
        (
            {"apps": {"a": {"signing_secret": SECRET, "signing_secret_env": "S", "bot_token": TOKEN}}},
            "platforms.slack.apps.a.signing_secret_env",
            "not both",
        ),
        (
            {"apps": {"a": {"signing_secret": SECRET, "bot_token_env": "1X"}}},
            "platforms.slack.apps.a.bot_token_env",
            "environment variable name",
        ),
        (
            {"apps": {"a": {"signing_secret": " s ", "bot_token": TOKEN}}},
            "platforms.slack.apps.a.signing_secret",
            "spaces",
        ),
        (
            {"apps": {"a b": {"signing_secret": SECRET, "bot_token": TOKEN}}},
            "platforms.slack.apps.a b",
            "an app name is 1 to 64",
        ),
        (
            {"apps": {"a": {"signing_secret": SECRET, "bot_token": TOKEN, "team_id": "team one"}}},
            "platforms.slack.apps.a.team_id",
            "workspace id",
        ),
        ({"port": 70000}, "platforms.slack.port", "not a TCP port"),
        ({"host": " "}, "platforms.slack.host", "must not be empty"),
        ({"api_base_url": "slack.com/api"}, "platforms.slack.api_base_url", "http(s) URL"),
        ({"max_message_chars": 50_000}, "platforms.slack.max_message_chars", "between 100 and 40000"),
        ({"messages_per_second": 0}, "platforms.slack.messages_per_second", "positive"),
        ({"max_body_bytes": 10}, "platforms.slack.max_body_bytes", "at least 1024"),
        ({"http_timeout_s": 0}, "platforms.slack.http_timeout_s", "positive"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, registry.config_type("slack"))  # as the daemon loads config.yaml
    assert error.value.path == path
    assert problem in str(error.value)


def test_unknown_config_fields_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError, match="bot_tokn"):
        msgspec.convert({"apps": {"a": {"signing_secret": SECRET, "bot_tokn": TOKEN}}}, SlackConfig)


def test_secrets_from_the_environment_are_read_when_the_adapter_is_built(slack: FakeSlack) -> None:
    config = SlackConfig(
        api_base_url=slack.api_base_url,
        apps={"env": SlackApp(signing_secret_env="SLACK_SIGNING", bot_token_env="SLACK_BOT")},
    )
    adapter = SlackAdapter(config, environ={"SLACK_SIGNING": SECRET, "SLACK_BOT": TOKEN})
    assert "(signed, signing secret from $SLACK_SIGNING, bot token from $SLACK_BOT)" in adapter.describe()[0]
    assert adapter.sender.send(OutboundMessage(platform="slack", text="hi", account_id="env", chat_id="C1"))
    assert slack.take().token == TOKEN
    with pytest.raises(ConfigError, match="SLACK_BOT is not set") as missing:
        SlackAdapter(config, environ={"SLACK_SIGNING": SECRET})
    assert missing.value.path == "platforms.slack.apps.env.bot_token_env"


def test_the_registry_builds_the_adapter_and_the_banner_names_each_request_url(start_slack: StartSlack) -> None:
    empty: Adapter = registry.build("slack", SlackConfig(), {})
    assert empty.capabilities.threads
    assert empty.capabilities.max_message_chars == 3900
    (line,) = empty.describe()
    assert line.startswith("Slack: http://127.0.0.1:8647 has no apps; add one under platforms.slack.apps")
    running = start_slack()
    base = running.adapter.url
    assert not base.endswith(":0")
    assert running.adapter.describe() == [
        f"Slack app 'main': Events API Request URL POST {base}/slack/events/main (signed, signing secret in "
        f"config.yaml, bot token in config.yaml); Interactivity Request URL POST {base}/slack/actions/main (approval "
        f"buttons); replies via {running.adapter.config.api_base_url}/chat.postMessage "
        "(top-level channel messages answered in a thread); files are downloaded with the bot token (files:read "
        "scope) as attachments"
    ]


def test_a_busy_port_is_a_platform_error_naming_the_address(start_slack: StartSlack) -> None:
    running = start_slack()
    taken = int(running.adapter.url.rsplit(":", 1)[1])
    second = SlackAdapter(SlackConfig(port=taken, apps=main_app()), environ={})
    with pytest.raises(PlatformError, match=f"cannot listen on 127.0.0.1:{taken}"):
        second.start(GatewayInbox(running.gateway))


# -- a crash between accept and reply -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, slack: FakeSlack) -> None:
    db = tmp_path / "state.db"
    config = SlackConfig(port=0, api_base_url=slack.api_base_url, apps=main_app())
    event = event_callback(message("survive", channel="D1", channel_type="im"), event_id="EvCrash")
    worker = AdapterWorker.start(db, "slack", config, agent="hold")
    try:
        assert deliver_until_acknowledged(worker.url() + "/slack/events/main", event, SECRET) == [200]
        assert wait_for_inbox(db, 1) == [(f"T1:D1:{TS}", "pending")]
    finally:
        worker.kill()
    assert slack.posted == []
    worker = AdapterWorker.start(db, "slack", config, agent="echo")
    try:
        posted = slack.take(timeout=20)
        assert (posted.channel, posted.text) == ("D1", "echo: survive")
        # Slack, unsure of the first answer, retries the event after the restart: it is recognised.
        answer = deliver(worker.url() + "/slack/events/main", event, SECRET, retry=(1, "http_timeout"))
        assert (answer.status, answer.body["duplicate"]) == (200, True)
        assert slack.nothing_more(0.3)
    finally:
        worker.stop()
    assert len(slack.posted) == 1


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_shares_the_markdown_as_one_file_with_the_external_upload(
    start_slack: StartSlack, slack: FakeSlack
) -> None:
    running = start_slack()
    running.post(message("hello", channel="D1", channel_type="im"))
    assert slack.take().text == "echo: hello"
    running.post(message("/save", channel="D1", channel_type="im", ts=LATER_TS))
    # The upload is three requests on the outbox's lane: wait for the share itself, not only for an idle gateway.
    poll_until(lambda: bool(slack.shared), timeout=20, what="the file was not shared")
    assert running.gateway.wait_idle()
    (shared,) = slack.shared
    assert (shared.token, shared.channel, shared.thread_ts) == (TOKEN, "D1", None)
    assert shared.filename.endswith(".md")
    assert shared.title == shared.filename
    markdown = shared.data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert shared.initial_comment is not None
    assert shared.initial_comment.endswith("the conversation as Markdown (2 messages, 1 part(s)).")
    assert slack.share_calls == ["getUploadURLExternal", "upload", "completeUploadExternal"]
    assert slack.nothing_more()  # the file instead of the text, not beside it


def test_save_sends_the_text_when_the_app_may_not_upload_files(
    start_slack: StartSlack, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_slack()
    running.post(message("hello", channel="D1", channel_type="im"))
    assert slack.take().text == "echo: hello"
    slack.fail_next_share("getUploadURLExternal", {"ok": False, "error": "missing_scope", "needed": "files:write"})
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        running.post(message("/save", channel="D1", channel_type="im", ts=LATER_TS))
        text = slack.take().text
    assert text.index("hello") < text.index("echo: hello")  # the Markdown as text
    assert slack.shared == []
    assert "files:write" in caplog.text
    assert "the reply's text is sent instead" in caplog.text


def test_an_upload_url_off_slack_is_not_used(start_slack: StartSlack, slack: FakeSlack) -> None:
    running = start_slack()
    running.post(message("hello", channel="D1", channel_type="im"))
    assert slack.take().text == "echo: hello"
    assert slack.host.url.startswith("http://127.0.0.1:")
    other_origin = slack.host.url.replace("127.0.0.1", "localhost")  # the same fake, under a name that is not Slack's
    elsewhere = {"ok": True, "upload_url": f"{other_origin}/upload/v1/F1", "file_id": "F1"}
    slack.fail_next_share("getUploadURLExternal", elsewhere)
    running.post(message("/save", channel="D1", channel_type="im", ts=LATER_TS))
    assert "echo: hello" in slack.take().text
    assert slack.share_calls == ["getUploadURLExternal"]  # the file's bytes never went to that URL
