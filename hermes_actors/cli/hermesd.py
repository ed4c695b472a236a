"""``hermesd``: the gateway daemon.

The actor runtime exists (``hermes_actors.gateway.Gateway``), but no entry point that would feed it is built yet
(the OpenAI-compatible API, webhooks, the control socket, platform adapters). Until then ``hermesd`` prepares
``$HERMES_HOME``, creates or migrates the state database and reports what it holds, so a fresh machine can check
its installation end to end.
"""

from __future__ import annotations

import click

from hermes_actors.cli.options import database_path, home_option, reports_errors, resolve_home
from hermes_actors.store import Store

__all__ = ["main"]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@home_option
@click.option(
    "--synchronous",
    type=click.Choice(["NORMAL", "FULL"], case_sensitive=False),
    default="NORMAL",
    show_default=True,
    help="Commit durability: NORMAL survives crashes, FULL also power loss.",
)
@reports_errors
def main(home: str | None, synchronous: str) -> None:
    """Prepare the state directory and database, then report their state."""
    root = resolve_home(home)
    root.mkdir(parents=True, exist_ok=True)
    with Store.open(database_path(root), synchronous=synchronous) as store:
        stats = store.stats()
    click.echo(f"hermesd: home {root}")
    click.echo(f"hermesd: database {database_path(root)} (schema version {stats.schema_version})")
    click.echo(f"hermesd: {stats.sessions} sessions ({stats.live_sessions} live), {stats.messages} messages")
    click.echo("hermesd: no entry point (HTTP API, webhooks, control socket, adapters) is built yet; exiting")
