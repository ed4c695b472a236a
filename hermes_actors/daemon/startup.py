"""What ``hermesd`` checks of a configuration before it starts, and what it builds from it.

One code path for ``hermesd`` and ``hermesctl config check``: :func:`check_configuration` reads the file
(:func:`~hermes_actors.daemon.config_file.load_settings`) and runs :func:`prepare_start` on it, which builds the
agents and every enabled platform's adapter (reading their ``*_env`` secrets and refusing a non-loopback API
without a key) and the sender of the event webhooks (their secrets), loads the ``media.describe`` step and checks
the control socket's path. ``hermesd`` refuses to
start on the :class:`ConfigError` either raises, and ``config check`` says ``ok`` only when neither does.
Building an adapter opens nothing (no socket, no thread), so the check builds and drops them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.config import HttpLimits
from hermes_actors.daemon.admin_key import configured_admin_key, refuse_shared_key
from hermes_actors.daemon.agent_bindings import build_roster
from hermes_actors.daemon.config_file import Settings, load_settings
from hermes_actors.daemon.control import ControlError, check_socket_path
from hermes_actors.daemon.home import database_path, socket_path
from hermes_actors.errors import ConfigError, HermesError
from hermes_actors.media import check_describe
from hermes_actors.ports import Adapter, ReplySender
from hermes_actors.runtime.agent_roster import AgentRoster
from hermes_actors.store import Store  # Store: to open the home's SQLite file by its path
from platforms import registry

__all__ = ["StartPlan", "build_adapters", "check_configuration", "check_ports", "prepare_start", "queued_at"]


@dataclass(frozen=True, kw_only=True)
class StartPlan:
    """What a start runs: the agents, one adapter per enabled platform, and the event webhooks' sender (``events``),
    built but not started."""

    agents: AgentRoster
    adapters: dict[str, Adapter]
    events: ReplySender
    listener: registry.SharedListener | None = None  # daemon.http_port: the one port of every HTTP adapter

    @property
    def agent(self) -> Agent:
        """The default agent (the ``agent:`` section's)."""
        return self.agents.default.agent

    def discard(self) -> None:
        """Release what building took (the agents' connection pools); the adapters hold nothing until started."""
        for named in self.agents.agents:
            close = getattr(named.agent, "close", None)
            if close is not None:
                close()


def build_adapters(
    platforms: Mapping[str, Any], environ: Mapping[str, str], http_limits: HttpLimits
) -> dict[str, Adapter]:
    """One adapter per enabled platform section, by platform name; those listening on ports of their own hold
    their clients to ``http_limits`` (``daemon.http_*``)."""
    return {
        name: registry.build(name, config, environ, http_limits=http_limits)
        for name, config in platforms.items()
        if registry.enabled(config)
    }


def prepare_start(settings: Settings, *, home: Path, environ: Mapping[str, str]) -> StartPlan:
    """Check what a start needs beyond the file's own fields and build the agent and adapters; raise
    :class:`ConfigError` naming the field and the fix for the first thing that would refuse the start."""
    try:
        check_socket_path(socket_path(home, settings))
    except ControlError as exc:
        raise ConfigError("daemon.socket", str(exc)) from None
    check_describe(settings.media)
    configured = configured_admin_key(settings, environ)
    if configured is not None:  # a generated key is never a client's
        refuse_shared_key(configured, settings, environ)
    platforms, listener = settings.platforms, None
    if settings.daemon.http_port:
        # One port on http_host for all: each HTTP entry point is checked as listening there (a key off loopback).
        host = settings.daemon.http_host
        platforms = {name: _moved(config, host) for name, config in platforms.items()}
        listener = registry.shared_listener(
            host=host, port=settings.daemon.http_port, limits=settings.daemon.http_limits
        )
    adapters = build_adapters(platforms, environ, settings.daemon.http_limits)
    for name, adapter in adapters.items():
        if listener is not None:
            listener.attach(name, adapter)
    events = registry.event_sender(settings.events, queued_at=queued_at(database_path(home)), environ=environ)
    agents = build_roster(settings.agent, settings.agents, settings.bindings, environ)
    return StartPlan(agents=agents, adapters=adapters, events=events, listener=listener)


def queued_at(path: Path) -> Callable[[int], float | None]:
    """When an outbox row of the store at ``path`` was queued, read on a connection of its own (an event webhook's
    ``give_up_after_s``, asked after a failed delivery); ``None`` when the store cannot say."""

    def read(outbox_id: int) -> float | None:
        try:
            with Store.open(path, readonly=True) as store:
                return store.deliveries.queued_at(outbox_id)
        except HermesError:
            return None

    return read


def _moved(config: Any, host: str) -> Any:
    """A platform section served on ``host``: its own ``host`` replaced, when it has one."""
    if "host" in getattr(config, "__struct_fields__", ()):
        return msgspec.structs.replace(config, host=host)
    return config


def check_configuration(path: Path, *, home: Path, environ: Mapping[str, str]) -> Settings:
    """Read ``path`` and check everything :func:`prepare_start` checks; return the settings, or raise the
    :class:`ConfigError` that would refuse ``hermesd``'s start on ``home`` with ``environ``."""
    settings = load_settings(path)
    prepare_start(settings, home=home, environ=environ).discard()
    return settings


def check_ports(plan: StartPlan) -> None:
    """Raise the :class:`~hermes_actors.errors.PlatformError` the start would give for an address of ``plan`` that
    cannot be bound now (another program on the port). Only meaningful while no hermesd runs on the home."""
    if plan.listener is not None:
        plan.listener.probe_listen()
    for adapter in plan.adapters.values():
        registry.probe_listen(adapter)
