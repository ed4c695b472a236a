"""The Teams platform against a real gateway, a real loopback messaging endpoint and the fake Microsoft of
``teams_fake``.

Activities are built and signed by the fake (RS256 JWTs with keys it publishes through its own OpenID metadata),
and replies are read back from its Bot Connector, so both wire directions are checked end to end.
"""

from __future__ import annotations

import hashlib
import json
import logging
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
from hermes_actors.testing import FakePlatform, GatedAgent
from platforms import registry
from platforms.base import Adapter, SendError, ThreadCreator
from platforms.support.fetch_policy import FetchSettings
from platforms.teams import TeamsAdapter, TeamsBot, TeamsConfig
from tests.platforms.crash import AdapterWorker, inbox_rows, wait_for_inbox
from tests.platforms.fetch_canary import CANARY_BODY, Canary, running_canary, use_hosts
from tests.platforms.support import LogRecords, RunningAdapter, StartGateway, inbound_messages
from tests.platforms.teams_fake import Answer, FakeTeams, conversation_update, deliver, message, new_key

APP = "8a2e5c1f-0b6d-4e2a-9c31-5f7d8e9a0b1c"
OTHER_APP = "1b3d5f7a-9c0e-4b2d-8f6a-0c2e4a6b8d0f"
PASSWORD = "kX8Q~client.secret-main"
OTHER_PASSWORD = "pL2W~client.secret-other"
CHANNEL = "19:3b0f1c2a9d8e4f5a@thread.tacv2"
FAKE_FILES = FetchSettings(hosts=["127.0.0.1"], allow_private=["127.0.0.1"])  # the fake serves files on loopback
REFUSED_INSIDE = "its address points into the bot's own network, which the bot does not fetch from"


@pytest.fixture
def teams() -> Iterator[FakeTeams]:
    fake = FakeTeams(passwords={APP: PASSWORD, OTHER_APP: OTHER_PASSWORD}).start()
    yield fake
    fake.stop()


def main_bot(**fields: Any) -> dict[str, TeamsBot]:
    return {"main": TeamsBot(app_id=APP, app_password=PASSWORD, **fields)}


def config_for(teams: FakeTeams, bots: Mapping[str, TeamsBot] | None = None, **options: Any) -> TeamsConfig:
    fields: dict[str, Any] = {"port": 0, "openid_metadata_url": teams.metadata_url, "login_url": teams.login_url}
    return TeamsConfig(bots=dict(bots or main_bot()), **(fields | options))


@dataclass(frozen=True)
class Teams(RunningAdapter[TeamsAdapter]):
    fake: FakeTeams
    db: Path

    def url(self, bot: str = "main") -> str:
        return f"{self.adapter.url}/teams/messages/{bot}"

    def say(self, text: str, *, bot: str = "main", app_id: str = APP, **fields: Any) -> Answer:
        """A user's message to ``bot``, signed by the Bot Connector."""
        activity = message(text, bot_app_id=app_id, service_url=self.fake.service_url, **fields)
        return deliver(self.url(bot), activity, self.fake.token(app_id))

    def inbox(self) -> list[tuple[str, ...]]:
        return self.inbox_rows("platform_message_id", "routing_key")


StartTeams = Callable[..., Teams]


@pytest.fixture
def start_teams(tmp_path: Path, teams: FakeTeams, start_gateway: StartGateway) -> StartTeams:
    def start(
        bots: Mapping[str, TeamsBot] | None = None,
        *,
        agent: EchoAgent | None = None,
        media: MediaConfig | None = None,
        **options: Any,
    ) -> Teams:
        adapter = TeamsAdapter(config_for(teams, bots, **options), environ={})
        gateway = start_gateway(adapter, agent=agent, tick_interval_s=0.1, media=media)
        return Teams(adapter=adapter, gateway=gateway, fake=teams, db=tmp_path / "state.db")

    return start


# -- keys and where replies go -----------------------------------------------------------------------------------


def test_a_personal_chat_is_keyed_by_tenant_and_bot_and_answered_as_a_reply_with_a_cached_token(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams()
    answer = running.say("hello", activity_id="1001")
    assert answer.status == 200
    assert answer.body == {
        "ok": True,
        "duplicate": False,
        "routing_key": "agent:main:teams.tenant-1~main:dm:a%3A1personal-chat-id",
    }
    posted = teams.take()
    assert (posted.app_id, posted.conversation, posted.reply_to, posted.text) == (
        APP,
        "a:1personal-chat-id",
        "1001",
        "echo: hello",
    )
    assert posted.body["replyToId"] == "1001"
    running.say("again", activity_id="1002")
    assert teams.take().text == "echo: again"
    # One client-credentials token served both replies, asked of the botframework.com tenant with the right scope.
    assert [(r["tenant"], r["client_id"], r["scope"]) for r in teams.token_requests] == [
        ("botframework.com", APP, "https://api.botframework.com/.default")
    ]
    assert running.transcript("agent:main:teams.tenant-1~main:dm:a%3A1personal-chat-id") == [
        ("user", "hello"),
        ("assistant", "echo: hello"),
        ("user", "again"),
        ("assistant", "echo: again"),
    ]


def test_a_channel_thread_is_one_shared_session_and_replies_stay_in_it_without_our_mention(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams()
    mention = {"type": "mention", "text": "<at>Hermes</at>", "mentioned": {"id": f"28:{APP}", "name": "Hermes"}}
    thread = f"{CHANNEL};messageid=1764460800001"
    first = running.say(
        "<at>Hermes</at> plan the release with <at>Bob</at>",
        conversation_type="channel",
        conversation_id=thread,
        activity_id="1764460800001",
        entities=[mention],
    )
    key = "agent:main:teams.tenant-1~main:channel:19%3A3b0f1c2a9d8e4f5a@thread.tacv2:1764460800001"
    assert first.body["routing_key"] == key
    posted = teams.take()
    assert (posted.conversation, posted.reply_to, posted.text) == (
        thread,
        "1764460800001",
        "echo: plan the release with @Bob",
    )
    second = running.say(
        "I'll help",
        conversation_type="channel",
        conversation_id=thread,
        user="29:bob",
        aad="aad-bob",
        user_name="Bob",
        activity_id="1764460800002",
    )
    assert second.body["routing_key"] == key
    assert teams.take().conversation == thread
    assert running.transcript(key)[2] == ("user", "I'll help")


def test_group_chat_members_have_sessions_of_their_own(start_teams: StartTeams, teams: FakeTeams) -> None:
    running = start_teams()
    group = "19:group-chat-id@thread.v2"
    alice = running.say("mine", conversation_type="groupChat", conversation_id=group)
    bob = running.say("mine too", conversation_type="groupChat", conversation_id=group, user="29:bob", aad="aad-bob")
    assert alice.body["routing_key"] == "agent:main:teams.tenant-1~main:group:19%3Agroup-chat-id@thread.v2:aad-alice"
    assert bob.body["routing_key"] == "agent:main:teams.tenant-1~main:group:19%3Agroup-chat-id@thread.v2:aad-bob"
    assert {p.conversation for p in (teams.take(), teams.take())} == {group}


def test_two_tenants_and_two_bots_with_identical_ids_never_share_a_session(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    bots = {**main_bot(), "other": TeamsBot(app_id=OTHER_APP, app_password=OTHER_PASSWORD)}
    running = start_teams(bots)
    keys = [
        running.say("same", tenant="tenant-1").body["routing_key"],
        running.say("same", tenant="tenant-2").body["routing_key"],
        running.say("same", bot="other", app_id=OTHER_APP).body["routing_key"],
    ]
    assert keys == [
        "agent:main:teams.tenant-1~main:dm:a%3A1personal-chat-id",
        "agent:main:teams.tenant-2~main:dm:a%3A1personal-chat-id",
        "agent:main:teams.tenant-1~other:dm:a%3A1personal-chat-id",
    ]
    assert running.gateway.wait_idle()
    assert len({running.gateway.session_for(key) for key in keys} - {None}) == 3
    assert sorted(p.app_id for p in (teams.take(), teams.take(), teams.take())) == sorted([APP, APP, OTHER_APP])


def test_a_single_tenant_bot_refuses_other_tenants_and_takes_its_token_from_its_own(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams(main_bot(tenant_id="tenant-1"))
    refused = running.say("let me in", tenant="tenant-9")
    assert (refused.status, refused.body) == (403, {"error": "bot 'main' serves tenant tenant-1 only, not tenant-9"})
    assert running.say("hi").status == 200
    teams.take()
    assert [r["tenant"] for r in teams.token_requests] == ["tenant-1"]
    assert len(running.inbox()) == 1


# -- the Bot Connector's token -----------------------------------------------------------------------------------


def test_forged_stale_and_misdirected_tokens_are_refused_and_nothing_is_stored(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams(keys_min_refresh_s=0)
    activity = message("let me in", bot_app_id=APP, service_url=teams.service_url)
    now = time.time()
    cases: list[tuple[str | None, str]] = [
        (None, "the Authorization header is missing"),
        ("not-a-jwt", "not a JWT"),
        (teams.token(APP, key=new_key()), "signature does not verify"),
        (teams.token(APP, issuer="https://evil.example.com"), "issuer is not https://api.botframework.com"),
        (teams.token(APP, audience=OTHER_APP), "for another bot"),
        (teams.token(APP, issued_at=now - 7200), "has expired"),
        (teams.token(APP, not_before=now + 3600), "not valid yet"),
        (teams.token(APP, kid="key-unknown"), "not one of the Bot Connector's keys"),
        (teams.token(APP, service_url="https://attacker.example.com/"), "serviceUrl claim"),
        (teams.token(APP, drop=("serviceurl",)), "serviceUrl claim"),
        (teams.token(APP, drop=("exp",)), "not valid"),
    ]
    for token, reason in cases:
        answer = deliver(running.url(), activity, token)
        assert answer.status == 401, reason
        assert reason in answer.body["error"], answer.body
    hs256 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImtleS0xIn0.e30.ZRrHA1JJJW8opsbCGfG_HACGpVUMN_a9IV7pAx_Zmeo"
    answer = deliver(running.url(), activity, hs256)
    assert (answer.status, "signed with 'HS256'" in answer.body["error"]) == (401, True)
    assert deliver(running.url(), activity, teams.token(APP), headers={"Authorization": "Basic abc"}).status == 401
    # A key that does not endorse the activity's channel cannot sign for it.
    teams.rotate(endorsements=("skype",))
    answer = deliver(running.url(), activity, teams.token(APP))
    assert (answer.status, answer.body["error"]) == (403, "the signing key does not endorse channel 'msteams'")
    assert running.inbox() == []
    with running.gateway.read() as store:
        assert store.list_sessions() == []


def test_unknown_key_ids_do_not_make_every_request_fetch_the_keys(start_teams: StartTeams, teams: FakeTeams) -> None:
    running = start_teams(keys_min_refresh_s=3600)
    assert running.say("first").status == 200
    assert teams.key_fetches == 1
    for _ in range(3):
        answer = deliver(
            running.url(), message("x", bot_app_id=APP, service_url=teams.service_url), teams.token(APP, kid="k9")
        )
        assert answer.status == 401
    assert teams.key_fetches == 1  # within keys_min_refresh_s, unknown ids are refused from the cache


def test_a_rotated_key_is_fetched_when_a_token_names_it(start_teams: StartTeams, teams: FakeTeams) -> None:
    running = start_teams(keys_min_refresh_s=0)
    assert running.say("before").status == 200
    assert teams.key_fetches == 1
    teams.rotate()
    assert running.say("after the rotation").status == 200
    assert running.say("and again").status == 200
    assert teams.key_fetches == 2  # the new key is cached from then on


def test_keys_that_cannot_be_fetched_give_a_503_and_a_log_line(
    teams: FakeTeams, start_gateway: StartGateway, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(teams, openid_metadata_url=teams.host.url + "/nowhere")
    adapter = TeamsAdapter(config, environ={})
    start_gateway(adapter)
    activity = message("hi", bot_app_id=APP, service_url=teams.service_url)
    with caplog.at_level(logging.WARNING, logger="platforms.teams"):
        answer = deliver(f"{adapter.url}/teams/messages/main", activity, teams.token(APP))
    assert answer.status == 503
    assert "could not check a request's token: the signing keys could not be fetched" in caplog.text


# -- retries, replays and what is skipped ---------------------------------------------------------------------


def test_a_replayed_activity_runs_one_turn(start_teams: StartTeams, teams: FakeTeams) -> None:
    running = start_teams()
    activity = message("deploy?", bot_app_id=APP, service_url=teams.service_url, activity_id="77")
    answers = [deliver(running.url(), activity, teams.token(APP)) for _ in range(3)]
    assert [a.body["duplicate"] for a in answers] == [False, True, True]
    assert running.inbox() == [("a:1personal-chat-id:77", "agent:main:teams.tenant-1~main:dm:a%3A1personal-chat-id")]
    assert teams.take().text == "echo: deploy?"
    assert running.gateway.wait_idle()
    assert teams.nothing_more()


def test_non_message_activities_and_our_own_messages_are_acknowledged_and_skipped(
    start_teams: StartTeams, teams: FakeTeams, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_teams()
    service = teams.service_url
    skipped = [
        (conversation_update(bot_app_id=APP, service_url=service), "a 'conversationUpdate' activity is not a message"),
        (message("", bot_app_id=APP, service_url=service, type="messageReaction"), "'messageReaction' activity"),
        (message("echo", bot_app_id=APP, service_url=service, user=f"28:{APP}"), "our own message"),
        (message("   ", bot_app_id=APP, service_url=service), "a message without text or files"),
    ]
    with caplog.at_level(logging.DEBUG, logger="platforms.teams"):
        for activity, reason in skipped:
            answer = deliver(running.url(), activity, teams.token(APP))
            assert answer.status == 200
            assert reason in answer.body["ignored"]
            assert any("skipped an activity" in r.getMessage() and reason in r.getMessage() for r in caplog.records)
    assert running.inbox() == []


def test_the_200_comes_after_the_durable_commit(start_teams: StartTeams) -> None:
    agent = GatedAgent()
    running = start_teams(agent=agent)
    try:
        assert running.say("durable?", activity_id="5").status == 200
        assert inbox_rows(running.db) == [("a:1personal-chat-id:5", "pending")]
    finally:
        agent.release.set()
    assert running.gateway.wait_idle()


def test_an_activity_that_cannot_be_stored_gets_a_503(
    start_teams: StartTeams, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_teams()
    running.gateway.stop()
    with caplog.at_level(logging.ERROR, logger="platforms.teams"):
        assert running.say("lost?", activity_id="9").status == 503
    assert "could not accept message a:1personal-chat-id:9" in caplog.text


def test_an_unknown_bot_is_404_and_an_activity_for_another_recipient_is_403(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams()
    activity = message("hi", bot_app_id=APP, service_url=teams.service_url)
    answer = deliver(f"{running.adapter.url}/teams/messages/nope", activity, teams.token(APP))
    assert (answer.status, answer.body) == (404, {"error": "no Teams bot 'nope'; add it under platforms.teams.bots"})
    misdirected = message("hi", bot_app_id=OTHER_APP, service_url=teams.service_url)
    answer = deliver(running.url(), misdirected, teams.token(APP))
    assert answer.status == 403
    assert "not to this bot's app id" in answer.body["error"]


# -- files -------------------------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(120))


def test_an_inline_image_is_fetched_with_the_bots_token_and_a_file_through_its_download_link(
    start_teams: StartTeams, teams: FakeTeams, tmp_path: Path
) -> None:
    running = start_teams(fetch=FAKE_FILES)
    attachments = [
        {"contentType": "image/png", "contentUrl": teams.add_image(PNG)},
        {
            "contentType": "application/vnd.microsoft.teams.file.download.info",
            "contentUrl": "https://contoso.sharepoint.com/personal/alice/Documents/notes.txt",
            "name": "notes.txt",
            "content": {"downloadUrl": teams.add_file(b"line one\n"), "uniqueId": "1150D938", "fileType": "txt"},
        },
        {"contentType": "text/html", "content": "<div>what are these?</div>"},
    ]
    assert running.say("what are these?", attachments=attachments).status == 200
    assert [header is not None and header.startswith("Bearer ") for header in teams.image_requests] == [True]
    (stored,) = inbound_messages(running.gateway, "teams")
    image, notes = stored.attachments
    digest = hashlib.sha256(PNG).hexdigest()
    assert (image.kind, image.sha256, image.path) == (
        "image",
        digest,
        str(tmp_path / "media" / digest[:2] / f"{digest}.png"),
    )
    assert (notes.kind, notes.name, notes.size, notes.source_url) == ("document", "notes.txt", 9, None)
    reply = teams.take().text
    assert reply.startswith("echo: what are these?\n[attached image")
    assert "Its text:\nline one" in reply


def test_files_that_cannot_be_read_are_refused_saying_why_and_the_text_still_runs(
    start_teams: StartTeams, teams: FakeTeams, tmp_path: Path
) -> None:
    fake_files = FetchSettings(hosts=["127.0.0.1", "localhost"], allow_private=["127.0.0.1"])
    running = start_teams(media=MediaConfig(max_bytes=1024), fetch=fake_files)
    attachments = [
        {  # the same server under another name: another origin, so the bot's token is not sent (and it is refused)
            "contentType": "image/png",
            "contentUrl": teams.add_image(PNG).replace("127.0.0.1", "localhost"),
            "name": "leak.png",
        },
        {
            "contentType": "application/vnd.microsoft.teams.file.download.info",
            "name": "big.pdf",
            "content": {"downloadUrl": teams.add_file(bytes(4096)), "fileType": "pdf"},
        },
        {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"type": "AdaptiveCard"}},
        {"contentType": "reference", "contentUrl": "https://contoso.sharepoint.com/x.docx", "name": "x.docx"},
    ]
    assert running.say("read these", attachments=attachments).status == 200
    reply = teams.take().text
    assert reply.split("\n\n")[0] == (
        "I could not read leak.png: its download failed (HTTP 401). I could not read big.pdf: it is 4 KB, over "
        "the 1 KB limit. I could not read the document: it is a card, which is not read. I could not read x.docx: "
        "it is a file shared from SharePoint or OneDrive, which the bot cannot read."
    )
    assert "echo: read these" in reply
    assert teams.image_requests == [None]  # asked without the token
    assert not (tmp_path / "media").exists()


@pytest.fixture
def canary() -> Iterator[Canary]:
    with running_canary() as server:
        yield server


def test_attachment_urls_inside_the_network_are_not_fetched_and_the_text_still_runs(
    start_teams: StartTeams, teams: FakeTeams, canary: Canary, caplog: pytest.LogCaptureFixture
) -> None:
    running = start_teams()  # a Web Chat or Direct Line user writes contentUrl and downloadUrl themselves
    attachments = [
        {"contentType": "text/plain", "contentUrl": canary.url("/metrics"), "name": "metrics.txt"},
        {"contentType": "image/png", "contentUrl": "http://169.254.169.254/latest/meta-data/", "name": "m.png"},
        {
            "contentType": "application/vnd.microsoft.teams.file.download.info",
            "name": "admin.txt",
            "content": {"downloadUrl": canary.url("/admin", host="localhost"), "fileType": "txt"},
        },
        {"contentType": "text/plain", "contentUrl": "https://evil.example/x.txt", "name": "x.txt"},
    ]
    with caplog.at_level(logging.WARNING, logger="platforms.support.downloads"):
        assert running.say("quote these", attachments=attachments).status == 200
        reply = teams.take().text
    assert reply.split("\n\n")[0] == (
        f"I could not read metrics.txt: {REFUSED_INSIDE}. I could not read m.png: {REFUSED_INSIDE}. "
        "I could not read admin.txt: it is offered from localhost, which is not a Teams file host. "
        "I could not read x.txt: it is offered from evil.example, which is not a Teams file host."
    )
    assert "echo: quote these" in reply
    assert canary.hits == []
    assert CANARY_BODY.decode() not in reply
    assert caplog.text.count("refused by the fetch policy") == 4
    assert "platforms.teams.fetch.allow_private" in caplog.text


def test_a_microsoft_host_that_resolves_or_redirects_into_the_network_is_refused(
    start_teams: StartTeams, teams: FakeTeams, canary: Canary, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hosts = use_hosts(monkeypatch)
    hosts["smba.trafficmanager.net"] = hosts["contoso-my.sharepoint.com"] = "127.0.0.1"
    running = start_teams(fetch=FetchSettings(allow_private=["contoso-my.sharepoint.com"]))
    sharepoint = "contoso-my.sharepoint.com"

    def download_info(name: str, url: str) -> dict[str, Any]:
        content = {"downloadUrl": url, "fileType": "txt"}
        return {"contentType": "application/vnd.microsoft.teams.file.download.info", "name": name, "content": content}

    attachments = [
        # DNS rebinding: Microsoft's name, this host's address, and no allow_private for it
        {"contentType": "text/plain", "contentUrl": canary.url(host="smba.trafficmanager.net"), "name": "a.txt"},
        download_info("b.txt", canary.redirect(canary.url("/b"), host=sharepoint)),
        download_info("c.txt", canary.redirect(canary.url("/c", host="smba.trafficmanager.net"), host=sharepoint)),
        download_info("notes.txt", canary.url("/notes.txt", host=sharepoint)),  # allowed: it still works
    ]
    assert running.say("read", attachments=attachments).status == 200
    reply = teams.take().text
    assert reply.split("\n\n")[0] == (
        f"I could not read a.txt: {REFUSED_INSIDE}. I could not read b.txt: {REFUSED_INSIDE}. "
        f"I could not read c.txt: {REFUSED_INSIDE}."
    )
    assert f"Its text:\n{CANARY_BODY.decode().strip()}" in reply  # notes.txt, from the allowed host
    assert canary.secret_hits() == ["/notes.txt"]
    assert len(canary.redirect_hits()) == 2


# -- sending -----------------------------------------------------------------------------------------------------


def reply(text: str, **fields: Any) -> OutboundMessage:
    return OutboundMessage(platform="teams", text=text, **({"account_id": "main", "chat_id": "a:1chat"} | fields))


@pytest.fixture
def sender(teams: FakeTeams, start_teams: StartTeams) -> Callable[..., Any]:
    """A started adapter's sender, after one message made the conversation ``a:1chat`` known."""

    def make(**options: Any) -> Any:
        running = start_teams(**options)
        assert running.say("hi", conversation_id="a:1chat", activity_id="1").status == 200
        assert teams.take().text == "echo: hi"
        assert running.gateway.wait_idle()
        return running.adapter.sender

    return make


def test_send_errors_say_what_happened_and_which_are_permanent(sender: Callable[..., Any], teams: FakeTeams) -> None:
    send = sender(messages_per_second=1000.0)
    cases: list[tuple[dict[str, Any], str, float | None, bool]] = [
        ({"status": 502}, "failed with HTTP 502", None, False),
        ({"status": 403, "code": "BotNotInConversationRoster"}, "not in the conversation any more", None, True),
        ({"status": 404, "code": "ConversationNotFound"}, "does not exist any more", None, True),
        ({"status": 400, "code": "BadArgument"}, "refused the activity as malformed", None, True),
        ({"status": 429, "retry_after": "7"}, "asked to slow down (HTTP 429)", 7.0, False),  # last: it pauses the chat
    ]
    for number, (failure, text, retry_after, permanent) in enumerate(cases):
        teams.fail_next(**failure)
        with pytest.raises(SendError) as error:
            send.send(reply("hi", outbox_id=number))
        assert text in str(error.value)
        assert (error.value.retry_after_s, error.value.permanent) == (retry_after, permanent)
    with pytest.raises(SendError, match="its Bot Connector address \\(serviceUrl\\) is unknown") as unknown:
        send.send(reply("hi", chat_id="a:never-seen"))
    assert unknown.value.permanent
    with pytest.raises(SendError, match="no bot 'gone' is configured"):
        send.send(reply("hi", account_id="gone"))
    assert send.send(reply("   ")) is None
    assert teams.posted[1:] == []


def test_a_revoked_token_is_renewed_once_and_a_refused_password_names_the_fix(
    sender: Callable[..., Any], teams: FakeTeams
) -> None:
    send = sender()
    teams.revoke_tokens()
    assert send.send(reply("after revocation")) == teams.take().id
    assert len(teams.token_requests) == 2
    bad = TeamsAdapter(
        config_for(teams, {"main": TeamsBot(app_id=APP, app_password="wrong")}), environ={}
    ).sender._connectors["main"]
    with pytest.raises(SendError, match=r"invalid_client.*app password is wrong or expired"):
        bad.token()


def test_a_partly_sent_reply_resumes_after_the_parts_already_posted(
    sender: Callable[..., Any], teams: FakeTeams
) -> None:
    send = sender(max_message_chars=100, messages_per_second=1000.0)
    text = "\n\n".join(f"paragraph {i} " + "x" * 80 for i in range(3))
    teams.fail_next(500, after=1)
    with pytest.raises(SendError):
        send.send(reply(text, outbox_id=41))
    first = teams.take()
    assert first.text.startswith("paragraph 0")
    assert send.send(reply(text, outbox_id=41)) == first.id
    assert [p.text.split()[1] for p in teams.drain()] == ["1", "2"]


@pytest.mark.slow
def test_the_outbox_honours_retry_after_on_a_429(start_teams: StartTeams, teams: FakeTeams) -> None:
    running = start_teams()
    teams.fail_next(429, retry_after="1")
    running.say("patience")
    assert teams.take().text == "echo: patience"
    assert len(teams.attempts) == 2
    assert teams.attempts[1] - teams.attempts[0] >= 1.0
    assert teams.nothing_more()


# -- handoff threads ---------------------------------------------------------------------------------------------


def test_a_handoff_to_teams_opens_a_channel_thread_and_speaks_there(tmp_path: Path, teams: FakeTeams) -> None:
    adapter = TeamsAdapter(config_for(teams), environ={})
    assert isinstance(adapter.sender, ThreadCreator)
    cli = FakePlatform("cli")
    gateway = Gateway(tmp_path / "state.db", senders=[cli, *adapter.senders()], tick_interval_s=0.1)
    cli.attach(gateway)
    adapter.start(GatewayInbox(gateway))
    try:
        thread = f"{CHANNEL};messageid=1000"
        activity = message(
            "/sethome",
            bot_app_id=APP,
            service_url=teams.service_url,
            conversation_type="channel",
            conversation_id=thread,
        )
        assert deliver(f"{adapter.url}/teams/messages/main", activity, teams.token(APP)).status == 200
        assert teams.take().text == "This chat is now the home channel for teams."
        cli.push("let us refactor auth", chat_id="terminal")
        assert cli.pop().text == "echo: let us refactor auth"
        assert gateway.wait_idle()
        cli.push("/handoff teams", chat_id="terminal")
        anchor = teams.take()
        first = teams.take()
        assert (anchor.conversation, anchor.body["channelData"]) == (
            CHANNEL,
            {"channel": {"id": CHANNEL}, "tenant": {"id": "tenant-1"}},
        )
        assert first.conversation == f"{CHANNEL};messageid={anchor.id}"
        assert first.text.startswith("echo: [handoff] This conversation was just handed off here from cli.")
        assert cli.pop().text.startswith("Handed off to teams (chat ")
    finally:
        adapter.stop()
        gateway.stop()


# -- hostile input -----------------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_fields = st.sampled_from(
    ["type", "id", "serviceUrl", "channelId", "from", "conversation", "recipient", "text", "attachments", "entities"]
)


@st.composite
def _hostile(draw: st.DrawFn) -> tuple[bytes, str]:
    kind = draw(st.sampled_from(["activity", "json", "bytes"]))
    if kind == "activity":
        activity = message(draw(st.text(max_size=50)), bot_app_id=APP, service_url="SERVICE")
        for name in draw(st.lists(_fields, max_size=3)):
            if draw(st.booleans()):
                activity.pop(name, None)
            else:
                activity[name] = draw(_json_values)
        body = json.dumps(activity).encode()
    elif kind == "json":
        body = json.dumps(draw(_json_values)).encode()
    else:
        body = draw(st.binary(max_size=64))
    return body, draw(st.sampled_from(["good", "good", "good", "forged", "stale", "none"]))


@pytest.mark.slow
def test_hostile_payloads_get_a_4xx_or_a_skip_with_a_log_line_and_the_adapter_keeps_working(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams(max_body_bytes=64 * 1024, messages_per_second=1000.0)
    handler = LogRecords()
    logger = logging.getLogger("platforms.teams")
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    statuses: set[int] = set()
    forged_key = new_key()

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=_hostile())
    def check(case: tuple[bytes, str]) -> None:
        body, signing = case
        body = body.replace(b'"SERVICE"', json.dumps(teams.service_url).encode())
        handler.records.clear()
        token = {
            "good": teams.token(APP),
            "forged": teams.token(APP, key=forged_key),
            "stale": teams.token(APP, issued_at=time.time() - 7200),
            "none": None,
        }[signing]
        answer = deliver(running.url(), body, token)
        statuses.add(answer.status)
        assert answer.status in (200, 400, 401, 403), (answer, body[:200])
        if answer.status != 200:
            assert any("refused a request" in r.getMessage() for r in handler.records)
            assert "error" in answer.body
        elif answer.body.get("ignored"):
            assert any("skipped an activity" in r.getMessage() for r in handler.records)

    try:
        check()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    assert {200, 400, 401} <= statuses
    teams.drain()
    assert running.say("still there?", conversation_id="a:1fresh").status == 200
    assert running.gateway.wait_idle(timeout=60)
    assert "echo: still there?" in [posted.text for posted in teams.drain()]


def test_an_oversized_body_is_413(start_teams: StartTeams) -> None:
    running = start_teams(max_body_bytes=2048)
    answer = running.say("x" * 5000)
    assert answer.status == 413
    assert "larger than 2048 bytes" in answer.body["error"]


# -- configuration -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "path", "problem"),
    [
        ({"bots": {"a": {"app_id": APP}}}, "platforms.teams.bots.a.app_password", "is required"),
        ({"bots": {"a": {"app_id": "bot", "app_password": "x"}}}, "platforms.teams.bots.a.app_id", "GUID"),
        (
            {"bots": {"a": {"app_id": APP, "app_password": "x", "app_password_env": "X"}}},
            "platforms.teams.bots.a.app_password_env",
            "not both",
        ),
        (
            {"bots": {"a": {"app_id": APP, "app_password_env": "1X"}}},
            "platforms.teams.bots.a.app_password_env",
            "environment variable name",
        ),
        ({"bots": {"a": {"app_id": APP, "app_password": " x "}}}, "platforms.teams.bots.a.app_password", "spaces"),
        (
            {"bots": {"a": {"app_id": APP, "app_password": "x", "tenant_id": "a tenant"}}},
            "platforms.teams.bots.a.tenant_id",
            "tenant id",
        ),
        ({"bots": {"a b": {"app_id": APP, "app_password": "x"}}}, "platforms.teams.bots.a b", "a bot name is"),
        ({"port": 70000}, "platforms.teams.port", "not a TCP port"),
        ({"host": " "}, "platforms.teams.host", "must not be empty"),
        ({"openid_metadata_url": "login.botframework.com"}, "platforms.teams.openid_metadata_url", "http(s) URL"),
        ({"login_url": "ftp://x"}, "platforms.teams.login_url", "http(s) URL"),
        ({"clock_skew_s": 3600}, "platforms.teams.clock_skew_s", "0..600"),
        ({"keys_min_refresh_s": -1}, "platforms.teams.keys_min_refresh_s", "negative"),
        ({"max_message_chars": 50_000}, "platforms.teams.max_message_chars", "between 100 and 28000"),
        ({"messages_per_second": 0}, "platforms.teams.messages_per_second", "positive"),
        ({"max_body_bytes": 10}, "platforms.teams.max_body_bytes", "at least 1024"),
        ({"http_timeout_s": 0}, "platforms.teams.http_timeout_s", "positive"),
    ],
)
def test_a_bad_section_is_a_config_error_naming_its_field(section: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(section, registry.config_type("teams"))
    assert error.value.path == path
    assert problem in str(error.value)


def test_the_password_from_the_environment_is_read_when_the_adapter_is_built(teams: FakeTeams) -> None:
    config = config_for(teams, {"env": TeamsBot(app_id=APP, app_password_env="TEAMS_PASSWORD")})
    adapter = TeamsAdapter(config, environ={"TEAMS_PASSWORD": PASSWORD})
    assert "app password from $TEAMS_PASSWORD" in adapter.describe()[0]
    assert adapter.sender._connectors["env"].token()
    with pytest.raises(ConfigError, match="TEAMS_PASSWORD is not set") as missing:
        TeamsAdapter(config, environ={})
    assert missing.value.path == "platforms.teams.bots.env.app_password_env"


def test_the_registry_builds_the_adapter_and_the_banner_names_each_endpoint(start_teams: StartTeams) -> None:
    empty: Adapter = registry.build("teams", TeamsConfig(), {})
    assert empty.capabilities.threads
    assert empty.capabilities.max_message_chars == 4000
    assert empty.describe()[0].startswith("Teams: http://127.0.0.1:3978 has no bots")
    running = start_teams()
    (line,) = running.adapter.describe()
    assert line.startswith(f"Teams bot 'main' (app {APP}, app password in config.yaml): messaging endpoint POST ")
    assert f"{running.adapter.url}/teams/messages/main" in line


def test_a_busy_port_is_a_platform_error_naming_the_address(start_teams: StartTeams, teams: FakeTeams) -> None:
    running = start_teams()
    taken = int(running.adapter.url.rsplit(":", 1)[1])
    second = TeamsAdapter(config_for(teams, port=taken), environ={})
    with pytest.raises(PlatformError, match=f"cannot listen on 127.0.0.1:{taken}"):
        second.start(GatewayInbox(running.gateway))


# -- a crash between accept and reply -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, teams: FakeTeams) -> None:
    db = tmp_path / "state.db"
    config = config_for(teams)
    activity = message("survive", bot_app_id=APP, service_url=teams.service_url, activity_id="900")
    worker = AdapterWorker.start(db, "teams", config, agent="hold")
    try:
        assert deliver(worker.url() + "/teams/messages/main", activity, teams.token(APP)).status == 200
        assert wait_for_inbox(db, 1) == [("a:1personal-chat-id:900", "pending")]
    finally:
        worker.kill()
    assert teams.posted == []
    worker = AdapterWorker.start(db, "teams", config, agent="echo")
    try:
        # The new process learned nothing in memory: the reply's serviceUrl comes from the store.
        posted = teams.take(timeout=20)
        assert (posted.conversation, posted.reply_to, posted.text) == ("a:1personal-chat-id", "900", "echo: survive")
        again = deliver(worker.url() + "/teams/messages/main", activity, teams.token(APP))
        assert (again.status, again.body["duplicate"]) == (200, True)
        assert teams.nothing_more(0.3)
    finally:
        worker.stop()
    assert len(teams.posted) == 1


def test_a_malformed_mention_entity_is_a_400_and_the_next_message_runs(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams()
    broken = running.say("<at>Hermes</at> hi", entities=[{"type": "mention", "mentioned": "not an account"}])
    assert broken.status == 400
    assert broken.body["error"].startswith("a mention entity is malformed")
    assert running.say("fine now").status == 200
    assert teams.take().text == "echo: fine now"


def test_save_sends_the_markdown_as_text_since_a_bot_may_not_upload_files_to_a_chat(
    start_teams: StartTeams, teams: FakeTeams
) -> None:
    running = start_teams()
    running.say("hello", activity_id="2001")
    assert teams.take().text == "echo: hello"
    running.say("/save", activity_id="2002")
    saved = teams.take()
    assert running.gateway.wait_idle()
    assert saved.text.startswith("# ")
    assert saved.text.index("hello") < saved.text.index("echo: hello")
    assert "attachments" not in saved.body or not saved.body["attachments"]
    assert teams.nothing_more()
