"""Config rules declared on the types (hermes_actors.constraints): one refusal whether a section is built in Python
or decoded, key paths down into dictionaries and lists, one account-name type across the platform sections."""

from __future__ import annotations

import typing
from typing import Annotated, Any

import msgspec
import pytest
from msgspec import Meta

from hermes_actors.constraints import AccountName, Port, PositiveSeconds, Rule, check_section, decode_section
from hermes_actors.errors import ConfigError
from hermes_actors.lifecycle.policy import ResetMode
from platforms.registry import PLATFORMS, config_type

ACCOUNT_KEYS_OF_THEIR_OWN = {
    "wechat.accounts": "an iLink bot id, such as abc@im.bot: up to 128 characters with '@' and '.'",
    "whatsapp.numbers": "a phone_number_id: digits, which YAML reads as an int when unquoted",
}
"""Platform sections whose accounts are keyed by something other than an AccountName, with the reason."""

Hour = Annotated[int, Rule(Meta(ge=0, le=23), "must be 0..23, not {value}")]


class Bot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    hour: Hour | msgspec.UnsetType = msgspec.UNSET
    hosts: list[Annotated[str, Rule(Meta(pattern=r"^[a-z]+\Z"), "{value!r} is not a host")]] = []


class Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    port: Port = 8000
    timeout_s: PositiveSeconds = 1.0
    bots: dict[AccountName, Bot] = {}
    server_name: AccountName = "main"
    mode: ResetMode = ResetMode.NONE
    inner: Bot | None = None

    def __post_init__(self) -> None:
        check_section(self, "platforms.x")


@pytest.mark.parametrize(
    ("fields", "path", "problem"),
    [
        ({"port": 70000}, "platforms.x.port", "70000 is not a TCP port; use 0..65535 (0 picks a free one)"),
        ({"timeout_s": float("nan")}, "platforms.x.timeout_s", "must be a positive number of seconds"),
        ({"timeout_s": 0}, "platforms.x.timeout_s", "must be a positive number of seconds"),
        ({"bots": {"a b": {}}}, "platforms.x.bots.a b", "a bot name is 1 to 64 letters, digits, '_' or '-'"),
        ({"bots": {"main\n": {}}}, "platforms.x.bots.main\n", "a bot name is 1 to 64"),
        ({"bots": {"ok": {"hour": 24}}}, "platforms.x.bots.ok.hour", "must be 0..23, not 24"),
        ({"bots": {"ok": {"hosts": ["a", "B"]}}}, "platforms.x.bots.ok.hosts[1]", "'B' is not a host"),
        ({"server_name": "a/b"}, "platforms.x.server_name", "a server name is 1 to 64"),
        ({"inner": {"hour": -1}}, "platforms.x.inner.hour", "must be 0..23, not -1"),
    ],
)
def test_a_value_breaking_its_rule_is_refused_alike_built_in_python_and_decoded(
    fields: dict[str, Any], path: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as decoded:
        msgspec.convert(fields, Section)
    assert decoded.value.path == path
    assert str(decoded.value).startswith(f"{path}: {problem}")
    built: dict[str, Any] = {
        key: {name: Bot(**bot) for name, bot in value.items()}
        if key == "bots"
        else Bot(**value)
        if key == "inner"
        else value
        for key, value in fields.items()
    }
    with pytest.raises(ConfigError) as constructed:
        Section(**built)
    assert str(constructed.value) == str(decoded.value)


def test_unset_and_none_values_and_the_defaults_pass() -> None:
    assert Section(inner=None, bots={"ok": Bot()}).bots["ok"].hour is msgspec.UNSET
    assert msgspec.convert({"bots": {"ok": {"hour": 0}}}, Section).bots["ok"].hour == 0


def test_a_default_that_breaks_its_rule_is_a_programming_error() -> None:
    class Broken(msgspec.Struct, frozen=True, kw_only=True):
        port: Port = -1

    with pytest.raises(TypeError, match=r"the default of Broken\.port breaks its rule"):
        check_section(Broken(port=1), "x")


def test_an_account_name_says_what_it_names() -> None:
    class Names(msgspec.Struct, frozen=True, kw_only=True):
        apps: dict[AccountName, int] = {}
        robots: dict[AccountName, int] = {}
        accounts: dict[AccountName, int] = {}

    problems = []
    for field in ("apps", "robots", "accounts"):
        with pytest.raises(ConfigError) as refused:
            check_section(Names(**{field: {"a b": 1}}), "s")
        problems.append(str(refused.value).split(": ", 1)[1].split(" name is")[0])
    assert problems == ["an app", "a robot", "an account"]


def test_a_decode_error_names_the_key_path_and_what_is_allowed() -> None:
    with pytest.raises(ConfigError) as wrong_type:
        decode_section({"bots": {"ok": {}, "bad": {"hour": "x"}}}, Section, "platforms.x")
    assert str(wrong_type.value) == "platforms.x.bots.bad.hour: Expected `int`, got `str`"
    with pytest.raises(ConfigError) as wrong_enum:
        decode_section({"mode": "sometimes"}, Section, "platforms.x")
    assert str(wrong_enum.value).endswith("(expected one of: none, idle, daily, both)")
    with pytest.raises(ConfigError) as unknown:
        decode_section({"bots": {"ok": {"hours": 1}}}, Section, "platforms.x")
    assert str(unknown.value) == "platforms.x.bots.ok.hours: unknown field (expected one of: hour, hosts)"
    with pytest.raises(ConfigError) as key:
        decode_section({"bots": {7: {}}}, Section, "platforms.x")
    assert str(key.value) == "platforms.x.bots: Expected `str`, got `int` (for a key)"


def test_a_nested_section_left_empty_reads_as_empty() -> None:
    assert decode_section({"bots": {"ok": None}, "inner": None}, Section, "platforms.x") == Section(
        bots={"ok": Bot()}, inner=Bot()
    )


def _account_keys(struct: type[msgspec.Struct]) -> dict[str, object]:
    """The key type of each dictionary of structs in ``struct`` (its accounts, bots, apps...)."""
    keys = {}
    for field in msgspec.structs.fields(struct):
        if typing.get_origin(field.type) is dict:
            key, value = typing.get_args(field.type)
            if isinstance(value, type) and issubclass(value, msgspec.Struct):
                keys[field.name] = key
    return keys


def test_every_platform_section_keys_its_accounts_by_the_one_account_name_type() -> None:
    found = {
        f"{name}.{field}": key
        for name in PLATFORMS
        for field, key in _account_keys(config_type(name)).items()
        if f"{name}.{field}" not in ACCOUNT_KEYS_OF_THEIR_OWN
    }
    assert len(found) >= 10
    assert {where: key for where, key in found.items() if key is not AccountName} == {}
