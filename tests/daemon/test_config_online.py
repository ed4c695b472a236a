"""``hermesctl config check --online``: the agent endpoint and each platform's token, tried against local fakes."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main as hermesctl
from tests.agents.chat_server import ChatServer, open_chat_server
from tests.platforms.discord_fake import DiscordFake
from tests.platforms.feishu_fake import FakeFeishu
from tests.platforms.matrix_fake import MatrixFake
from tests.platforms.slack_fake import FakeSlack
from tests.platforms.telegram_fake import TelegramFake
from tests.platforms.whatsapp_fake import FakeGraph

TELEGRAM_TOKEN = "111111:" + "A" * 35
UNKNOWN_TELEGRAM_TOKEN = "222222:" + "B" * 35
DISCORD_TOKEN = "MTAxMDEwMTAxMDEwMTAx.GaBcDe.first_bot_token_abcdefghijklmnopqrstu"
SLACK_TOKEN = "xoxb-17-team-one-main"
MATRIX_TOKEN = "syt_Ym90_hermes_bot_0001"


@pytest.fixture
def fakes() -> Iterator[tuple[TelegramFake, FakeSlack, DiscordFake]]:
    slack = FakeSlack(tokens={SLACK_TOKEN: "T1"}).start()
    with TelegramFake() as telegram, DiscordFake() as discord:
        telegram.add_bot(TELEGRAM_TOKEN, username="hermes_test_bot")
        discord.add_bot(DISCORD_TOKEN, "1010101010101010", "hermes-discord")
        try:
            yield telegram, slack, discord
        finally:
            slack.stop()


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with open_chat_server(model="test-model") as server:
        yield server


def _check(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Result:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return CliRunner().invoke(hermesctl, ["config", "check", "--online", "--config", str(path)], env=env or {})


def _platforms(telegram: TelegramFake, slack: FakeSlack, discord: DiscordFake) -> str:
    return (
        f"platforms:\n  telegram:\n    base_url: {telegram.base_url}\n    bots:\n      main:\n"
        f"        token_env: TG_TOKEN\n"
        f"  slack:\n    api_base_url: {slack.api_base_url}\n    apps:\n      main:\n"
        f"        signing_secret: s3cret\n        bot_token_env: SLACK_TOKEN\n"
        f"  discord:\n    api_base_url: {discord.api_base}\n    bots:\n      main:\n        token_env: DC_TOKEN\n"
    )


def test_online_asks_the_agent_for_its_models_and_each_platform_whose_token_works(
    tmp_path: Path, chat: ChatServer, fakes: tuple[TelegramFake, FakeSlack, DiscordFake]
) -> None:
    text = f"agent:\n  base_url: {chat.base_url}\n  model: test-model\n" + _platforms(*fakes)
    env = {"TG_TOKEN": TELEGRAM_TOKEN, "SLACK_TOKEN": SLACK_TOKEN, "DC_TOKEN": DISCORD_TOKEN}
    result = _check(tmp_path, text, env)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()[1:]
    assert lines == [
        f"  agent: ok: {chat.base_url.rstrip('/')}/models lists test-model",
        "  api_server: has no credential check to try; not contacted",
        "  webhook: has no credential check to try; not contacted",
        "  telegram: ok: bot 'main' is @hermes_test_bot",
        "  slack: ok: app 'main' is hermes in workspace T1",
        "  discord: ok: bot 'main' is hermes-discord (id 1010101010101010)",
    ]


def test_online_fails_on_tokens_the_platforms_refuse_naming_each_without_the_token(
    tmp_path: Path, fakes: tuple[TelegramFake, FakeSlack, DiscordFake]
) -> None:
    env = {"TG_TOKEN": UNKNOWN_TELEGRAM_TOKEN, "SLACK_TOKEN": "xoxb-unknown", "DC_TOKEN": DISCORD_TOKEN + "x"}
    result = _check(tmp_path, _platforms(*fakes), env)
    assert result.exit_code == 1, result.output
    assert "  telegram: refused: telegram bot 'main': getMe answered HTTP 401 (Unauthorized); check the token" in (
        result.output
    )
    assert "  slack: refused: slack app 'main': auth.test answered HTTP 200 (invalid_auth); check the bot token" in (
        result.output
    )
    assert "  discord: refused: discord bot 'main': GET /users/@me answered HTTP 401 (401: Unauthorized)" in (
        result.output
    )
    assert UNKNOWN_TELEGRAM_TOKEN not in result.output


def test_online_asks_a_matrix_homeserver_whose_token_it_is(tmp_path: Path) -> None:
    with MatrixFake() as homeserver:
        homeserver.add_user(MATRIX_TOKEN, "@hermes:example.org", "Hermes")
        text = (
            f"platforms:\n  matrix:\n    accounts:\n      main:\n        homeserver: {homeserver.base_url}\n"
            "        access_token_env: MX_TOKEN\n"
        )
        good = _check(tmp_path, text, {"MX_TOKEN": MATRIX_TOKEN})
        refused = _check(tmp_path, text, {"MX_TOKEN": "syt_unknown"})
    assert good.exit_code == 0, good.output
    assert "  matrix: ok: account 'main' is @hermes:example.org" in good.output
    assert refused.exit_code == 1, refused.output
    assert "  matrix: refused: matrix account 'main': GET /account/whoami answered HTTP 401 (M_UNKNOWN_TOKEN)" in (
        refused.output
    )


def test_online_fails_when_the_agent_endpoint_does_not_answer(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    result = _check(tmp_path, f"agent:\n  base_url: http://127.0.0.1:{port}/v1\n  model: m\n")
    assert result.exit_code == 1, result.output
    assert f"  agent: GET http://127.0.0.1:{port}/v1/models failed (" in result.output
    assert "is the endpoint running?" in result.output


def test_without_online_nothing_is_contacted(tmp_path: Path, chat: ChatServer) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"agent:\n  base_url: {chat.base_url}\n  model: test-model\n")
    result = CliRunner().invoke(hermesctl, ["config", "check", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert chat.requests == []


def test_online_asks_feishu_for_a_tenant_token_with_each_apps_id_and_secret(tmp_path: Path) -> None:
    feishu = FakeFeishu()
    feishu.add_app("cli_main", app_secret="main-secret", verification_token="main-token")
    feishu.start()
    try:
        text = (
            "platforms:\n  feishu:\n    apps:\n      main:\n        app_id: cli_main\n"
            f"        base_url: {feishu.base_url}\n        app_secret_env: FS_SECRET\n"
            "        verification_token: main-token\n"
        )
        good = _check(tmp_path, text, {"FS_SECRET": "main-secret"})
        refused = _check(tmp_path, text, {"FS_SECRET": "wrong-secret"})
    finally:
        feishu.stop()
    assert good.exit_code == 0, good.output
    assert "  feishu: ok: app 'main' (cli_main) got a tenant token" in good.output
    assert refused.exit_code == 1, refused.output
    assert "  feishu: refused: feishu app 'main': tenant_access_token answered HTTP 400 (app secret invalid)" in (
        refused.output
    )
    assert "wrong-secret" not in refused.output


def test_online_asks_the_graph_api_for_each_whatsapp_number_with_its_access_token(tmp_path: Path) -> None:
    graph = FakeGraph(tokens={"EAAG-good": "1065"}).start()
    try:
        text = (
            f"platforms:\n  whatsapp:\n    graph_base_url: {graph.base_url}\n    numbers:\n      '1065':\n"
            "        app_secret: s\n        verify_token: v\n        access_token_env: WA_TOKEN\n"
        )
        good = _check(tmp_path, text, {"WA_TOKEN": "EAAG-good"})
        refused = _check(tmp_path, text, {"WA_TOKEN": "EAAG-bad"})
    finally:
        graph.stop()
    assert good.exit_code == 0, good.output
    assert "  whatsapp: ok: number 1065 is +1 555-0100 (Hermes Test)" in good.output
    assert refused.exit_code == 1, refused.output
    assert "  whatsapp: refused: whatsapp number 1065: GET /v21.0/1065 answered HTTP 401 (Invalid OAuth" in (
        refused.output
    )
