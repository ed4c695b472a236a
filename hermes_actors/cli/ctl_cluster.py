"""``hermesctl cluster``: cluster mode (the shard hosts on Ray over PostgreSQL) as an operator sees it, and the
shard hosts' end (``stop-hosts``: they are detached Ray actors that outlive every replica)."""

from __future__ import annotations

import sys

import click
import msgspec

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.options import home_option, reports_errors, resolve_home
from hermes_actors.cluster.settings import require_cluster

__all__ = ["TROUBLE", "cluster"]

TROUBLE = 1
"""The exit status of ``cluster status`` when it found trouble (the ``Error:`` line names it)."""


@click.group()
def cluster() -> None:
    """Cluster mode: shard hosts on Ray over the PostgreSQL store (the 'cluster:' section of config.yaml)."""


@cluster.command("status")
@home_option
@click.option(
    "--dsn",
    envvar="HERMES_CLUSTER_DSN",
    default=None,
    help="The PostgreSQL store (default: $HERMES_CLUSTER_DSN, else cluster.postgres_dsn of config.yaml).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole status as JSON (every shard and role).")
@reports_errors
def cluster_status_command(home: str | None, dsn: str | None, as_json: bool) -> None:
    """Show the shard hosts (heartbeat, incarnation, shards, turns), the replicas, the shards no host holds, the
    pending messages per shard and where the stuck ones are, and the roles. Exit 1 when there is trouble by
    cluster.health (a message pending too long, a shard held by no host, a silent host), naming it.

    \b
    Examples:
      hermesctl cluster status
      hermesctl cluster status --dsn postgresql://hermes@db.internal/hermes --json | jq .stuck
    """
    settings = home_settings(resolve_home(home)).cluster
    expected = settings.hosts if dsn is None else ()  # the config's hosts are this cluster's only from its config
    if dsn is None:
        dsn = require_cluster(settings)
    from hermes_actors.cluster.status import cluster_status, status_text
    from hermes_actors.store.pg import PostgresStore

    with PostgresStore.open(dsn, pool_size=1, migrate_schema=False) as store:
        status = cluster_status(store, health=settings.health, expected_hosts=expected)
    click.echo(msgspec.json.encode(status).decode() if as_json else status_text(status))
    if status.trouble:
        click.echo(f"Error: the cluster is in trouble: {'; '.join(status.trouble)}", err=True)
        sys.exit(TROUBLE)


@cluster.command("stop-hosts")
@home_option
@click.option(
    "--host",
    "names",
    multiple=True,
    help="Stop only this host (repeat for more; default: every host of cluster.hosts).",
)
@reports_errors
def cluster_stop_hosts_command(home: str | None, names: tuple[str, ...]) -> None:
    """Stop the shard hosts on Ray for good: each gives its shards up, then its actor is killed without a restart.

    The hosts are detached Ray actors: they keep running when every replica has stopped, and a changed agent:
    section or a new hermes-actors version reaches them only when they are created again. A running replica
    creates them again within 10 s from its own configuration: stop every replica first to keep them stopped, or
    stop them after upgrading the replicas to have them recreated as configured now. Connects to
    cluster.ray_address (with RAY_AUTH_MODE and RAY_AUTH_TOKEN from the environment when the cluster uses token
    authentication).

    \b
    Examples:
      hermesctl cluster stop-hosts
      hermesctl cluster stop-hosts --host host-2
    """
    settings = home_settings(resolve_home(home)).cluster
    from hermes_actors.cluster.replica.service import connect_ray

    connect_ray(settings)
    import ray

    from hermes_actors.cluster.host.ray_host import stop_hosts

    try:
        wanted = names or settings.hosts
        stopped = stop_hosts(wanted, namespace=settings.namespace)
    finally:
        ray.shutdown()
    for name in wanted:
        click.echo(f"{name}: {'stopped' if name in stopped else 'not running'}")
