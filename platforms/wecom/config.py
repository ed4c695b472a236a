"""The ``platforms.wecom`` section: the callback server and one entry per self-built app, with secrets resolved.

An app is a corp's self-built application: the corp id (``corp_id``, the session's scope), the app's ``agent_id``,
its ``secret`` (for ``gettoken``), and the callback's ``token`` and ``encoding_aes_key`` set under "receive
messages". Any secret may come from an environment variable instead (``<name>_env``), read when the adapter is
built, so a missing one is a :class:`~hermes_actors.errors.ConfigError` before anything starts.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    ListenHost,
    Port,
    PositiveBytes,
    PositiveRate,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from platforms.support.secrets import check_secret_source, read_env_secret

__all__ = ["WECOM_API_URL", "AppKeys", "WecomApp", "WecomConfig", "aes_key_of", "resolve_apps"]

WECOM_API_URL = "https://qyapi.weixin.qq.com"

_AES_KEY = re.compile(r"[A-Za-z0-9]{43}")
_SECTION = "platforms.wecom"
_SECRETS = ("secret", "token", "encoding_aes_key")
_CorpId = Annotated[
    str,
    Rule(Meta(pattern=r"^[A-Za-z0-9_-]{1,64}\Z"), "must be the corp id (ww...) from My Company > Company Information"),
]
_AgentId = Annotated[int, Rule(Meta(gt=0), "must be the app's AgentId (a positive number such as 1000002)")]
_ApiUrl = Annotated[
    str, Rule(Meta(pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?\Z"), f"must be an http(s) URL such as {WECOM_API_URL}")
]


class WecomApp(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One app (``platforms.wecom.apps.<name>``); the name is the account in session keys and the URL path."""

    corp_id: _CorpId
    agent_id: _AgentId
    secret: str | None = None
    secret_env: str | None = None
    token: str | None = None
    token_env: str | None = None
    encoding_aes_key: str | None = None
    encoding_aes_key_env: str | None = None


class WecomConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.wecom`` section; callbacks for app ``<name>`` arrive at ``/wecom/callback/<name>``.

    ``api_base_url`` is where ``gettoken``, ``message/send`` and ``media/get`` go (``https://qyapi.weixin.qq.com``).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8658
    max_body_bytes: PositiveBytes = 256 * 1024
    http_timeout_s: PositiveSeconds = 10.0
    user_messages_per_second: PositiveRate = 5.0
    api_base_url: _ApiUrl = WECOM_API_URL
    apps: dict[AccountName, WecomApp] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        seen: dict[tuple[str, int], str] = {}
        for name, app in self.apps.items():
            _check_app(name, app)
            if (app.corp_id, app.agent_id) in seen:
                raise ConfigError(
                    f"{_SECTION}.apps.{name}.agent_id",
                    f"app {seen[(app.corp_id, app.agent_id)]!r} has the same corp_id and agent_id; configure it once",
                )
            seen[(app.corp_id, app.agent_id)] = name


def _check_app(name: str, app: WecomApp) -> None:
    path = f"{_SECTION}.apps.{name}"
    for field in _SECRETS:
        value, env = getattr(app, field), getattr(app, f"{field}_env")
        check_secret_source(
            path,
            field,
            value,
            env,
            example_env=f"WECOM_{field.upper()}",
            missing=f"is required; copy it from the app's page in the WeCom admin console and set it as {field} "
            f"(or name an environment variable holding it in {field}_env)",
        )
        if value is not None and not value.strip():
            raise ConfigError(f"{path}.{field}", "is empty; set the value from the admin console or use *_env")
    if app.encoding_aes_key is not None:
        aes_key_of(f"{path}.encoding_aes_key", app.encoding_aes_key)


def aes_key_of(path: str, encoding_aes_key: str) -> bytes:
    """The 32-byte AES key: base64-decode(EncodingAESKey + "="); :class:`ConfigError` at ``path`` for a bad one."""
    if not _AES_KEY.fullmatch(encoding_aes_key):
        raise ConfigError(path, "must be the 43 letters and digits of the EncodingAESKey")
    try:
        return base64.b64decode(encoding_aes_key + "=", validate=True)
    except (binascii.Error, ValueError):  # pragma: no cover - 43 base64 letters always decode
        raise ConfigError(path, "is not base64") from None


class AppKeys(msgspec.Struct, frozen=True, kw_only=True):
    """An app with its secrets resolved and its AES key decoded."""

    name: str
    corp_id: str
    agent_id: int
    secret: str
    token: str
    aes_key: bytes
    origins: str  # for the banner: where the secrets come from


def resolve_apps(config: WecomConfig, environ: Mapping[str, str]) -> dict[str, AppKeys]:
    """Every app of ``config`` with secrets read from ``environ``; :class:`ConfigError` names a missing one."""
    apps: dict[str, AppKeys] = {}
    for name, app in config.apps.items():
        path = f"{_SECTION}.apps.{name}"
        values: dict[str, str] = {}
        for field in _SECRETS:
            value, env = getattr(app, field), getattr(app, f"{field}_env")
            if env is not None:
                value = read_env_secret(f"{path}.{field}_env", env, environ, export=f"export the app's {field}")
            if value is None:  # WecomConfig refuses this; an app built by hand may still get here
                raise ConfigError(f"{path}.{field}", "is required (or its *_env variable)")
            values[field] = value
        envs = [f"${env}" for env in (getattr(app, f"{f}_env") for f in _SECRETS) if env]
        apps[name] = AppKeys(
            name=name,
            corp_id=app.corp_id,
            agent_id=app.agent_id,
            secret=values["secret"],
            token=values["token"],
            aes_key=aes_key_of(f"{path}.encoding_aes_key", values["encoding_aes_key"]),
            origins="secrets from " + ", ".join(envs) if envs else "secrets in config.yaml",
        )
    return apps
