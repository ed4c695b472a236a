"""The ``platforms.feishu`` section: the event server and one entry per app (bot), with its secrets resolved.

Each app has an ``app_id`` and ``app_secret`` (to fetch tenant access tokens for sending), the ``verification
token`` Feishu puts in every event, and optionally the ``encrypt key`` that makes Feishu encrypt and sign its
events. Any secret may come from an environment variable instead (``<name>_env``), read when the adapter is built,
so a missing one is a :class:`~hermes_actors.errors.ConfigError` before anything starts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from urllib.parse import urlsplit

import msgspec

from hermes_actors.constraints import (
    AccountName,
    ListenHost,
    Port,
    PositiveBytes,
    PositiveRate,
    PositiveSeconds,
    check_section,
)
from hermes_actors.errors import ConfigError
from platforms.support.secrets import check_secret_source, read_env_secret

__all__ = ["FEISHU_BASE_URL", "LARK_BASE_URL", "AppKeys", "FeishuApp", "FeishuConfig", "resolve_apps"]

FEISHU_BASE_URL = "https://open.feishu.cn"
LARK_BASE_URL = "https://open.larksuite.com"

_SECTION = "platforms.feishu"
_CONSOLE = "the app's page in the developer console"


class FeishuApp(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One app (``platforms.feishu.apps.<name>``); the name is the account in session keys and the URL path.

    ``app_secret`` and ``verification_token`` are required (inline or through ``*_env``); ``encrypt_key`` is
    optional but recommended: with it Feishu encrypts every event and signs every request. ``base_url`` is
    ``https://open.feishu.cn`` for Feishu and ``https://open.larksuite.com`` for Lark.
    """

    app_id: str
    app_secret: str | None = None
    app_secret_env: str | None = None
    verification_token: str | None = None
    verification_token_env: str | None = None
    encrypt_key: str | None = None
    encrypt_key_env: str | None = None
    base_url: str = FEISHU_BASE_URL


class FeishuConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.feishu`` section; events for app ``<name>`` arrive at ``POST /feishu/events/<name>``.

    ``chat_messages_per_second`` and ``app_messages_per_second`` pace sends (Feishu allows about 5 per second to
    one chat and 50 per second per app).
    """

    enabled: bool = True
    host: ListenHost = "127.0.0.1"
    port: Port = 8646
    max_body_bytes: PositiveBytes = 1024 * 1024
    chat_messages_per_second: PositiveRate = 5.0
    app_messages_per_second: PositiveRate = 50.0
    http_timeout_s: PositiveSeconds = 10.0
    apps: dict[AccountName, FeishuApp] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        app_ids: dict[str, str] = {}
        for name, app in self.apps.items():
            _check_app(name, app)
            if app.app_id in app_ids:
                raise ConfigError(
                    f"{_SECTION}.apps.{name}.app_id",
                    f"app {app_ids[app.app_id]!r} has the same app_id; each app is configured once",
                )
            app_ids[app.app_id] = name


def _check_app(name: str, app: FeishuApp) -> None:
    path = f"{_SECTION}.apps.{name}"
    if not app.app_id.strip():
        raise ConfigError(f"{path}.app_id", f"must not be empty; copy the App ID (cli_...) from {_CONSOLE}")
    _check_secret(path, "app_secret", app.app_secret, app.app_secret_env, required=True)
    _check_secret(path, "verification_token", app.verification_token, app.verification_token_env, required=True)
    _check_secret(path, "encrypt_key", app.encrypt_key, app.encrypt_key_env, required=False)
    parts = urlsplit(app.base_url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(
            f"{path}.base_url", f"must be an http(s) URL such as {FEISHU_BASE_URL} (Feishu) or {LARK_BASE_URL} (Lark)"
        )


def _check_secret(path: str, field: str, value: str | None, env: str | None, *, required: bool) -> None:
    missing = (
        f"is required; copy it from {_CONSOLE} and set it as {field} (or name an environment variable holding "
        f"it in {field}_env)"
    )
    check_secret_source(path, field, value, env, example_env="FEISHU_APP_SECRET", missing=missing if required else None)
    if value is not None and not value.strip():
        raise ConfigError(f"{path}.{field}", "is empty; set the value from the developer console or remove it")


class AppKeys(msgspec.Struct, frozen=True, kw_only=True):
    """An app with its secrets resolved; ``aes_key`` (SHA-256 of the encrypt key) is set when events are sealed."""

    name: str
    app_id: str
    app_secret: str
    verification_token: str
    encrypt_key: str | None
    aes_key: bytes | None
    base_url: str  # without a trailing slash
    origins: str  # for the banner: where the secrets come from


def _secret(path: str, field: str, value: str | None, env: str | None, environ: Mapping[str, str]) -> str | None:
    if env is None:
        return value
    return read_env_secret(f"{path}.{field}_env", env, environ, export=f"export the app's {field}")


def resolve_apps(config: FeishuConfig, environ: Mapping[str, str]) -> dict[str, AppKeys]:
    """Every app of ``config`` with secrets read from ``environ``; :class:`ConfigError` names a missing one."""
    apps: dict[str, AppKeys] = {}
    for name, app in config.apps.items():
        path = f"{_SECTION}.apps.{name}"
        secret = _secret(path, "app_secret", app.app_secret, app.app_secret_env, environ)
        token = _secret(path, "verification_token", app.verification_token, app.verification_token_env, environ)
        encrypt_key = _secret(path, "encrypt_key", app.encrypt_key, app.encrypt_key_env, environ)
        if secret is None or token is None:  # FeishuConfig refuses this; an app built by hand may still get here
            raise ConfigError(path, "needs app_secret and verification_token (or their *_env variables)")
        pairs = [
            (app.app_secret, app.app_secret_env),
            (app.verification_token, app.verification_token_env),
            (app.encrypt_key, app.encrypt_key_env),
        ]
        envs = [f"${env}" for _, env in pairs if env]
        inline = any(value is not None for value, _ in pairs)
        apps[name] = AppKeys(
            name=name,
            app_id=app.app_id,
            app_secret=secret,
            verification_token=token,
            encrypt_key=encrypt_key,
            aes_key=hashlib.sha256(encrypt_key.encode()).digest() if encrypt_key else None,
            base_url=app.base_url.rstrip("/"),
            origins="secrets from " + ", ".join([*envs, "config.yaml"] if inline else envs)
            if envs
            else "secrets in config.yaml",
        )
    return apps
