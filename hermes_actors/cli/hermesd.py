"""``hermesd``: the gateway daemon.

It writes ``$HERMES_HOME/config.yaml`` with commented defaults on first start, checks it (a bad file exits 2 naming
the field), and runs :class:`hermes_actors.daemon.process.Daemon` until SIGTERM or Ctrl-C. A home it cannot use (a
full or read-only disk, a read-only state file) exits 2 with one line naming the file and the fix. Its umask keeps
group and other bits off, so whatever it creates (including SQLite's ``-wal``/``-shm``) is private to its owner.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
import threading
from pathlib import Path

import click

from hermes_actors.cli.options import home_option, resolve_home
from hermes_actors.cluster.settings import require_cluster
from hermes_actors.cpu_affinity import CpuAffinityError, cpu_affinity, cpu_scheduling
from hermes_actors.daemon.banner import version
from hermes_actors.daemon.config_file import CONFIG_NAME, Settings, config_error_text
from hermes_actors.daemon.config_template import write_default_config
from hermes_actors.daemon.descriptors import raise_descriptor_limit
from hermes_actors.daemon.home import HomeError, HomeUnusableError, check_home, make_home
from hermes_actors.daemon.logs import configure_logging
from hermes_actors.daemon.pid_lock import PidLock
from hermes_actors.daemon.process import Daemon
from hermes_actors.daemon.startup import check_configuration
from hermes_actors.errors import ConfigError, HermesError
from hermes_actors.runtime.collector import tune_collector

__all__ = ["main"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version(), "--version", prog_name="hermesd", message="%(prog)s %(version)s")
@home_option
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Configuration file (default: HOME/config.yaml, created with commented defaults when absent).",
)
@click.option(
    "--cluster",
    is_flag=True,
    help="Cluster mode: webhooks into PostgreSQL, the shard hosts of the 'cluster:' section on Ray (see README).",
)
@click.option("-v", "--verbose", count=True, help="More log detail (-v: debug).")
@click.option("-q", "--quiet", count=True, help="Less log detail (-q: warnings, -qq: errors).")
def main(home: str | None, config_file: str | None, cluster: bool, verbose: int, quiet: int) -> None:
    """Run the gateway: the OpenAI-compatible API, webhooks and the control socket, on loopback by default.

    \b
    Examples:
      hermesd                                  # defaults; ~/.hermes or $HERMES_HOME
      hermesd --home /srv/hermes -v
      curl http://127.0.0.1:8642/v1/chat/completions -H 'Content-Type: application/json' \\
           -d '{"model": "hermes-agent", "messages": [{"role": "user", "content": "hello"}]}'
    """
    previous_umask = os.umask(0o077)
    os.umask(previous_umask | 0o077)
    try:
        _serve(home, config_file, verbose, quiet, cluster=cluster)
    finally:
        os.umask(previous_umask)  # matters only when called in-process (tests); the daemon exits here


def _serve(home: str | None, config_file: str | None, verbose: int, quiet: int, *, cluster: bool = False) -> None:
    root = resolve_home(home)
    config_path = Path(config_file).expanduser() if config_file else root / CONFIG_NAME
    try:
        make_home(root)
        check_home(root)
        if config_file is None and write_default_config(config_path):
            click.echo(f"hermesd: wrote the default configuration to {config_path}", err=True)
        settings = check_configuration(config_path, home=root, environ=os.environ)
        if cluster:
            require_cluster(settings.cluster)
    except (HomeError, HomeUnusableError) as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except ConfigError as exc:
        click.echo(f"Error: configuration {config_error_text(config_path, exc)}", err=True)
        sys.exit(2)
    except OSError as exc:
        click.echo(f"Error: cannot prepare {root}: {exc.strerror or exc}", err=True)
        sys.exit(1)
    level = max(logging.DEBUG, min(logging.ERROR, _LEVELS[settings.daemon.log_level] + 10 * (quiet - verbose)))
    configure_logging(level, log_format=settings.daemon.log_format)
    listeners = 1 + len(settings.platforms)  # at most: the one port, or each HTTP entry point's own
    raise_descriptor_limit(settings.daemon.http_limits.max_connections * listeners + 256)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(cpu_affinity(settings.daemon.cpu_affinity))  # before any thread: threads inherit it
            stack.enter_context(cpu_scheduling(settings.daemon.cpu_scheduling))
        except CpuAffinityError as exc:
            click.echo(f"Error: {exc} (in {config_path})", err=True)
            sys.exit(2)
        _run(settings, root, config_path, level, cluster=cluster)


def _run(settings: Settings, root: Path, config_path: Path, level: int, *, cluster: bool) -> None:
    if cluster:
        with tune_collector():  # a replica relays many chats' messages and replies: the same tuning
            _serve_cluster(settings, root, level)
        return
    daemon = Daemon(root, config_path, settings, out=sys.stdout)
    try:
        with tune_collector():  # fewer, cheaper collections for a process of many live sessions
            code = daemon.run()
    except HomeUnusableError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except HermesError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


def _serve_cluster(settings: Settings, root: Path, level: int) -> None:
    """Cluster mode until SIGTERM or Ctrl-C: the platforms' entry points (push adapters on every replica, leased ones
    where their role is held), the outbox dispatcher and the shard hosts on Ray (logging at ``level`` in
    ``daemon.log_format``, as this process does)."""
    from hermes_actors.cluster.replica.service import serve_cluster
    from hermes_actors.daemon.admin_key import admin_key
    from hermes_actors.daemon.agent_bindings import host_roster_factory
    from hermes_actors.runtime.agent_roster import DEFAULT_AGENT

    stop = threading.Event()

    def on_sigterm() -> None:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())

    on_sigterm()
    lock = PidLock(root)  # one replica per home; 'hermesctl status' tells a running replica by it
    try:
        lock.acquire()
    except HermesError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        click.echo(f"Error: cannot take {lock.path}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    try:
        serve_cluster(
            settings.cluster,
            stop,
            platforms=settings.platforms,
            media_dir=root / "media",
            key_policy=settings.runtime.key_policy,
            admin_key=admin_key(root, settings, os.environ).key,
            agent_factory=host_roster_factory(settings.agent, settings.agents, settings.bindings, os.environ),
            agent_names=(DEFAULT_AGENT, *settings.agents),
            connected=on_sigterm,  # ray.init replaced it
            http_limits=settings.daemon.http_limits,
            host_logging=functools.partial(configure_logging, level, log_format=settings.daemon.log_format),
            events=settings.events,
            busy=settings.busy,
            jobs=settings.jobs,
            host_cpu_affinity=settings.daemon.cpu_affinity,
        )
    except KeyboardInterrupt:
        stop.set()
    except HermesError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    finally:
        lock.release()


if __name__ == "__main__":
    main()
