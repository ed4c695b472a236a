"""A user migrated with ``hermesctl import-hermes`` continues where they were, on every platform the reference had
(the seeds: Telegram, Discord, Slack, WhatsApp, Signal, Matrix, Teams, Feishu, WeChat, SMS).

Each case writes the reference system's session and routing entry for one chat, imports it through the command
with a ``config.yaml`` naming the bot accounts, then decodes that user's next message from the platform's own wire
format with the adapter's decoder (so the key and principal are the adapter's, not the test's) and sends it
through the runtime: it must land in the imported session, and ``/resume <imported id>`` must find it.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import build_session_key
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakePlatform
from platforms.discord.events import Message, decode_data, decode_frame, inbound_from_message
from platforms.feishu.config import AppKeys
from platforms.feishu.events import Received, open_event
from platforms.matrix import decode_event, inbound_message, incoming_of
from platforms.signal import decode_event as decode_signal_event
from platforms.signal import inbound_from_event
from platforms.slack.config import ResolvedApp
from platforms.slack.events import decode_envelope, to_inbound
from platforms.sms.events import inbound_of, parse_form
from platforms.teams.activity import decode_activity
from platforms.teams.activity import to_inbound as teams_inbound
from platforms.telegram.updates import decode_update, inbound_from_update
from platforms.wechat.account import BotAccount
from platforms.wechat.wire import decode_message
from platforms.whatsapp.events import parse_notification
from platforms.whatsapp.wire import Notification
from tests.importer.hermes_v22 import HermesDb
from tests.platforms import slack_fake, teams_fake, telegram_fake
from tests.platforms.feishu_fake import FakeFeishu
from tests.platforms.signal_fake import Person
from tests.platforms.signal_fake import message as signal_message
from tests.platforms.whatsapp_fake import notification, text_message

SESSION = "20260528_100000_aaaa0001"
_serial = itertools.count(1)  # each message of a user is a new one on its platform (ids, timestamps)
PLATFORMS = ("telegram", "slack", "discord", "whatsapp", "signal", "matrix", "teams", "feishu", "wechat", "sms")
WHATSAPP_NUMBER = "106540352242922"
SIGNAL_ACCOUNT = "+15550001"
SMS_NUMBER = "+15550001111"
TEAMS_APP = "00000000-0000-4000-8000-000000000001"
FEISHU_APP = "cli_a1"
CONFIG = f"""\
platforms:
  telegram:
    bots:
      main: {{token_env: TELEGRAM_TOKEN}}
  slack:
    apps:
      main: {{signing_secret_env: SLACK_SIGNING_SECRET, bot_token_env: SLACK_BOT_TOKEN}}
  discord:
    bots:
      main: {{token_env: DISCORD_TOKEN}}
  whatsapp:
    numbers:
      "{WHATSAPP_NUMBER}": {{app_secret_env: WA_SECRET, verify_token_env: WA_VERIFY, access_token_env: WA_TOKEN}}
  signal:
    accounts: ["{SIGNAL_ACCOUNT}"]
  matrix:
    accounts:
      main: {{homeserver: "https://matrix.example.org", access_token_env: MATRIX_TOKEN}}
  teams:
    bots:
      main: {{app_id: "{TEAMS_APP}", app_password_env: TEAMS_PASSWORD}}
  feishu:
    apps:
      main: {{app_id: {FEISHU_APP}, app_secret_env: FEISHU_SECRET, verification_token_env: FEISHU_TOKEN}}
  wechat:
    accounts:
      bot-a: {{token_env: WECHAT_TOKEN}}
  sms:
    account_sid: AC0123456789abcdef0123456789abcdef
    auth_token_env: TWILIO_TOKEN
    numbers: ["{SMS_NUMBER}"]
"""


# -- the next message of each user, as its platform's adapter decodes it --------------------------------------------


def telegram_dm(text: str) -> InboundMessage:
    ann = telegram_fake.user(12345)
    n = next(_serial)
    update = {"update_id": n, **telegram_fake.message(telegram_fake.private_chat(ann), ann, text, message_id=n)}
    inbound = inbound_from_update(decode_update(json.dumps(update)), "main", received_at=0.0)
    assert inbound is not None
    return inbound


def telegram_group(text: str) -> InboundMessage:
    ann = telegram_fake.user(12345)
    chat = telegram_fake.group_chat(-10012345, "team")
    n = next(_serial)
    update = {"update_id": n, **telegram_fake.message(chat, ann, text, message_id=n)}
    inbound = inbound_from_update(decode_update(json.dumps(update)), "main", received_at=0.0)
    assert inbound is not None
    return inbound


def _slack(event: dict[str, Any], team_id: str | None = None) -> InboundMessage:
    app = ResolvedApp(name="main", signing_key=b"k", bot_token="xoxb-1", team_id=team_id, origin="")
    envelope = decode_envelope(json.dumps(slack_fake.event_callback(event, team="T9")).encode())
    decoded = to_inbound(app, envelope, reply_in_thread=False, received_at=0.0)
    assert isinstance(decoded, tuple), decoded
    return decoded[0]


def slack_dm(text: str) -> InboundMessage:
    return _slack(
        slack_fake.message(text, channel="D1", user="U1", channel_type="im", ts=f"1764460800.{next(_serial):06d}")
    )


def slack_channel(text: str) -> InboundMessage:
    return _slack(
        slack_fake.message(text, channel="C7", user="U2", channel_type="channel", ts=f"1764460800.{next(_serial):06d}")
    )


def _discord(data: dict[str, Any]) -> InboundMessage:
    frame = decode_frame(json.dumps({"op": 0, "t": "MESSAGE_CREATE", "s": 1, "d": data}))
    inbound = inbound_from_message(decode_data(frame, Message), "main", own_user_id="900", channel=None)
    assert isinstance(inbound, InboundMessage), inbound
    return inbound


def discord_dm(text: str) -> InboundMessage:
    author = {"id": "100", "username": "ann"}
    return _discord({"id": str(time.time_ns()), "channel_id": "500", "author": author, "content": text})


def discord_channel(text: str) -> InboundMessage:
    author = {"id": "100", "username": "ann"}
    data = {"id": str(time.time_ns()), "channel_id": "600", "guild_id": "700", "author": author, "content": text}
    return _discord(data)


def whatsapp_dm(text: str) -> InboundMessage:
    body = notification(WHATSAPP_NUMBER, [text_message(text, "15551234567")])
    parsed = parse_notification(
        msgspec.convert(body, Notification), numbers={WHATSAPP_NUMBER}, signed={WHATSAPP_NUMBER}, now=time.time()
    )
    (inbound,) = parsed.inbound
    return inbound


ALICE = Person(uuid="a1a1a1a1-0000-4000-8000-000000000001", number="+15551110001", name="Alice")


def signal_dm(text: str) -> InboundMessage:
    envelope = signal_message(ALICE, text, timestamp=1764460800000 + next(_serial))
    event = {"envelope": envelope, "account": SIGNAL_ACCOUNT}
    inbound = inbound_from_event(decode_signal_event(json.dumps(event)), SIGNAL_ACCOUNT)
    assert isinstance(inbound, InboundMessage), inbound
    return inbound


def matrix_dm(text: str) -> InboundMessage:
    event = {
        "type": "m.room.message",
        "event_id": f"$e{time.time_ns()}",
        "sender": "@alice:example.org",
        "origin_server_ts": 1764460800000,
        "content": {"msgtype": "m.text", "body": text},
    }
    incoming = incoming_of(decode_event(json.dumps(event).encode()))
    assert incoming is not None
    return inbound_message(incoming, account_id="main", room_id="!dm:example.org", direct=True)


def teams_dm(text: str) -> InboundMessage:
    activity = teams_fake.message(text, bot_app_id=TEAMS_APP, service_url="https://smba.example.com/")
    decoded = teams_inbound(
        decode_activity(json.dumps(activity).encode()), bot_name="main", bot_app_id=TEAMS_APP, received_at=0.0
    )
    assert isinstance(decoded, tuple), decoded
    return decoded[0]


def _feishu(text: str, **fields: Any) -> InboundMessage:
    event = FakeFeishu().message_event(FEISHU_APP, text, token="vtoken", tenant_key="tk1", **fields)
    app = AppKeys(
        name="main",
        app_id=FEISHU_APP,
        app_secret="secret",
        verification_token="vtoken",
        encrypt_key=None,
        aes_key=None,
        base_url="https://open.feishu.cn",
        origins="",
    )
    opened = open_event(app, {}, json.dumps(event).encode(), received_at=time.time())
    assert isinstance(opened, Received), opened
    return opened.inbound


def feishu_dm(text: str) -> InboundMessage:
    return _feishu(text)


def feishu_group(text: str) -> InboundMessage:
    return _feishu(text, chat_id="oc_group", chat_type="group")


def wechat_dm(text: str) -> InboundMessage:
    raw = {
        "message_id": time.time_ns() % 10**9,
        "from_user_id": "wxid_alice",
        "to_user_id": "bot@im.bot",
        "create_time_ms": 1764460800000,
        "message_type": 1,
        "message_state": 2,
        "item_list": [{"type": 1, "text_item": {"text": text}}],
        "context_token": "ctx-1",
    }
    decoded = decode_message(msgspec.Raw(json.dumps(raw).encode()))
    assert decoded is not None
    # The account's batching turns pieces into a message; run its own step on a stand-in of the account.
    account = cast(BotAccount, SimpleNamespace(name="bot-a", _clock=time.time))
    return BotAccount._turn(account, [decoded[0]])


def sms_dm(text: str) -> InboundMessage:
    form = [
        ("MessageSid", f"SM{time.time_ns():032x}"[:34]),
        ("AccountSid", "AC0123456789abcdef0123456789abcdef"),
        ("From", "+15551234567"),
        ("To", SMS_NUMBER),
        ("Body", text),
        ("NumMedia", "0"),
    ]
    return inbound_of(parse_form(form))


class Case(msgspec.Struct, frozen=True, kw_only=True):
    """One migrated chat: the reference's platform name, the user's next message, what the reference recorded."""

    name: str
    reference_platform: str
    next_message: Callable[[str], InboundMessage]
    scope_recorded: bool = True  # whether the reference recorded the chat's workspace (origin scope_id)


CASES = [
    Case(name="telegram dm", reference_platform="telegram", next_message=telegram_dm),
    Case(name="telegram group member", reference_platform="telegram", next_message=telegram_group),
    Case(name="slack dm, workspace recorded", reference_platform="slack", next_message=slack_dm),
    Case(name="slack dm, claimed", reference_platform="slack", next_message=slack_dm, scope_recorded=False),
    Case(name="slack per-user channel", reference_platform="slack", next_message=slack_channel),
    Case(name="discord dm", reference_platform="discord", next_message=discord_dm),
    Case(name="discord guild channel", reference_platform="discord", next_message=discord_channel),
    Case(name="whatsapp", reference_platform="whatsapp", next_message=whatsapp_dm),
    Case(name="signal", reference_platform="signal", next_message=signal_dm),
    Case(name="matrix", reference_platform="matrix", next_message=matrix_dm),
    Case(name="teams", reference_platform="teams", next_message=teams_dm),
    Case(name="feishu dm", reference_platform="feishu", next_message=feishu_dm),
    Case(name="feishu dm, claimed", reference_platform="feishu", next_message=feishu_dm, scope_recorded=False),
    Case(name="feishu group member", reference_platform="feishu", next_message=feishu_group),
    Case(name="wechat (weixin there)", reference_platform="weixin", next_message=wechat_dm),
    Case(name="sms", reference_platform="sms", next_message=sms_dm),
]


def reference_of(case: Case, tmp_path: Path) -> tuple[Path, str]:
    """The reference system's state.db holding the chat of ``case``; its path and the reference's key."""
    live = case.next_message("probe").source
    there = msgspec.structs.replace(live, platform=case.reference_platform, scope_id=None, account_id=None)
    key = build_session_key(there)  # the reference's key: the same fields, no tenancy, nothing escaped here
    key = key.replace("%3A", ":")
    origin = {
        "platform": case.reference_platform,
        "chat_id": live.chat_id,
        "chat_type": live.chat_type,
        "thread_id": live.thread_id,
        "user_id": live.user_id,
        "user_id_alt": live.user_id_alt,
    }
    if case.scope_recorded and live.scope_id is not None:
        origin["scope_id"] = live.scope_id
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    with HermesDb(path) as h:
        h.session(
            SESSION,
            source=case.reference_platform,
            session_key=key,
            chat_type=live.chat_type,
            chat_id=live.chat_id,
            user_id=live.user_id,
            thread_id=live.thread_id,
            origin=origin,
            title="before the move",
        )
        h.messages(SESSION, ["where were we?", "at the schema migration"])
        h.route(key, SESSION, origin=origin)
    return path, key


def import_into(home: Path, reference: Path, *options: str) -> Any:
    result = CliRunner().invoke(
        main, ["import-hermes", str(reference), "--home", str(home), "--yes", "--json", *options]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG, encoding="utf-8")
    return home


@pytest.fixture
def gateway_of(home: Path) -> Iterator[Callable[[], tuple[Gateway, dict[str, FakePlatform]]]]:
    started: list[Gateway] = []

    def start() -> tuple[Gateway, dict[str, FakePlatform]]:
        fakes = {name: FakePlatform(name) for name in PLATFORMS}
        gateway = Gateway(home / "state.db", senders=list(fakes.values()))
        started.append(gateway)
        return gateway, fakes

    yield start
    for gateway in started:
        gateway.stop(timeout=10)


def say(gateway: Gateway, fakes: dict[str, FakePlatform], inbound: InboundMessage) -> str:
    gateway.accept(inbound)
    return fakes[inbound.source.platform].pop().text


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_migrated_user_continues_in_the_imported_session_and_resume_finds_it(
    case: Case,
    tmp_path: Path,
    home: Path,
    gateway_of: Callable[[], tuple[Gateway, dict[str, FakePlatform]]],
) -> None:
    reference, old_key = reference_of(case, tmp_path)
    report = import_into(home, reference)
    assert report["unmapped_sessions"] == []
    ((route,),) = [[r for r in report["routes"] if r["key"] == old_key]]
    claimed = route["action"] == "kept_for_claim"
    assert claimed is (not case.scope_recorded and case.next_message("probe").source.scope_id is not None)

    gateway, fakes = gateway_of()
    first = case.next_message("and now the indexes")
    live_key = build_session_key(first.source)
    assert say(gateway, fakes, first) == "echo: and now the indexes"
    assert gateway.wait_idle()
    assert gateway.session_for(live_key) == SESSION
    with gateway.read() as store:
        assert [m.content for m in store.load_transcript(SESSION)] == [
            "where were we?",
            "at the schema migration",
            "and now the indexes",
            "echo: and now the indexes",
        ]
    assert say(gateway, fakes, case.next_message("/new")) == "Started a new session."
    assert say(gateway, fakes, case.next_message(f"/resume {SESSION}")) == "Resumed before the move."
    assert say(gateway, fakes, case.next_message("/resume")).startswith("Your sessions:\n1. before the move (")
    assert say(gateway, fakes, case.next_message("back again")) == "echo: back again"
    assert gateway.wait_idle()
    assert gateway.session_for(live_key) == SESSION
