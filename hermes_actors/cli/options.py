"""Options and error handling shared by ``hermesd`` and ``hermesctl``.

Where a home's files are is :mod:`hermes_actors.daemon.home`; ``database_path`` is re-exported here for the
commands that open a home's store.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import ParamSpec, TypeVar

import click

from hermes_actors.daemon.home import DATABASE_NAME, HomeError, database_path, make_home
from hermes_actors.errors import HermesError, SchemaVersionError, StoreError
from hermes_actors.store import Store, StoreInterface  # Store: to open the home's SQLite file by its path

__all__ = [
    "DATABASE_NAME",
    "confirm",
    "database_path",
    "dsn_option",
    "home_option",
    "open_reads",
    "open_store",
    "open_writable",
    "open_writes",
    "reports_errors",
    "resolve_home",
]

P = ParamSpec("P")
R = TypeVar("R")


def resolve_home(home: str | None) -> Path:
    """Return ``home``, else ``$HERMES_HOME``, else ``~/.hermes``."""
    chosen = home or os.environ.get("HERMES_HOME") or "~/.hermes"
    return Path(chosen).expanduser()


home_option = click.option(
    "--home",
    type=click.Path(file_okay=False, dir_okay=True),
    default=None,
    help="State directory (default: $HERMES_HOME or ~/.hermes).",
)


class _UnusableHome(click.ClickException):
    """A home that cannot be made or entered: ``Error: ...`` with exit status 2, as ``hermesd`` gives."""

    exit_code = 2


def reports_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn library errors into ``Error: ...`` and exit status 1 (2 for a home that cannot be used), in one place."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except HomeError as exc:
            raise _UnusableHome(str(exc)) from exc
        except HermesError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


def open_store(home: str | None, *, readonly: bool = True) -> StoreInterface:
    """Open the store under ``home``; a missing database is an error naming the command that creates it."""
    path = database_path(resolve_home(home))
    if not readonly:
        make_home(path.parent)  # the database itself is made 0600
    elif not path.exists():
        raise _no_database(path)
    return Store.open(path, readonly=readonly)


def _no_database(path: Path) -> StoreError:
    """The error for a home without its SQLite file: on a cluster replica's home (``cluster.postgres_dsn`` in its
    config.yaml) it points at the cluster's store (``--dsn``, where the command has it), else at creating one."""
    from hermes_actors.daemon.config_file import CONFIG_NAME, load_settings

    home = path.parent
    try:
        dsn = load_settings(home / CONFIG_NAME).cluster.postgres_dsn
    except HermesError:
        dsn = None
    if dsn is None:
        return StoreError(f"no database at {path}; run 'hermesd' or 'hermesctl db migrate' to create it")
    replica = f"{home} is a cluster replica's home (cluster.postgres_dsn in its config.yaml), with no SQLite store"
    context = click.get_current_context(silent=True)
    if context is not None and any(param.name == "dsn" for param in context.command.params):
        return StoreError(
            f"{replica}; the cluster's sessions are in its PostgreSQL store: pass --dsn {shlex.quote(dsn)} "
            "(or set HERMES_CLUSTER_DSN)"
        )
    return StoreError(f"{replica}; this command works on a home's SQLite store only (the cluster's store: {dsn})")


dsn_option = click.option(
    "--dsn",
    envvar="HERMES_CLUSTER_DSN",
    default=None,
    help="Use the PostgreSQL store of a cluster (or $HERMES_CLUSTER_DSN) instead of the home's SQLite store.",
)


def open_reads(home: str | None, dsn: str | None) -> AbstractContextManager[StoreInterface]:
    """The store a read-only command reads: the PostgreSQL store at ``dsn`` when given, else the home's."""
    if dsn is None:
        return open_store(home)
    from hermes_actors.store.pg import PostgresStore

    return PostgresStore.open(dsn, pool_size=1, migrate_schema=False)


def open_writes(home: str | None, dsn: str | None) -> AbstractContextManager[StoreInterface]:
    """The store a command writes: the PostgreSQL store at ``dsn`` when it has the current schema (``hermesctl``
    never migrates a cluster's store under its running hosts), else the home's (:func:`open_writable`)."""
    if dsn is None:
        return open_writable(home)
    from hermes_actors.store.pg import PostgresStore
    from hermes_actors.store.pg.migrations import SCHEMA_VERSION

    store = PostgresStore.open(dsn, pool_size=2, migrate_schema=False)
    found = store.schema_version()
    if found != SCHEMA_VERSION:
        store.close()
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(store.path, found, SCHEMA_VERSION)
        raise StoreError(
            f"{store.path} has schema version {found}, not {SCHEMA_VERSION}: start the cluster with this version's "
            "'hermesd --cluster' (it migrates the store), or fill an empty database with 'hermesctl db copy'"
        )
    return store


def open_writable(home: str | None) -> StoreInterface:
    """The home's store for writing; a missing database is an error naming the fix, never a new empty file."""
    open_store(home).close()
    return open_store(home, readonly=False)


def confirm(question: str, *, yes: bool) -> bool:
    """Ask ``question`` on stderr (no by default), or go ahead with ``--yes``; no answer to read is an error."""
    if yes:
        return True
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        click.echo("", err=True)
        raise click.ClickException(
            "no answer was read from standard input; pass --yes to go ahead without asking"
        ) from None
