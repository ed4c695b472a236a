"""The daemon's configuration file, ``$HERMES_HOME/config.yaml``: its schema, loader and first-start template.

Every section is optional and every field has a default, so an empty file (or none) is a working configuration:
the echo agent, the OpenAI-compatible API and the webhook endpoint on loopback. A wrong value is a
:class:`ConfigError` whose path names the field (``runtime.max_live_actors``, ``platforms.webhook.routes.x.secret``)
and whose message says what is expected; unknown fields are errors too, so a typo never silently does nothing.
"""

from __future__ import annotations

import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import msgspec
import yaml

from hermes_actors.config import RuntimeConfig, SessionsConfig
from hermes_actors.daemon.agent_settings import AgentSettings
from hermes_actors.errors import ConfigError
from hermes_actors.lifecycle.policy import ResetConfig, decode_reset_config
from hermes_actors.media import MediaConfig
from platforms.registry import PLATFORMS, config_type, new_webhook_secret

__all__ = [
    "CONFIG_NAME",
    "AgentSettings",
    "DaemonSettings",
    "Settings",
    "config_error_text",
    "decode_platforms",
    "decode_settings",
    "default_config_text",
    "load_settings",
]

CONFIG_NAME = "config.yaml"


def _default_platforms() -> dict[str, Any]:
    return {name: config_type(name)() for name, spec in PLATFORMS.items() if spec.on_by_default}


def decode_platforms(obj: object) -> dict[str, Any]:
    """Decode the ``platforms:`` section: each key is a platform of :data:`platforms.registry.PLATFORMS`.

    The API server and the webhook endpoint run unless their section says ``enabled: false``; every other
    platform runs when it has a section.
    """
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ConfigError("platforms", f"must be a mapping of platform names to sections, got {type(obj).__name__}")
    configs = _default_platforms()
    for name, section in obj.items():
        struct = config_type(str(name))
        configs[str(name)] = _decode_section(section, struct, f"platforms.{name}")
    return configs


class DaemonSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``daemon:`` section: the control socket, shutdown drain, time zone, log level and format, and
    ``http_port``: one port for every HTTP entry point on ``http_host`` (behind a reverse proxy; 0: each on its own
    port)."""

    socket: str = "hermesd.sock"  # relative to $HERMES_HOME
    drain_timeout_s: float = 30.0
    timezone: str | None = None  # IANA name for daily resets; default: the machine's local zone
    log_level: typing.Literal["debug", "info", "warning", "error"] = "info"
    log_format: typing.Literal["logfmt", "json"] = "logfmt"  # one line per event either way
    http_port: int = 0
    http_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if not 0 <= self.http_port <= 65535:
            raise ConfigError("daemon.http_port", f"{self.http_port} is not a TCP port; use 1..65535, or 0 for none")
        if not self.http_host:
            raise ConfigError("daemon.http_host", "must not be empty; use 127.0.0.1 behind a reverse proxy")
        if self.drain_timeout_s < 0:
            raise ConfigError("daemon.drain_timeout_s", "must not be negative")
        if self.timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ConfigError(
                    "daemon.timezone", f"unknown time zone {self.timezone!r}; use an IANA name such as Europe/Berlin"
                ) from None


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """All of ``config.yaml``."""

    agent: AgentSettings = AgentSettings()
    runtime: RuntimeConfig = RuntimeConfig()
    sessions: SessionsConfig = SessionsConfig()
    session_reset: ResetConfig = ResetConfig()
    platforms: dict[str, Any] = msgspec.field(default_factory=_default_platforms)  # name -> its config Struct
    daemon: DaemonSettings = DaemonSettings()
    media: MediaConfig = MediaConfig()


_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "agent": AgentSettings,
    "runtime": RuntimeConfig,
    "sessions": SessionsConfig,
    "daemon": DaemonSettings,
    "media": MediaConfig,
}
_AT = re.compile(r"^(?P<message>.*?) - at `(?P<path>\$[^`]*)`$")
_TOKEN = re.compile(r"\.(?P<field>\w+)|\[(?P<index>[^\]]*)\]")
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")


def decode_settings(data: object) -> Settings:
    """Build :class:`Settings` from parsed YAML (``None``: all defaults); raise :class:`ConfigError` on a bad field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("config.yaml", f"must be a mapping of sections, got {type(data).__name__}")
    known = {*_SECTIONS, "session_reset", "platforms"}
    for name in data:
        if name not in known:
            raise ConfigError(str(name), f"unknown section (expected one of: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for name, struct in _SECTIONS.items():
        values[name] = _decode_section(data.get(name), struct, name)
    values["session_reset"] = decode_reset_config(data.get("session_reset"))
    values["platforms"] = decode_platforms(data.get("platforms"))
    return Settings(**values)


def _empty_sections(obj: object, kind: object) -> object:
    """Read a nested section left empty (``api_server:`` with every line commented out, so YAML null) as ``{}``."""
    if obj is None and (
        typing.get_origin(kind) is dict or (isinstance(kind, type) and issubclass(kind, msgspec.Struct))
    ):
        return {}
    if isinstance(obj, dict) and isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return {key: _empty_sections(value, _field_type(kind, str(key))) for key, value in obj.items()}
    if isinstance(obj, dict) and _value_type(kind) is not None:
        return {key: _empty_sections(value, _value_type(kind)) for key, value in obj.items()}
    return obj


def _decode_section(obj: object, struct: type[msgspec.Struct], section: str) -> Any:
    try:
        return msgspec.convert(_empty_sections(obj, struct), struct)
    except msgspec.ValidationError as exc:
        raise _translate(str(exc), obj, struct, section) from None
    except ConfigError as exc:
        if exc.path.startswith(section) or not section.startswith("platforms."):
            raise
        # a platform's own check names its field relative to the section (or as platforms.<name>.<field>)
        relative = exc.path.removeprefix("platforms.").split(".", 1)[-1] if "." in exc.path else exc.path
        raise ConfigError(f"{section}.{relative}", str(exc)[len(exc.path) + 2 :]) from None


def _translate(text: str, obj: object, struct: type[msgspec.Struct], section: str) -> ConfigError:
    """Turn msgspec's ``message - at `$.a[...].b``` into a dotted path with real dictionary keys."""
    match = _AT.match(text)
    message, at = (match["message"], match["path"]) if match else (text, "$")
    names: list[str] = [section]
    node: object = obj
    kind: object = struct
    for token in _TOKEN.finditer(at):
        if token["field"] is not None:
            names.append(token["field"])
            node = node.get(token["field"]) if isinstance(node, dict) else None
            kind = _field_type(kind, token["field"])
        elif isinstance(node, dict):
            key, node = _first_invalid(node, _value_type(kind))
            names.append(key)
            kind = _value_type(kind)
        else:
            names[-1] += f"[{token['index']}]"
    unknown = _UNKNOWN.match(message)
    if unknown is not None:
        names.append(unknown["field"])
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            expected = ", ".join(f.name for f in msgspec.structs.fields(kind))
            message = f"unknown field (expected one of: {expected})"
        else:
            message = "unknown field"
    return ConfigError(".".join(names), message)


def _field_type(kind: object, name: str) -> object:
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        for field in msgspec.structs.fields(kind):
            if field.name == name:
                return _unwrap(field.type)
    return None


def _value_type(kind: object) -> object:
    args = typing.get_args(kind)
    return _unwrap(args[1]) if typing.get_origin(kind) is dict and len(args) == 2 else None


def _unwrap(kind: object) -> object:
    """``X | None`` → ``X``."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        return options[0] if len(options) == 1 else kind
    return kind


def _first_invalid(entries: dict[Any, Any], entry: object) -> tuple[str, object]:
    # msgspec reports a failing dict value as "[...]": the first entry that fails on its own is the one.
    if isinstance(entry, type):
        for key, value in entries.items():
            try:
                msgspec.convert(value, entry)
            except (msgspec.ValidationError, ConfigError):
                return str(key), value
    return "...", None


def load_settings(path: Path, *, home: Path | None = None) -> Settings:
    """Read and check ``path``; a missing file is all defaults. Raises :class:`ConfigError` naming the field.

    ``agent.system_prompt_file`` is read here (relative to ``home``, by default the directory of ``path``) and given
    as an absolute path, so hermesd and ``hermesctl config check`` refuse the same unreadable file.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Settings()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot be read ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), f"is not valid YAML{line}: {problem}") from None
    return _with_prompt_file(decode_settings(data), path.parent if home is None else home)


def _with_prompt_file(settings: Settings, home: Path) -> Settings:
    """``settings`` with ``agent.system_prompt_file`` checked readable and made absolute (from ``home``)."""
    agent = settings.agent
    if agent.system_prompt_file is None:
        return settings
    agent.read_system_prompt(home)
    absolute = Path(agent.system_prompt_file).expanduser()
    if not absolute.is_absolute():
        absolute = (home / absolute).absolute()
    return msgspec.structs.replace(settings, agent=msgspec.structs.replace(agent, system_prompt_file=str(absolute)))


def write_default_config(path: Path) -> bool:
    """Create ``path`` with the commented defaults (and a fresh webhook secret) unless it exists; return whether."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds a secret
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(default_config_text(new_webhook_secret()))
    return True


def default_config_text(webhook_secret: str) -> str:
    """The first-start ``config.yaml``: every setting at its default, commented out, and one webhook route."""
    return f"""\
# hermes-actors configuration. Every setting is optional; the commented values are the defaults.
# Check this file with: hermesctl config check        Reload a running daemon with: kill -HUP $(cat hermesd.pid)

agent:
  # An OpenAI-compatible chat-completions endpoint. Without base_url the built-in echo agent answers.
  # base_url: http://127.0.0.1:8000/v1
  # model: my-model
  # api_key_env: OPENAI_API_KEY      # the environment variable holding the key
  # timeout_s: 120
  # max_retries: 2
  # context_window: 128000
  # vision: false                    # true: the model takes images (they are sent with the turn they came in)
  # system_prompt: null              # text first in every session's system message (or system_prompt_file:
  #                                  # prompt.md, relative to this directory; not both). Frozen per session.

platforms:
  api_server:
    # enabled: true
    # host: 127.0.0.1                # a non-loopback host requires a key
    # port: 8642
    # key: null                      # bearer key; or set the variable named by key_env
    # key_env: HERMES_API_KEY
    # model_name: hermes-agent
    # request_timeout_s: 300
    # max_body_bytes: 4194304
    # keepalive_s: 15                # SSE keep-alive comment interval while a streamed turn runs
  webhook:
    # enabled: true
    # host: 127.0.0.1
    # port: 8644
    routes:
      default:
        # Standard Webhooks secret: sign requests to POST /webhooks/default with it.
        secret: {webhook_secret}
        # text: text                 # where the message text is in the JSON body (dotted path)
        # chat_id: chat_id
        # user_id: user_id
        # callback_url: http://127.0.0.1:9000/replies   # where replies are POSTed; else only stored
  # A platform runs when it has a section here. Each account's name is part of its session keys.
  # telegram:
  #   bots:
  #     main:
  #       token_env: TELEGRAM_BOT_TOKEN  # long-polls getUpdates; or mode: webhook with secret_token_env
  # slack:
  #   apps:
  #     main:
  #       signing_secret_env: SLACK_SIGNING_SECRET
  #       bot_token_env: SLACK_BOT_TOKEN  # Request URL: https://<public host>/slack/events/main
  # feishu:
  #   apps:
  #     main:
  #       app_id: cli_example
  #       app_secret_env: FEISHU_APP_SECRET
  #       verification_token_env: FEISHU_VERIFICATION_TOKEN
  #       encrypt_key_env: FEISHU_ENCRYPT_KEY  # needs: pip install 'hermes-actors[feishu]'
  # wechat:
  #   accounts:
  #     main:
  #       token_env: WECHAT_ILINK_TOKEN
  # discord:
  #   bots:
  #     main:
  #       token_env: DISCORD_BOT_TOKEN   # enable "Message Content Intent" on the bot's page
  # whatsapp:
  #   numbers:
  #     "106540352242922":             # the phone_number_id (WhatsApp > API Setup), not the phone number
  #       app_secret_env: WHATSAPP_APP_SECRET
  #       verify_token_env: WHATSAPP_VERIFY_TOKEN
  #       access_token_env: WHATSAPP_ACCESS_TOKEN  # callback URL: https://<public host>/whatsapp/webhook
  # matrix:
  #   accounts:
  #     main:
  #       homeserver: https://matrix.example.org
  #       access_token_env: MATRIX_ACCESS_TOKEN
  # signal:
  #   url: http://127.0.0.1:8080       # signal-cli daemon --http 127.0.0.1:8080 --receive-mode=on-connection
  #   accounts: ["+15550001"]
  # mattermost:
  #   url: https://chat.example.com    # the server as users open it; the websocket is /api/v4/websocket
  #   bots:
  #     main:
  #       token_env: MATTERMOST_BOT_TOKEN  # a bot account's access token (Integrations > Bot Accounts)
  # sms:                               # Twilio: "A message comes in" webhook, HTTP POST
  #   port: 8655                       # serves POST /sms/twilio
  #   public_url: https://<public host>/sms/twilio  # the webhook URL as entered on the number (it is signed)
  #   account_sid: AC0123456789abcdef0123456789abcdef  # Account SID from the Twilio Console
  #   auth_token_env: TWILIO_AUTH_TOKEN
  #   numbers: ["+15550001111"]
  # teams:                           # needs: pip install 'hermes-actors[teams]'
  #   port: 3978                       # messaging endpoint: https://<public host>/teams/messages/main
  #   bots:
  #     main:
  #       app_id: 00000000-0000-0000-0000-000000000000  # the Azure Bot's Microsoft App ID
  #       app_password_env: TEAMS_APP_PASSWORD
  # email:
  #   accounts:
  #     main:
  #       address: agent@example.org     # the From of replies; IMAP/SMTP log in as it (or username:)
  #       imap_host: imap.example.org    # port 993, imap_security: tls (or starttls / none)
  #       smtp_host: smtp.example.org    # port 587, smtp_security: starttls (or tls / none)
  #       password_env: EMAIL_PASSWORD
  #       allowed_senders: ["alice@example.com", "@example.com"]  # only their mail starts turns
  #       sessions: sender               # or thread: one session per mail thread
  #       trusted_authserv_id: mx.example.org  # only mail this server marks dmarc=pass (From is easy to forge)

runtime:
  # passivate_after_s: 300           # an idle session's actor stops after this long (it restarts on demand)
  # max_live_actors: 5000
  # pending_soft_limit: 4
  # pending_hard_limit: 64
  # max_concurrent_agent_calls: 256
  # agent_timeout_s: 120
  # reset_triggers: [/new, /reset]
  # save_memory_on: [idle, daily, new, reset]  # ends that run a save-memory turn first; [] for none
  # context_window: 128000           # tokens, when the agent does not say; no turn is sent over it
  # summary_max_tokens: 0            # a compression summary's budget; 0: a tenth of the context window
  # auto_titles: true                # title a session after its first exchange
  # model_message_cap_chars: 16000   # per message of history sent to the model; 0: no cap
  # queue_retention_days: 8          # answered inbox rows (the redelivery dedupe) and sent replies are kept this long

sessions:
  # auto_prune: false                # delete ended sessions older than retention_days at start
  # retention_days: 90
  # search_scope: user               # what the agent's session_search sees: user | chat | tenant | all
  # search_scope_platforms: {{}}     # per platform, e.g. {{cli: all}}

session_reset:
  # mode: none                       # none | idle | daily | both
  # idle_minutes: 1440
  # at_hour: 4

media:
  # Files that come with messages are saved once under <home>/media and listed in the transcript.
  # max_bytes: 20971520              # larger files are not read; the reply says so
  # allowed_kinds: [image, audio, video, document]
  # excerpt_bytes: 4096              # a text file's first bytes go into the conversation as its stand-in
  # describe: null                   # module:function(path, attachment) -> a short description

daemon:
  # socket: hermesd.sock             # control socket, relative to the home directory
  # drain_timeout_s: 30              # SIGTERM waits this long for running turns
  # timezone: null                   # for daily resets; default: the machine's zone
  # log_level: info
  # log_format: logfmt               # logfmt | json (one JSON object a line)
  # http_port: 0                     # one port for the API and every webhook (behind a reverse proxy): the API
  # http_host: 127.0.0.1             # at /v1 and /health, /webhooks/..., /slack/..., /feishu/..., /whatsapp/...,
  #                                  # /telegram/...; the entry points' own ports stay closed. 0: off
"""


def config_error_text(path: Path, error: ConfigError) -> str:
    """``PATH: field: problem`` for a field's error, ``PATH: problem`` for the file's own (unreadable, not YAML),
    which names the file already: each error says its file once."""
    return str(error) if error.path == str(path) else f"{path}: {error}"
