"""The ``platforms.dingtalk`` section: the callback server and one entry per robot, with its secret resolved.

Each robot is an app of the DingTalk developer console with the robot feature: its ``app_key`` (Client ID, also
the robot code unless ``robot_code`` says otherwise) and ``app_secret`` (Client Secret), which both signs the
callbacks DingTalk sends and fetches the access tokens replies need. The secret may come from an environment
variable (``app_secret_env``), read when the adapter is built, so a missing one is a
:class:`~hermes_actors.errors.ConfigError` before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    ListenHost,
    Port,
    PositiveBytes,
    PositiveSeconds,
    Rule,
    check_section,
)
from hermes_actors.errors import ConfigError
from hermes_actors.section_parts import SectionParts
from platforms.support.cluster_parts import split_accounts
from platforms.support.fetch_policy import FetchPolicy, FetchSettings
from platforms.support.secrets import check_secret_source, read_env_secret

__all__ = [
    "DINGTALK_API_URL",
    "DingtalkConfig",
    "DingtalkRobot",
    "RobotKeys",
    "cluster_parts",
    "resolve_robots",
]

DINGTALK_API_URL = "https://api.dingtalk.com"

_SECTION = "platforms.dingtalk"
_PerMinute = Annotated[int, Rule(Meta(ge=1), "must be a positive number of messages")]


class DingtalkRobot(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One robot (``platforms.dingtalk.robots.<name>``); the name is the account in session keys and the URL path."""

    app_key: str
    app_secret: str | None = None
    app_secret_env: str | None = None
    robot_code: str | None = None  # defaults to app_key, as for robots of internal apps


class DingtalkConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.dingtalk`` section; callbacks for robot ``<name>`` arrive at ``POST /dingtalk/robot/<name>``.

    ``mode`` is ``callback`` (DingTalk posts to our URL; the server listens on ``host:port``) or ``stream`` (each
    robot holds a WebSocket to DingTalk and no server is opened). ``api_base_url`` is where access tokens, robot
    sends and stream connections go (``https://api.dingtalk.com``);
    ``chat_messages_per_minute`` paces sends to one conversation (a session webhook takes 20 a minute).
    ``fetch.allow_private`` lets a file's ``downloadUrl`` (from DingTalk's answer) be on a private address; DingTalk
    names no download hosts, so any public host is allowed and ``fetch.hosts`` is not taken.
    """

    enabled: bool = True
    mode: str = "callback"
    host: ListenHost = "127.0.0.1"
    port: Port = 8657
    max_body_bytes: PositiveBytes = 1024 * 1024
    http_timeout_s: PositiveSeconds = 10.0
    chat_messages_per_minute: _PerMinute = 20
    api_base_url: str = DINGTALK_API_URL
    robots: dict[AccountName, DingtalkRobot] = msgspec.field(default_factory=dict)
    fetch: FetchSettings = msgspec.field(default_factory=FetchSettings)

    def __post_init__(self) -> None:
        check_section(self, _SECTION)
        if self.mode not in ("callback", "stream"):
            raise ConfigError(f"{_SECTION}.mode", f"{self.mode!r} is not a mode; use callback or stream")
        check_base_url(f"{_SECTION}.api_base_url", self.api_base_url, DINGTALK_API_URL)
        self.fetch.check(f"{_SECTION}.fetch")
        if self.fetch.hosts:
            raise ConfigError(
                f"{_SECTION}.fetch.hosts",
                "DingTalk names no download hosts, so a file may come from any public host already; only "
                "fetch.allow_private applies here",
            )
        codes: dict[str, str] = {}
        for name, robot in self.robots.items():
            path = f"{_SECTION}.robots.{name}"
            if not robot.app_key.strip():
                raise ConfigError(f"{path}.app_key", "must not be empty; copy the Client ID (AppKey) of the app")
            if robot.robot_code is not None and not robot.robot_code.strip():
                raise ConfigError(f"{path}.robot_code", "must not be empty; remove it to use the app_key")
            check_secret_source(
                path,
                "app_secret",
                robot.app_secret,
                robot.app_secret_env,
                example_env="DINGTALK_APP_SECRET",
                missing="is required; copy the Client Secret (AppSecret) of the app and set it as app_secret "
                "(or name an environment variable holding it in app_secret_env)",
            )
            if robot.app_secret is not None and not robot.app_secret.strip():
                raise ConfigError(f"{path}.app_secret", "is empty; set the Client Secret or use app_secret_env")
            code = robot.robot_code or robot.app_key
            if code in codes:
                raise ConfigError(
                    f"{path}.app_key", f"robot {codes[code]!r} has the same robot code; configure it once"
                )
            codes[code] = name

    @property
    def fetch_policy(self) -> FetchPolicy:
        """Where a file's ``downloadUrl`` may be fetched from: any public host (and ``fetch.allow_private``)."""
        return FetchPolicy(self.fetch, platform="DingTalk", hosts=None, setting=f"{_SECTION}.fetch")


def check_base_url(path: str, url: str, example: str) -> None:
    """Raise :class:`ConfigError` at ``path`` unless ``url`` is an http(s) URL without query or fragment."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(path, f"must be an http(s) URL such as {example}")


class RobotKeys(msgspec.Struct, frozen=True, kw_only=True):
    """A robot with its secret resolved."""

    name: str
    app_key: str
    app_secret: str
    robot_code: str
    origin: str  # for the banner: where the secret comes from


def resolve_robots(config: DingtalkConfig, environ: Mapping[str, str]) -> dict[str, RobotKeys]:
    """Every robot of ``config`` with its secret read from ``environ``; :class:`ConfigError` names a missing one."""
    robots: dict[str, RobotKeys] = {}
    for name, robot in config.robots.items():
        path = f"{_SECTION}.robots.{name}"
        secret = robot.app_secret
        if robot.app_secret_env is not None:
            secret = read_env_secret(
                f"{path}.app_secret_env", robot.app_secret_env, environ, export="export the app's Client Secret"
            )
        if secret is None:  # DingtalkConfig refuses this; a robot built by hand may still get here
            raise ConfigError(f"{path}.app_secret", "is required (or app_secret_env)")
        robots[name] = RobotKeys(
            name=name,
            app_key=robot.app_key,
            app_secret=secret,
            robot_code=robot.robot_code or robot.app_key,
            origin=f"secret from ${robot.app_secret_env}" if robot.app_secret_env else "secret in config.yaml",
        )
    return robots


def cluster_parts(config: DingtalkConfig) -> SectionParts:
    """How the section runs in cluster mode (:func:`~platforms.support.cluster_parts.split_accounts`).

    In stream mode each robot's stream leased on its own, keyed by its name (the ``account_id`` of its messages);
    in callback mode every robot served by every replica.
    """
    return split_accounts(config, "robots", served=lambda robot: config.mode == "callback")
