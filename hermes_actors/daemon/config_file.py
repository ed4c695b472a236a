"""The daemon's configuration file, ``$HERMES_HOME/config.yaml``: its schema and loader (the first-start template
is :mod:`hermes_actors.daemon.config_template`).

Every section is optional and every field has a default, so an empty file (or none) is a working configuration:
the echo agent, the OpenAI-compatible API and the webhook endpoint on loopback. A wrong value is a
:class:`ConfigError` whose path names the field (``runtime.max_live_actors``, ``platforms.webhook.routes.x.secret``)
and whose message says what is expected; unknown fields are errors too, so a typo never silently does nothing.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml
from msgspec import Meta

from hermes_actors.cluster.settings import ClusterSettings
from hermes_actors.config import BusyConfig, EventsConfig, HttpLimits, RuntimeConfig, SessionsConfig
from hermes_actors.constraints import ListenHost, NonNegativeSeconds, Rule, check_section, decode_section
from hermes_actors.cpu_affinity import cpu_affinity_problem, cpu_scheduling_problem
from hermes_actors.daemon.agent_bindings import decode_agents, decode_bindings, with_prompt_file
from hermes_actors.daemon.agent_settings import AgentSettings
from hermes_actors.errors import ConfigError
from hermes_actors.lifecycle.policy import ResetConfig, decode_reset_config
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.media import MediaConfig
from hermes_actors.runtime.agent_roster import AgentBinding
from platforms.registry import PLATFORMS, config_type

__all__ = [
    "CONFIG_NAME",
    "AgentSettings",
    "DaemonSettings",
    "Settings",
    "config_error_text",
    "decode_platforms",
    "decode_settings",
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


_MIN_ADMIN_KEY = 16
_HttpPort = Annotated[int, Rule(Meta(ge=0, le=65535), "{value} is not a TCP port; use 1..65535, or 0 for none")]
_HeaderTimeout = Annotated[float, Rule(Meta(gt=0, le=3600), "must be more than 0 and at most 3600 seconds")]
_IdleTimeout = Annotated[float, Rule(Meta(gt=0, le=86400), "must be more than 0 and at most 86400 seconds")]
_Connections = Annotated[int, Rule(Meta(ge=1), "must be at least 1 connection per listener")]


class DaemonSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``daemon:`` section: the control socket, shutdown drain, time zone, log level and format,
    ``http_port``: one port for every HTTP entry point on ``http_host`` (behind a reverse proxy; 0: each on its own
    port), ``http_header_timeout_s``, ``http_idle_timeout_s`` and ``http_max_connections``: what every HTTP listener
    holds clients to (:class:`~hermes_actors.config.HttpLimits`), and ``admin_key``: the key of the API server's
    operator routes (unset: ``$HERMES_ADMIN_KEY``, else one generated into ``$HERMES_HOME/admin_key``), and
    ``cpu_affinity``: the CPUs the process runs on (:mod:`hermes_actors.cpu_affinity`: ``one``, the default, keeps
    the one it starts on; ``all``; or a list of CPU numbers), and ``cpu_scheduling``: ``batch`` (the default: its
    threads under ``SCHED_BATCH``) or ``normal``."""

    socket: str = "hermesd.sock"  # relative to $HERMES_HOME
    drain_timeout_s: NonNegativeSeconds = 30.0
    timezone: str | None = None  # IANA name for daily resets; default: the machine's local zone
    log_level: typing.Literal["debug", "info", "warning", "error"] = "info"
    log_format: typing.Literal["logfmt", "json"] = "logfmt"  # one line per event either way
    http_port: _HttpPort = 0
    http_host: ListenHost = "127.0.0.1"
    http_header_timeout_s: _HeaderTimeout = 10.0
    http_idle_timeout_s: _IdleTimeout = 75.0
    http_max_connections: _Connections = 512
    admin_key: str | None = None
    cpu_affinity: str | tuple[int, ...] = "one"
    cpu_scheduling: str = "batch"

    @property
    def http_limits(self) -> HttpLimits:
        """The ``http_*`` limits every HTTP listener of the daemon applies."""
        return HttpLimits(
            header_timeout_s=self.http_header_timeout_s,
            idle_timeout_s=self.http_idle_timeout_s,
            max_connections=self.http_max_connections,
        )

    def __post_init__(self) -> None:
        check_section(self, "daemon")
        if (problem := cpu_affinity_problem(self.cpu_affinity)) is not None:
            raise ConfigError("daemon.cpu_affinity", problem)
        if (problem := cpu_scheduling_problem(self.cpu_scheduling)) is not None:
            raise ConfigError("daemon.cpu_scheduling", problem)
        if self.admin_key is not None and len(self.admin_key.strip()) < _MIN_ADMIN_KEY:
            raise ConfigError(
                "daemon.admin_key",
                f"must be at least {_MIN_ADMIN_KEY} characters (it opens every session); remove it to have hermesd "
                "generate one into $HERMES_HOME/admin_key",
            )
        if self.timezone is not None:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ConfigError(
                    "daemon.timezone", f"unknown time zone {self.timezone!r}; use an IANA name such as Europe/Berlin"
                ) from None


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """All of ``config.yaml``. ``agent`` is the agent named ``default``; ``agents`` and ``bindings`` add named
    agents and choose among them (:mod:`hermes_actors.daemon.agent_bindings`)."""

    agent: AgentSettings = AgentSettings()
    agents: dict[str, AgentSettings] = msgspec.field(default_factory=dict)
    bindings: tuple[AgentBinding, ...] = ()
    runtime: RuntimeConfig = RuntimeConfig()
    sessions: SessionsConfig = SessionsConfig()
    session_reset: ResetConfig = ResetConfig()
    platforms: dict[str, Any] = msgspec.field(default_factory=_default_platforms)  # name -> its config Struct
    daemon: DaemonSettings = DaemonSettings()
    media: MediaConfig = MediaConfig()
    cluster: ClusterSettings = ClusterSettings()
    events: EventsConfig = EventsConfig()
    busy: BusyConfig = BusyConfig()
    jobs: JobsConfig = JobsConfig()


_SECTIONS: dict[str, type[msgspec.Struct]] = {
    "agent": AgentSettings,
    "runtime": RuntimeConfig,
    "sessions": SessionsConfig,
    "daemon": DaemonSettings,
    "media": MediaConfig,
    "cluster": ClusterSettings,
    "events": EventsConfig,
    "busy": BusyConfig,
    "jobs": JobsConfig,
}


def decode_settings(data: object) -> Settings:
    """Build :class:`Settings` from parsed YAML (``None``: all defaults); raise :class:`ConfigError` on a bad field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("config.yaml", f"must be a mapping of sections, got {type(data).__name__}")
    known = {*_SECTIONS, "session_reset", "platforms", "agents", "bindings"}
    for name in data:
        if name not in known:
            raise ConfigError(str(name), f"unknown section (expected one of: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for name, struct in _SECTIONS.items():
        values[name] = _decode_section(data.get(name), struct, name)
    values["session_reset"] = decode_reset_config(data.get("session_reset"))
    values["platforms"] = decode_platforms(data.get("platforms"))
    values["agents"] = decode_agents(data.get("agents"), _decode_section)
    values["bindings"] = decode_bindings(data.get("bindings"), values["agents"], _decode_section)
    return Settings(**values)


def _decode_section(obj: object, struct: type[msgspec.Struct], section: str) -> Any:
    try:
        return decode_section(obj, struct, section)
    except ConfigError as exc:
        if exc.path.startswith(section) or not section.startswith("platforms."):
            raise
        # a platform's own check names its field relative to the section (or as platforms.<name>.<field>)
        relative = exc.path.removeprefix("platforms.").split(".", 1)[-1] if "." in exc.path else exc.path
        raise ConfigError(f"{section}.{relative}", str(exc)[len(exc.path) + 2 :]) from None


def load_settings(path: Path, *, home: Path | None = None) -> Settings:
    """Read and check ``path``; a missing file is all defaults. Raises :class:`ConfigError` naming the field.

    Each agent's ``system_prompt_file`` is read here (relative to ``home``, by default the directory of ``path``)
    and given as an absolute path, so hermesd and ``hermesctl config check`` refuse the same unreadable file.
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
    """``settings`` with each agent's ``system_prompt_file`` checked readable and made absolute (from ``home``)."""
    agents = {name: with_prompt_file(a, home, f"agents.{name}") for name, a in settings.agents.items()}
    return msgspec.structs.replace(settings, agent=with_prompt_file(settings.agent, home, "agent"), agents=agents)


def config_error_text(path: Path, error: ConfigError) -> str:
    """``PATH: field: problem`` for a field's error, ``PATH: problem`` for the file's own (unreadable, not YAML),
    which names the file already: each error says its file once."""
    return str(error) if error.path == str(path) else f"{path}: {error}"
