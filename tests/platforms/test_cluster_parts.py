"""How each platform with long-poll or socket accounts splits its section for cluster mode: one leased section per
such account, keyed by the ``account_id`` its messages carry, and the accounts the platform calls served together."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from hermes_actors.section_parts import SectionParts
from platforms import registry
from platforms.qqbot.config import QqbotConfig
from platforms.registry import LEASED_PLATFORMS
from platforms.telegram import TelegramConfig

TG_A, TG_B = "111111:" + "A" * 35, "222222:" + "B" * 35

SECTIONS: dict[str, tuple[dict[str, Any], str, dict[str, str]]] = {
    # platform: (section, the field holding its accounts, {wire account id: config name})
    "telegram": ({"bots": {"one": {"token": TG_A}, "two": {"token": TG_B}}}, "bots", {"one": "one", "two": "two"}),
    "wechat": (
        {"accounts": {"one": {"token_env": "WX_ONE"}, "two": {"token_env": "WX_TWO"}}},
        "accounts",
        {"one": "one", "two": "two"},
    ),
    "discord": (
        {"bots": {"one": {"token_env": "D_ONE"}, "two": {"token_env": "D_TWO"}}},
        "bots",
        {"one": "one", "two": "two"},
    ),
    "matrix": (
        {
            "accounts": {
                "one": {"homeserver": "https://m.example.org", "access_token_env": "M1"},
                "two": {"homeserver": "https://m.example.org", "access_token_env": "M2"},
            }
        },
        "accounts",
        {"one": "one", "two": "two"},
    ),
    "signal": (
        {"accounts": ["+15550001", "+15550002"]},
        "accounts",
        {"+15550001": "+15550001", "+15550002": "+15550002"},
    ),
    "mattermost": (
        {"url": "https://chat.example.com", "bots": {"one": {"token_env": "MM1"}, "two": {"token_env": "MM2"}}},
        "bots",
        {"one": "one", "two": "two"},
    ),
    "email": (
        {
            "accounts": {
                "one": {
                    "address": "one@example.org",
                    "imap_host": "imap.example.org",
                    "smtp_host": "smtp.example.org",
                    "allowed_senders": ["@example.org"],
                    "password_env": "E1",
                },
                "two": {
                    "address": "two@example.org",
                    "imap_host": "imap.example.org",
                    "smtp_host": "smtp.example.org",
                    "allowed_senders": ["@example.org"],
                    "password_env": "E2",
                },
            }
        },
        "accounts",
        {"one": "one", "two": "two"},
    ),
    "qqbot": (
        {
            "bots": {
                "one": {"app_id": "10001", "secret_env": "Q1", "mode": "websocket"},
                "two": {"app_id": "10002", "secret_env": "Q2", "mode": "websocket"},
            }
        },
        "bots",
        {"10001": "one", "10002": "two"},  # QQ Bot's messages carry the app id
    ),
    "dingtalk": (
        {
            "mode": "stream",
            "robots": {
                "one": {"app_key": "k1", "app_secret_env": "DT1"},
                "two": {"app_key": "k2", "app_secret_env": "DT2"},
            },
        },
        "robots",
        {"one": "one", "two": "two"},
    ),
}


def _parts(platform: str, section: dict[str, Any]) -> SectionParts:
    config = msgspec.convert(section, registry.config_type(platform))
    parts = registry.cluster_parts(platform, config)
    assert parts is not None
    return parts


def test_the_platforms_split_by_account_are_those_with_long_poll_or_socket_accounts() -> None:
    assert set(SECTIONS) == LEASED_PLATFORMS
    assert registry.cluster_parts("slack", registry.config_type("slack")()) is None  # a push platform runs whole


@pytest.mark.parametrize("platform", sorted(SECTIONS))
def test_each_long_poll_or_socket_account_gets_a_section_of_its_own_keyed_by_its_account_id(platform: str) -> None:
    section, field, names = SECTIONS[platform]
    parts = _parts(platform, section)
    assert parts.served is None
    assert parts.served_accounts == frozenset()
    assert set(parts.leased) == set(names)
    for wire_id, name in names.items():
        accounts = getattr(parts.leased[wire_id], field)
        assert list(accounts) == [name]  # only that account
        whole = getattr(msgspec.convert(section, registry.config_type(platform)), field)
        if isinstance(whole, dict):
            assert accounts[name] == whole[name]
        others = {key: value for key, value in section.items() if key != field}
        assert {key: getattr(parts.leased[wire_id], key) for key in others} == others  # the rest as configured


def test_called_accounts_are_served_together_and_the_polled_ones_leased_one_by_one() -> None:
    telegram = _parts(
        "telegram",
        {
            "bots": {
                "hook": {"token": TG_A, "mode": "webhook", "secret_token": "s" * 20},
                "poller": {"token": TG_B},
                "hook2": {"token": "333333:" + "C" * 35, "mode": "webhook", "secret_token": "t" * 20},
            }
        },
    )
    assert isinstance(telegram.served, TelegramConfig)
    assert set(telegram.served.bots) == {"hook", "hook2"}
    assert telegram.served_accounts == {"hook", "hook2"}
    assert set(telegram.leased) == {"poller"}
    qq = _parts(
        "qqbot",
        {
            "bots": {
                "cb": {"app_id": "20001", "secret_env": "Q1"},
                "ws": {"app_id": "20002", "secret_env": "Q2", "mode": "websocket"},
            }
        },
    )
    assert qq.served_accounts == {"20001"}  # by app id, as its replies are addressed
    assert isinstance(qq.served, QqbotConfig)
    assert set(qq.served.bots) == {"cb"}
    assert set(qq.leased) == {"20002"}
    dingtalk = _parts("dingtalk", {"robots": {"one": {"app_key": "k1", "app_secret_env": "DT1"}}})  # callback mode
    assert dingtalk.served_accounts == {"one"}
    assert dingtalk.leased == {}
