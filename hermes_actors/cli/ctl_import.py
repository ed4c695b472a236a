"""``hermesctl import-hermes PATH/state.db``: move a reference-system history into hermes-actors.

A thin shell over :func:`hermes_actors.importer.import_hermes`. Unless ``--yes``, a dry run comes first and its
summary and a question go to stderr; the import then runs with a progress bar on stderr, and the summary (or
the report as JSON) goes to stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import msgspec

from hermes_actors import importer
from hermes_actors.cli.formatting import one_line, plural
from hermes_actors.cli.options import (
    database_path,
    dsn_option,
    home_option,
    open_store,
    open_writes,
    reports_errors,
    resolve_home,
)
from hermes_actors.daemon.config_file import CONFIG_NAME, load_settings
from hermes_actors.errors import SchemaVersionError, StoreError
from hermes_actors.importer import (
    ImportReport,
    LiveAccounts,
    LivePlatform,
    RouteAction,
    ScopeRule,
    SourceDatabaseError,
)
from hermes_actors.store import Store, StoreInterface  # Store: to open the home's SQLite file by its path
from hermes_actors.store.migrations import SCHEMA_VERSION
from platforms.registry import PLATFORMS, account_scopes

__all__ = ["import_hermes"]

_NOT_MIGRATED = (RouteAction.REFUSED, RouteAction.UNMAPPED, RouteAction.CONFLICT, RouteAction.SKIPPED)


class _ProgressBar:
    """A progress callback drawing a click progress bar on stderr, created at the first call (which has the total)."""

    def __init__(self, label: str, stack: contextlib.ExitStack) -> None:
        self._label = label
        self._stack = stack
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = self._stack.enter_context(
                click.progressbar(length=max(total, 1), label=self._label, file=sys.stderr)
            )
        self._bar.update(done - self._bar.pos)


def _run(source: Path, store: StoreInterface | None, live: LiveAccounts, *, dry_run: bool, label: str) -> ImportReport:
    with contextlib.ExitStack() as stack:
        return importer.import_hermes(source, store, dry_run=dry_run, progress=_ProgressBar(label, stack), live=live)


def live_accounts(home: str | None, chosen: tuple[str, ...]) -> LiveAccounts:
    """What the adapters of ``home``'s ``config.yaml`` key chats by, with the ``--account PLATFORM=NAME`` choices
    checked (a usage error names the platforms and accounts there are)."""
    settings = load_settings(resolve_home(home) / CONFIG_NAME)
    platforms: dict[str, LivePlatform] = {}
    for name, spec in PLATFORMS.items():
        if spec.accounts is None:
            continue
        section = settings.platforms.get(name)
        platforms[name] = LivePlatform(
            accounts=(account_scopes(name, section) or {}) if section is not None else {},
            scopes=ScopeRule(spec.scopes or "none"),
            section=f"platforms.{name}.{spec.accounts}",
        )
    choices: dict[str, str] = {}
    for text in chosen:
        platform, _, account = text.partition("=")
        if not platform or not account:
            raise click.BadParameter(f"{text!r} is not PLATFORM=NAME, e.g. telegram=main", param_hint="--account")
        known = platforms.get(platform)
        if known is None:
            raise click.BadParameter(
                f"{platform!r} keys no chat by account; the platforms that do: {', '.join(platforms)}",
                param_hint="--account",
            )
        if known.accounts and account not in known.accounts:
            raise click.BadParameter(
                f"{known.section} has no account {account!r} (it has: {', '.join(sorted(known.accounts))})",
                param_hint="--account",
            )
        choices[platform] = account
    return LiveAccounts(platforms=platforms, chosen=choices)


@contextlib.contextmanager
def _existing_store(path: Path) -> Iterator[StoreInterface | None]:
    """The store read-only when the database exists, else ``None``: a dry run must not create it.

    A dry run reads the current schema, so a database at another version is an error naming the fix.
    """
    if not path.exists():
        yield None
        return
    with Store.open(path, readonly=True) as store:
        found = store.schema_version()
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(str(path), found, SCHEMA_VERSION)
        if found < SCHEMA_VERSION:
            raise StoreError(
                f"{path} has schema version {found}; run 'hermesctl db migrate' first (or import with --yes, "
                "which upgrades it)"
            )
        yield store


def _refuse_same_file(source: Path, target: Path) -> None:
    with contextlib.suppress(OSError):
        if os.path.samefile(source, target):
            raise SourceDatabaseError(
                f"{source} is the database of this hermes-actors home too; pass --home to import into another "
                "state directory (both systems default to ~/.hermes)"
            )


def _confirm(question: str) -> bool:
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        click.echo("", err=True)
        raise click.ClickException(
            "no answer was read from standard input; pass --yes to import without asking"
        ) from None


def _question(preview: ImportReport, target: str) -> str:
    messages = plural(preview.messages_imported, "message")
    if preview.compacted_imported:
        messages += f", {preview.compacted_imported} compacted"
    sessions = preview.sessions_imported + preview.sessions_updated
    adopted = (
        f", giving {plural(preview.principals_updated, 'session')} imported earlier their account,"
        if preview.principals_updated
        else ""
    )
    return (
        f"Import {plural(sessions, 'session')} ({messages}) and {plural(preview.routes_migrated, 'route')}{adopted} "
        f"from {preview.source} into {target}?"
    )


def _route_line(report: ImportReport) -> str:
    parts = [f"{n} {action.value.replace('_', ' ')}" for action, n in report.route_counts().items()]
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"{report.routes_migrated} of {report.routes_in_source} migrated{detail}"


def _summary_lines(report: ImportReport, target: str) -> list[str]:
    verb = "Would import" if report.dry_run else "Imported"
    lines = [
        f"{verb} from {report.source} (schema version {report.schema_version}) into {target}:",
        f"  sessions: {report.sessions_imported} new, {report.sessions_updated} updated, "
        f"{report.sessions_unchanged} already imported, {report.sessions_skipped} skipped "
        f"(of {report.sessions_in_source})",
        f"  messages: {report.messages_imported} imported, {report.messages_skipped} skipped, "
        f"{plural(report.compacted_imported, 'compacted row')} kept in '<id>{importer.COMPACTED_SUFFIX}' sessions",
        f"  routes: {_route_line(report)}",
    ]
    if report.principals_updated:
        lines.append(
            f"  principals: {plural(report.principals_updated, 'session')} imported earlier given the platform name, "
            "account or workspace their adapter uses"
        )
    lines += _section("Skipped sessions:", [f"{n.session_id}: {n.reason}" for n in report.skipped_sessions])
    lines += _section("Skipped messages:", [f"{reason}: {n}" for reason, n in report.skipped_messages.items()])
    lines += _section(
        "Messages to note:", [f"{n.session_id} #{n.source_message_id}: {n.reason}" for n in report.message_notes]
    )
    lines += _section(
        "Titles changed:",
        [f"{n.session_id}: {n.source_title!r} -> {n.title!r}: {n.reason}" for n in report.titles],
    )
    lines += _section("Parent links dropped:", [f"{n.session_id}: {n.reason}" for n in report.parent_links_dropped])
    lines += _section(
        "Sessions no adapter here reaches (their users cannot continue or /resume them):",
        [f"{n.session_id}: {n.reason}" for n in report.unmapped_sessions],
    )
    lines += _section(
        "Routes not migrated:",
        [
            f"{n.action.value} {n.key} (session {n.session_id}): {n.reason}"
            for n in report.routes
            if n.action in _NOT_MIGRATED
        ],
    )
    lines += _section(
        "Routes kept for the first workspace to claim:",
        [f"{n.key} (session {n.session_id})" for n in report.routes if n.action is RouteAction.KEPT_FOR_CLAIM],
    )
    lines += _section("End reasons mapped:", [f"{old!r} -> {new}" for old, new in report.end_reasons.items()])
    lines += _section(
        "Values that were not UTF-8 (repaired; the original bytes are in meta):",
        [f"{v.table} {v.row} {v.column}: {v.meta_key}" for v in report.repaired_values],
    )
    lines += _section(
        "Not carried over (no place for them here):",
        [f"{column}: {plural(n, 'row')}" for column, n in report.not_carried.items()],
    )
    lines += _section("Warnings:", report.warnings)
    return [_terminal_line(line) for line in lines]


def _terminal_line(line: str) -> str:
    """``line`` made safe for a terminal (titles and keys come from strangers), its indent kept."""
    indent = len(line) - len(line.lstrip(" "))
    return " " * indent + one_line(line)


def _section(title: str, items: list[str]) -> list[str]:
    return [title, *(f"  {item}" for item in items)] if items else []


def _echo_report(report: ImportReport, target: str, *, as_json: bool, err: bool = False) -> None:
    if as_json and not err:
        click.echo(msgspec.json.encode(report).decode())
        return
    for line in _summary_lines(report, target):
        click.echo(line, err=err)


def _preview_store(home: str | None, dsn: str | None) -> contextlib.AbstractContextManager[StoreInterface | None]:
    """The store a dry run reads: the home's when it exists (:func:`_existing_store`), or the cluster's."""
    if dsn is None:
        return _existing_store(database_path(resolve_home(home)))
    return open_writes(home, dsn)  # read only; its schema must be the one the import would write


def _target_text(home: str | None, dsn: str | None) -> str:
    if dsn is None:
        return str(database_path(resolve_home(home)))
    from hermes_actors.store.pg.db import redact

    return redact(dsn)


@click.command("import-hermes")
@home_option
@dsn_option
@click.argument("state_db", metavar="PATH/state.db", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print what would be imported and write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Import without asking first.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--account",
    "accounts",
    multiple=True,
    metavar="PLATFORM=NAME",
    help="The bot account of PLATFORM the imported chats continue under, when config.yaml has several "
    "(repeatable; e.g. telegram=main).",
)
@reports_errors
def import_hermes(
    home: str | None,
    dsn: str | None,
    state_db: Path,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    accounts: tuple[str, ...],
) -> None:
    """Import sessions, messages and routes from the reference system's state.db (schema version 22).

    The file is only read, in one snapshot, so the other system may keep running. Running it again imports
    nothing twice (only what the other system added since), and an interrupted run can simply be run again.
    Each chat continues under the bot account its platform's adapter uses here (the only one configured in
    config.yaml, or the one --account names) and the workspace it was in, so its user's next message and
    /resume reach the imported session; the report lists what could not be mapped. Keys without a workspace
    where our adapter keys one follow the migration rule: a known workspace moves the key, a DM waits for
    the first workspace to claim it, a channel or group is not routed (its session stays reachable by id).

    With --dsn the history goes into a cluster's PostgreSQL store (it must have the current schema).

    Example: hermesctl import-hermes ~/hermes-backup/state.db --dry-run
    """
    target = _target_text(home, dsn)
    live = live_accounts(home, accounts)
    if dsn is None:
        _refuse_same_file(state_db, database_path(resolve_home(home)))
    importer.HermesSource.open(state_db).close()  # a bad file is an error before anything else happens
    if dry_run or not yes:
        with _preview_store(home, dsn) as store:
            preview = _run(state_db, store, live, dry_run=True, label="Reading")
        if dry_run:
            _echo_report(preview, target, as_json=as_json)
            return
        if not preview.changed:
            click.echo("Nothing new to import.", err=as_json)
            _echo_report(preview, target, as_json=as_json)
            return
        _echo_report(preview, target, as_json=as_json, err=True)
        if not _confirm(_question(preview, target)):
            click.echo("Nothing imported.", err=as_json)
            return
    with open_store(home, readonly=False) if dsn is None else open_writes(home, dsn) as store:
        report = _run(state_db, store, live, dry_run=False, label="Importing")
    _echo_report(report, target, as_json=as_json)
