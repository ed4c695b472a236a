"""``hermesctl status``, ``hermesctl config check`` and ``hermesctl admin-key``: the daemon's state, the
configuration file and the operator API's key."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import NoReturn

import click
import msgspec

from hermes_actors.cli.options import database_path, home_option, reports_errors, resolve_home
from hermes_actors.daemon.admin_key import admin_key
from hermes_actors.daemon.agent_bindings import roster_text
from hermes_actors.daemon.config_file import CONFIG_NAME, Settings, config_error_text, load_settings
from hermes_actors.daemon.control import StatusReply, connect
from hermes_actors.daemon.home import make_home, socket_path
from hermes_actors.daemon.online import online_checks
from hermes_actors.daemon.pid_lock import lock_holder
from hermes_actors.daemon.startup import check_configuration, check_ports, prepare_start
from hermes_actors.errors import ConfigError, PlatformError
from hermes_actors.messages import ToolServerHealth
from hermes_actors.ports import AgentInfo, Latency, Vitals
from hermes_actors.store import Store  # Store: to open the home's SQLite file by its path
from platforms import registry

__all__ = ["admin_key_command", "config", "home_settings", "status"]

NOT_RUNNING = 3  # as systemctl status: the program is not running
NOT_READY = 1  # running, but /health/ready would answer 503


def home_settings(root: Path) -> Settings:
    """Load ``root/config.yaml`` (defaults when absent); a bad file is an error that names the check command."""
    try:
        return load_settings(root / CONFIG_NAME)
    except ConfigError as exc:
        raise click.ClickException(
            f"configuration {root / CONFIG_NAME}: {exc}; check it with 'hermesctl config check'"
        ) from None


def _uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def _offline_backlog(root: Path) -> tuple[int, int] | None:
    path = database_path(root)
    if not path.exists():
        return None
    with Store.open(path, readonly=True) as store:
        return store.inbox.depth(), store.outbox.backlog()


def _seconds(value: float) -> str:
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f} s" if value < 120 else _uptime(value)


def _latency(latency: Latency | None) -> str:
    if latency is None:
        return "none yet"
    return (
        f"{latency.count}, mean {_seconds(latency.mean_s)}, p50 {_seconds(latency.p50_s)}, "
        f"p95 {_seconds(latency.p95_s)}"
    )


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(counts.items()) if count) or "none"


def _vitals_lines(vitals: Vitals) -> list[str]:
    """The numbers of ``/metrics`` for a person, one topic a line."""
    oldest = f" (oldest waited {_seconds(vitals.inbox_oldest_age_s)})" if vitals.inbox_oldest_age_s is not None else ""
    outbox = ", ".join(
        f"{platform} {count}"
        + (
            f" (oldest {_seconds(vitals.outbox_oldest_age_s[platform])})"
            if platform in vitals.outbox_oldest_age_s
            else ""
        )
        for platform, count in sorted(vitals.outbox_pending.items())
    )
    return [
        f"  turns: {sum(vitals.turns.values())} ({_counts(vitals.turns)}); latency: {_latency(vitals.turn_latency)}",
        f"  agent calls: {_latency(vitals.agent_latency)}; tokens in {vitals.tokens_in}, out {vitals.tokens_out}",
        f"  inbox pending: {vitals.inbox_pending}{oldest}",
        f"  outbox pending: {outbox or 'none'}; retried {vitals.deliveries_retried}, given up "
        f"{vitals.deliveries_given_up}",
        f"  actors: {vitals.live_actors} live, {vitals.activations} activated; passivated: "
        f"{_counts(vitals.passivations)}",
        f"  duplicates refused: {vitals.duplicates}; resets: {_counts(vitals.resets)}",
        f"  store commits: {_latency(vitals.commit_latency)}",
    ]


def _agent_state_line(agent: AgentInfo) -> str:
    """``  agent state: DEGRADED for 2m 10s: cannot connect ...`` (or ``ok for 5m``, ``unknown``)."""
    held = f" for {_uptime(time.time() - agent.since)}" if agent.since is not None else ""
    if agent.state != "degraded":
        return f"  agent state: {agent.state}{held}"
    fails = " (fails readiness: agent.probe.fail_readiness)" if agent.fails_readiness else ""
    return f"  agent state: DEGRADED{held}{fails}: {agent.last_error or 'no error recorded'}"


def _print_state(state: StatusReply) -> None:
    click.echo(f"hermesd running (pid {state.pid}, up {_uptime(time.time() - state.started_at)}) on {state.home}")
    click.echo(f"  agent: {state.agent}")
    if state.ready is not None and state.ready.agent is not None:
        click.echo(_agent_state_line(state.ready.agent))
    if state.ready is not None:
        click.echo(f"  ready: {'yes' if state.ready.ready else 'NO: ' + '; '.join(state.ready.reasons())}")
    click.echo(
        f"  live actors: {state.live_actors}   running turns: {state.running_turns}   queued: {state.queued_messages}"
    )
    click.echo(f"  inbox depth: {state.inbox_depth}   outbox backlog: {state.outbox_backlog}")
    if state.vitals is not None:
        for line in _vitals_lines(state.vitals):
            click.echo(line)
    for platform in state.platforms:
        error = f" ({platform.last_error})" if platform.last_error and platform.state != "failed" else ""
        click.echo(f"  {platform.name}: {platform.state}{error}")
        for line in platform.detail:
            click.echo(f"    {line}")
    if state.ready is not None and state.ready.agent is not None:
        for line in _tool_server_lines(state.ready.agent.tool_servers):
            click.echo(line)


def _tool_server_lines(servers: list[ToolServerHealth]) -> list[str]:
    """One line per MCP server: ``mcp files (stdio, agent default): up, 3 tools; 12 calls, 1 failed; restarted 1``."""
    lines = []
    for server in servers:
        agent = f", agent {server.agent}" if server.agent else ""
        counts = f"{server.tools} tools; {server.calls} calls, {server.failures} failed; restarted {server.restarts}"
        error = f"; last error: {server.last_error}" if server.last_error else ""
        lines.append(f"  mcp {server.name} ({server.transport}{agent}): {server.state}, {counts}{error}")
    return lines


@click.command("status")
@home_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@reports_errors
def status(home: str | None, as_json: bool) -> None:
    """Show whether hermesd runs on the home and is ready, its numbers (turns, latency, queues, actors) and entry
    points (exit 1 when running but not ready, 3 when not running). On a cluster replica's home (cluster.postgres_dsn
    set): whether 'hermesd --cluster' runs on it, and how to see the cluster.

    \b
    Examples:
      hermesctl status
      hermesctl status --json | jq .vitals.inbox_pending
    """
    root = resolve_home(home)
    settings = home_settings(root)
    client = connect(socket_path(root, settings))
    if client is None and settings.cluster.postgres_dsn is not None:
        _replica_status(root, settings.cluster.postgres_dsn, as_json=as_json)
    if client is None:
        backlog = _offline_backlog(root)
        if as_json:
            payload = {"running": False, "home": str(root)}
            if backlog is not None:
                payload |= {"inbox_depth": backlog[0], "outbox_backlog": backlog[1]}
            click.echo(msgspec.json.encode(payload).decode())
        else:
            click.echo(f"hermesd is not running on {root}; start it with: hermesd --home {root}")
            if backlog is not None:
                click.echo(f"  waiting in the store: {backlog[0]} inbound messages, {backlog[1]} replies")
        sys.exit(NOT_RUNNING)
    with client:
        state = client.status()
    ready = state.ready is None or state.ready.ready
    if as_json:
        payload = {"running": True, **msgspec.to_builtins(state)}
        if state.ready is not None:
            payload["ready"] = {"ready": ready, "reasons": state.ready.reasons(), **msgspec.to_builtins(state.ready)}
        click.echo(msgspec.json.encode(payload).decode())
    else:
        _print_state(state)
    if not ready:
        assert state.ready is not None
        click.echo(f"Error: hermesd is not ready: {'; '.join(state.ready.reasons())}", err=True)
        sys.exit(NOT_READY)


def _replica_status(root: Path, dsn: str, *, as_json: bool) -> NoReturn:
    """What a cluster replica's home says: whether ``hermesd --cluster`` runs on it (it holds the pid lock and
    opens no control socket) and where the cluster's state is; exits 0 when it runs, 3 when not."""
    pid = lock_holder(root)
    see = f"hermesctl cluster status --dsn {shlex.quote(dsn)}"
    if as_json:
        payload = {"running": pid is not None, "home": str(root), "cluster_replica": True, "pid": pid, "dsn": dsn}
        click.echo(msgspec.json.encode(payload).decode())
    elif pid is not None:
        click.echo(f"hermesd --cluster runs on {root} (pid {pid}): a replica of the cluster whose store is {dsn}")
        click.echo(f"  sessions, hosts and shards are the cluster's; see them with: {see}")
    else:
        click.echo(
            f"hermesd --cluster is not running on {root} (a cluster replica's home: cluster.postgres_dsn is set)"
        )
        click.echo(f"  start it with: hermesd --home {shlex.quote(str(root))} --cluster")
        click.echo(f"  the cluster may run on without it; see it with: {see}")
    sys.exit(0 if pid is not None else NOT_RUNNING)


@click.group("config")
def config() -> None:
    """Check the configuration file."""


@config.command("check")
@home_option
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, help="File to check.")
@click.option("--online", is_flag=True, help="Also try the agent endpoint and each platform's credentials.")
def config_check(home: str | None, config_file: str | None, online: bool) -> None:
    """Check config.yaml as hermesd does at start: exit 0 when it would start, 2 with the field and the fix when
    not (the same line hermesd prints), 1 when a port it listens on is taken (unless hermesd runs on the home).
    --online also asks the agent endpoint for its models and each platform with a cheap credential check whether
    its tokens work (exit 1 when one does not).

    \b
    Examples:
      hermesctl config check
      hermesctl config check --config ./staging.yaml
      hermesctl config check --online
    """
    root = resolve_home(home)
    path = Path(config_file).expanduser() if config_file else root / CONFIG_NAME
    if not path.exists() and config_file:  # asked to check that very file: nothing there passes
        click.echo(f"Error: {path} does not exist; give the path of an existing file to --config", err=True)
        sys.exit(2)
    try:
        settings = check_configuration(path, home=root, environ=os.environ)
    except ConfigError as exc:
        click.echo(f"Error: configuration {config_error_text(path, exc)}", err=True)
        sys.exit(2)
    if not _ports_free(settings, root):
        sys.exit(1)
    if not path.exists():
        click.echo(f"{path} does not exist; hermesd writes it with commented defaults on first start")
    else:
        agent = roster_text(settings.agent, settings.agents)
        enabled = [name for name, section in settings.platforms.items() if registry.enabled(section)]
        label = "agents" if settings.agents else "agent"
        click.echo(f"{path}: ok ({label}: {agent}; entry points: {', '.join(enabled) or 'none'})")
    if online and not _online_ok(settings, root):
        sys.exit(1)


def _ports_free(settings: Settings, root: Path) -> bool:
    """Whether every address the configuration listens on can be bound now (hermesd's own error line when not);
    while hermesd runs on the home, its ports are its own and are not probed."""
    client = connect(socket_path(root, settings))
    if client is not None:
        client.close()
        click.echo(f"hermesd runs on {root}: the ports it listens on were not probed")
        return True
    plan = prepare_start(settings, home=root, environ=os.environ)
    try:
        check_ports(plan)
    except PlatformError as exc:
        click.echo(f"Error: {exc}", err=True)
        return False
    finally:
        plan.discard()
    return True


def _online_ok(settings: Settings, root: Path) -> bool:
    """Print one line per online check (agent, then each platform); return whether none failed."""
    passed = True
    for check in online_checks(settings, home=root, environ=os.environ):
        click.echo(f"  {check.subject}: {check.outcome}")
        passed = passed and check.ok
    return passed


@click.command("admin-key")
@home_option
@reports_errors
def admin_key_command(home: str | None) -> None:
    """Print the admin key of the API server's operator routes (/api/sessions), which see every session.

    It is daemon.admin_key of config.yaml, else $HERMES_ADMIN_KEY, else the key hermesd generated into
    $HERMES_HOME/admin_key at its first start (generated now if hermesd never ran). Where it comes from goes to
    stderr, so stdout carries the key alone.

    Example: curl -H "Authorization: Bearer $(hermesctl admin-key)" http://127.0.0.1:8642/api/sessions
    """
    root = resolve_home(home)
    make_home(root)
    found = admin_key(root, home_settings(root), os.environ)
    click.echo(f"admin key from {found.describe()}", err=True)
    click.echo(found.key)
