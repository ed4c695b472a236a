"""``hermesctl cluster``: cluster mode (the shard hosts on Ray over PostgreSQL) as an operator sees it."""

from __future__ import annotations

import click

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.options import home_option, reports_errors, resolve_home
from hermes_actors.cluster.settings import require_cluster

__all__ = ["cluster"]


@click.group()
def cluster() -> None:
    """Cluster mode: shard hosts on Ray over the PostgreSQL store (the 'cluster:' section of config.yaml)."""


@cluster.command("status")
@home_option
@click.option("--dsn", default=None, help="The PostgreSQL store (default: cluster.postgres_dsn of config.yaml).")
@reports_errors
def cluster_status_command(home: str | None, dsn: str | None) -> None:
    """Show the shard hosts, the shards each holds, the inbox lag per shard, the oldest pending message and the roles.

    \b
    Example:
      hermesctl cluster status --dsn postgresql://hermes@db.internal/hermes
    """
    if dsn is None:
        dsn = require_cluster(home_settings(resolve_home(home)).cluster)
    from hermes_actors.cluster.status import cluster_status, status_text
    from hermes_actors.store.pg import PostgresStore

    with PostgresStore.open(dsn, pool_size=1, migrate_schema=False) as store:
        click.echo(status_text(cluster_status(store)))
