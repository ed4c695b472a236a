"""The push-only platforms in cluster mode: each runs in every replica, a signed event posted to replica A is
committed to the PostgreSQL inbox and acknowledged there, its turn runs in a shard host, and the reply is sent once
by replica B, which holds ``send:<platform>`` and whose adapter never saw the event (what B's sender needs of it,
Teams' conversation address or WhatsApp's 24-hour window, it reads from the store). The same event delivered again,
to B, adds nothing. Every platform speaks to its fake (tests/platforms/*_fake.py) on 127.0.0.1."""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.entry_points import ClusterReplica
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.media import MediaStore
from hermes_actors.ports import Adapter
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakeClock, poll_until
from platforms.bluebubbles import BluebubblesAdapter, BluebubblesConfig
from platforms.feishu import FeishuAdapter, FeishuApp, FeishuConfig
from platforms.slack import SlackAdapter, SlackApp, SlackConfig
from platforms.sms import SmsAdapter, SmsConfig
from platforms.teams import TeamsAdapter, TeamsBot, TeamsConfig
from platforms.wecom import WecomAdapter, WecomApp, WecomConfig
from platforms.whatsapp import WhatsappAdapter, WhatsappConfig, WhatsappNumber
from tests.platforms import (
    bluebubbles_fake,
    feishu_fake,
    slack_fake,
    teams_fake,
    twilio_fake,
    wecom_fake,
    whatsapp_fake,
)

pytestmark = pytest.mark.slow  # a shard host, two replicas and a fake platform: about a second each

SHARDS = 8
WAIT_S = 30.0  # the host's first pull, the turn and the dispatcher's round, on a busy machine


def _quiet(count: int, now: Callable[[], int], wait: float = 0.3) -> bool:
    """Whether ``now()`` is still ``count`` after ``wait`` seconds (nothing more was sent)."""
    threading.Event().wait(wait)
    return now() == count


class Case(abc.ABC):
    """One platform: its fake (started on entry, stopped on exit), its section, an adapter built from it, a
    signed event and its delivery, and the replies the fake received."""

    platform = ""
    taken = 0  # replies taken so far, for fakes that keep a list rather than a queue

    @abc.abstractmethod
    def __enter__(self) -> Case:
        """Start the fake."""

    @abc.abstractmethod
    def __exit__(self, *exc: object) -> None:
        """Stop the fake."""

    @abc.abstractmethod
    def config(self) -> msgspec.Struct:
        """The platform's section, on port 0 and pointed at the fake."""

    @abc.abstractmethod
    def build(self, config: msgspec.Struct) -> Adapter:
        """An adapter of ``config`` (each replica builds its own)."""

    @abc.abstractmethod
    def event(self, text: str) -> Any:
        """A user's message ``text`` as the platform delivers it (the same event each time it is delivered)."""

    @abc.abstractmethod
    def deliver(self, adapter: Adapter, event: Any) -> int:
        """POST ``event`` to ``adapter`` signed as the platform does; the HTTP status."""

    @abc.abstractmethod
    def take(self) -> str:
        """The text of the next reply the fake received (waiting for it)."""

    @abc.abstractmethod
    def nothing_more(self) -> bool:
        """Whether no further reply arrives for a moment."""


class Slack(Case):
    platform = "slack"
    secret, token = "8f742231b10e8888abcd99yyyzzz85a5", "xoxb-17-team-one-main"

    def __enter__(self) -> Slack:
        self.fake = slack_fake.FakeSlack(tokens={self.token: "T1"}).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> SlackConfig:
        app = SlackApp(signing_secret=self.secret, bot_token=self.token)
        return SlackConfig(port=0, api_base_url=self.fake.api_base_url, apps={"main": app})

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, SlackConfig)
        return SlackAdapter(config, environ={})

    def event(self, text: str) -> Any:
        return slack_fake.event_callback(slack_fake.message(text, channel="D1", channel_type="im"))

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, SlackAdapter)
        return slack_fake.deliver(f"{adapter.url}/slack/events/main", event, self.secret).status

    def take(self) -> str:
        return self.fake.take(WAIT_S).text

    def nothing_more(self) -> bool:
        return self.fake.nothing_more()


class Feishu(Case):
    platform = "feishu"
    app_id, key = "cli_a1b2c3d4e5f60001", "kJ4mQ8vX2pL6tN0r"

    def __enter__(self) -> Feishu:
        self.fake = feishu_fake.FakeFeishu()
        self.fake.add_app(self.app_id, app_secret="secret", verification_token="token", encrypt_key=self.key)
        self.fake.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> FeishuConfig:
        app = FeishuApp(
            app_id=self.app_id,
            app_secret="secret",
            verification_token="token",
            encrypt_key=self.key,
            base_url=self.fake.base_url,
        )
        return FeishuConfig(port=0, apps={"main": app})

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, FeishuConfig)
        return FeishuAdapter(config, environ={}, clock=FakeClock())  # the fake signs at FakeClock's start

    def event(self, text: str) -> Any:
        return self.fake.message_event(self.app_id, text)

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, FeishuAdapter)
        status, _ = feishu_fake.deliver(f"{adapter.url}/feishu/events/main", event, encrypt_key=self.key)
        return status

    def take(self) -> str:
        self.taken += 1
        return self.fake.wait_sent(self.taken, WAIT_S)[self.taken - 1].text

    def nothing_more(self) -> bool:
        return _quiet(self.taken, lambda: len(self.fake.sent))


class Whatsapp(Case):
    platform = "whatsapp"
    number, secret, token = "106540352242922", "3f1b9c0d2e4a6b8c0d1e2f3a4b5c6d7e", "EAAGm0PX4ZCpsBA-main"

    def __enter__(self) -> Whatsapp:
        self.fake = whatsapp_fake.FakeGraph(tokens={self.token: self.number}).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> WhatsappConfig:
        number = WhatsappNumber(app_secret=self.secret, verify_token="verify", access_token=self.token)
        return WhatsappConfig(port=0, graph_base_url=self.fake.base_url, numbers={self.number: number})

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, WhatsappConfig)
        return WhatsappAdapter(config, environ={})

    def event(self, text: str) -> Any:
        return whatsapp_fake.notification(self.number, [whatsapp_fake.text_message(text, "15551234567")])

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, WhatsappAdapter)
        return whatsapp_fake.deliver(f"{adapter.url}/whatsapp/webhook", event, self.secret).status

    def take(self) -> str:
        return self.fake.take(WAIT_S).body

    def nothing_more(self) -> bool:
        return self.fake.nothing_more()


class Teams(Case):
    platform = "teams"
    app, password = "8a2e5c1f-0b6d-4e2a-9c31-5f7d8e9a0b1c", "kX8Q~client.secret-main"

    def __enter__(self) -> Teams:
        self.fake = teams_fake.FakeTeams(passwords={self.app: self.password}).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> TeamsConfig:
        bot = TeamsBot(app_id=self.app, app_password=self.password)
        return TeamsConfig(
            port=0, openid_metadata_url=self.fake.metadata_url, login_url=self.fake.login_url, bots={"main": bot}
        )

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, TeamsConfig)
        return TeamsAdapter(config, environ={})

    def event(self, text: str) -> Any:
        return teams_fake.message(text, bot_app_id=self.app, service_url=self.fake.service_url, activity_id="1001")

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, TeamsAdapter)
        return teams_fake.deliver(f"{adapter.url}/teams/messages/main", event, self.fake.token(self.app)).status

    def take(self) -> str:
        return self.fake.take(WAIT_S).text

    def nothing_more(self) -> bool:
        return self.fake.nothing_more()


class Sms(Case):
    platform = "sms"
    account, token, number = "AC" + "3f" * 16, "9c1e5b7a2d4f6e8091a3b5c7d9e1f203", "+15550001111"

    def __enter__(self) -> Sms:
        self.fake = twilio_fake.FakeTwilio(account_sid=self.account, auth_token=self.token, numbers=[self.number])
        self.fake.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> SmsConfig:
        return SmsConfig(
            port=0,
            api_base_url=self.fake.base_url,
            account_sid=self.account,
            auth_token=self.token,
            numbers=[self.number],
            messages_per_second=1000.0,
        )

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, SmsConfig)
        return SmsAdapter(config, environ={})

    def event(self, text: str) -> Any:
        return twilio_fake.incoming(self.account, self.number, "+15557654321", text, sid=twilio_fake.new_sid())

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, SmsAdapter)
        return twilio_fake.deliver(f"{adapter.url}/sms/twilio", event, self.token).status

    def take(self) -> str:
        return self.fake.take(WAIT_S).body

    def nothing_more(self) -> bool:
        return self.fake.nothing_more()


class Bluebubbles(Case):
    platform = "bluebubbles"
    password, chat, sender = "correct horse battery", "iMessage;-;+15557654321", "+15557654321"

    def __enter__(self) -> Bluebubbles:
        self.hook = bluebubbles_fake.token()
        self.fake = bluebubbles_fake.FakeBlueBubbles(password=self.password, chats={self.chat}).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> BluebubblesConfig:
        return BluebubblesConfig(
            port=0,
            server_url=self.fake.url,
            server_name="home-mac",
            password=self.password,
            webhook_token=self.hook,
            messages_per_second=1000.0,
        )

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, BluebubblesConfig)
        return BluebubblesAdapter(config, environ={})

    def event(self, text: str) -> Any:
        return bluebubbles_fake.new_message(text, chat=self.chat, sender=self.sender)

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, BluebubblesAdapter)
        return bluebubbles_fake.post(f"{adapter.url}/bluebubbles/{self.hook}", msgspec.json.encode(event)).status

    def take(self) -> str:
        return str(self.fake.take(WAIT_S).body["message"])

    def nothing_more(self) -> bool:
        return self.fake.nothing_more()


class Wecom(Case):
    platform = "wecom"
    key, agent = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG", 1000002

    def __enter__(self) -> Wecom:
        self.clock = FakeClock()
        self.fake = wecom_fake.FakeWecom()
        self.fake.secrets |= {"wwcorpa": "secret-a"}
        self.fake.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()

    def config(self) -> WecomConfig:
        app = WecomApp(
            corp_id="wwcorpa", agent_id=self.agent, secret="secret-a", token="tok", encoding_aes_key=self.key
        )
        return WecomConfig(port=0, api_base_url=self.fake.base_url, apps={"main": app})

    def build(self, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, WecomConfig)
        return WecomAdapter(config, environ={}, clock=self.clock)

    def event(self, text: str) -> Any:
        return wecom_fake.message_xml("wwcorpa", self.agent, Content=text)

    def deliver(self, adapter: Adapter, event: Any) -> int:
        assert isinstance(adapter, WecomAdapter)
        status, _ = wecom_fake.push(
            f"{adapter.url}/wecom/callback/main",
            event,
            token="tok",
            encoding_aes_key=self.key,
            corp_id="wwcorpa",
            agent_id=self.agent,
            timestamp=int(self.clock.now),
        )
        return status

    def take(self) -> str:
        self.taken += 1
        return self.fake.wait_sent(self.taken, WAIT_S)[self.taken - 1].text

    def nothing_more(self) -> bool:
        return _quiet(self.taken, lambda: len(self.fake.sent))


CASES = [Slack, Feishu, Whatsapp, Teams, Sms, Bluebubbles, Wecom]


class Replica:
    """One hermesd --cluster replica without Ray: its own store (pool), ingress poking the host, inbox and entry
    points for one platform section."""

    def __init__(self, name: str, dsn: str, case: Case, host: HostRuntime, media: MediaStore) -> None:
        self.store = PostgresStore.open(dsn, migrate_schema=False)
        ingress = ClusterIngress(self.store, shards=SHARDS, poke=lambda shard: host.poke())
        self.inbox = ClusterInbox(ingress, media)
        self.entry = ClusterReplica(
            self.store,
            self.inbox,
            {case.platform: case.config()},
            build=lambda platform, config: case.build(config),
            name=name,
            dispatch_interval_s=0.05,
        )

    @property
    def adapter(self) -> Adapter:
        (adapter,) = self.entry.push
        return adapter

    def close(self) -> None:
        self.entry.stop()
        self.inbox.close()
        self.store.close()


@pytest.fixture
def host(postgres_dsn: str) -> Iterator[HostRuntime]:
    runtime = HostRuntime(HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS))
    runtime.start()
    yield runtime
    runtime.stop()


@pytest.mark.parametrize("kind", CASES, ids=[case.platform for case in CASES])
def test_an_event_posted_to_one_replica_is_answered_once_by_the_replica_holding_the_send_role(
    kind: type[Case], host: HostRuntime, postgres_dsn: str, tmp_path: Path
) -> None:
    with kind() as case:
        b = Replica("replica-b", postgres_dsn, case, host, MediaStore(tmp_path / "b"))
        a: Replica | None = None
        try:
            b.entry.start(heartbeats=False)
            poll_until(lambda: b.entry.dispatcher.held() == {f"send:{case.platform}"}, what="b holding the send role")
            a = Replica("replica-a", postgres_dsn, case, host, MediaStore(tmp_path / "a"))
            a.entry.start(heartbeats=False)
            event = case.event("hello")
            assert case.deliver(a.adapter, event) == 200
            assert case.take() == "echo: hello"
            assert a.entry.dispatcher.held() == set()  # a's dispatcher has the sender but never held the role
            poll_until(lambda: b.store.outbox.backlog() == 0, what="the reply marked sent")

            assert case.deliver(b.adapter, event) == 200  # the platform delivers it again, to the other replica
            assert b.store.database.value("SELECT count(*) FROM inbox WHERE platform = %s", (case.platform,)) == 1
            assert b.store.database.value("SELECT count(*) FROM outbox") == 1
            assert case.nothing_more()
        finally:
            if a is not None:
                a.close()
            b.close()


def test_a_teams_reply_goes_to_the_latest_address_whichever_replica_took_it(
    host: HostRuntime, postgres_dsn: str, tmp_path: Path
) -> None:
    with Teams() as case:
        b = Replica("replica-b", postgres_dsn, case, host, MediaStore(tmp_path / "b"))
        a: Replica | None = None
        try:
            b.entry.start(heartbeats=False)
            poll_until(lambda: b.entry.dispatcher.held() == {"send:teams"}, what="b holding the send role")
            a = Replica("replica-a", postgres_dsn, case, host, MediaStore(tmp_path / "a"))
            a.entry.start(heartbeats=False)
            # The conversation first came through another region, to b: b's reply there is refused (404).
            old = case.fake.service_url.replace("/amer/", "/emea/")
            first = teams_fake.message("first", bot_app_id=case.app, service_url=old, activity_id="1001")
            assert isinstance(b.adapter, TeamsAdapter)
            url = f"{b.adapter.url}/teams/messages/main"
            assert teams_fake.deliver(url, first, case.fake.token(case.app, service_url=old)).status == 200
            given_up = "SELECT count(*) FROM outbox WHERE abandoned_at IS NOT NULL"
            poll_until(lambda: b.store.database.value(given_up) == 1, timeout=WAIT_S, what="the first reply given up")
            # Its next activity comes from the conversation's new region, to a; b sends the reply there.
            second = teams_fake.message("second", bot_app_id=case.app, service_url=case.fake.service_url)
            assert case.deliver(a.adapter, second) == 200
            posted = case.fake.take(WAIT_S)
            assert (posted.conversation, posted.text) == ("a:1personal-chat-id", "echo: second")
        finally:
            if a is not None:
                a.close()
            b.close()
