"""``hermesctl sessions export`` and ``hermesctl sessions import``: sessions to a JSONL file and back, or out as
documents to read (``--format md|html``, :mod:`.transcript_files`).

The line layout is :mod:`hermes_actors.store.export`'s (the reference system's: a session's fields beside
``"messages"``); reading a file back, ours or the reference system's, is :mod:`hermes_actors.importer.jsonl`.
The commands are registered on the ``sessions`` group by :mod:`.ctl_sessions`. Progress goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click

from hermes_actors.cli.formatting import one_line, plural
from hermes_actors.cli.options import (
    database_path,
    dsn_option,
    home_option,
    open_reads,
    open_store,
    open_writes,
    reports_errors,
    resolve_home,
)
from hermes_actors.cli.session_text import lineage_text
from hermes_actors.cli.transcript_files import export_documents
from hermes_actors.importer.jsonl import JsonlImport, Lines, import_lines
from hermes_actors.store import StoreInterface
from hermes_actors.store.attachments import MEDIA_DIR_NAME
from hermes_actors.store.export import encode_export_line

__all__ = ["sessions_export", "sessions_import"]

_SPOOL_BYTES = 8 * 1024 * 1024


def _write_stream(lines: Iterable[bytes]) -> None:
    stream = sys.stdout.buffer
    for line in lines:
        stream.write(line)
    stream.flush()


def _write_file(path: Path, lines: Iterable[bytes], total: int) -> None:
    """Write ``lines`` to a temporary file beside ``path`` and rename it: ``path`` gets all of them or nothing."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}; choose a writable path") from exc
    partial = Path(name)
    try:
        with (
            os.fdopen(fd, "wb") as handle,
            click.progressbar(length=total, label=f"Exporting to {path}", file=sys.stderr) as bar,
        ):
            for line in lines:
                handle.write(line)
                bar.update(1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise click.ClickException(
            f"writing {path} failed: {exc.strerror or exc}; nothing was written (free space or choose another path)"
        ) from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _snapshot(store: StoreInterface) -> AbstractContextManager[None]:
    """One consistent view of ``store`` for the block: a PostgreSQL store's ``snapshot``, SQLite's read
    transaction."""
    snapshot: Callable[[], AbstractContextManager[None]] | None = getattr(store, "snapshot", None)
    return snapshot() if snapshot is not None else store.transaction()


@click.command("export")
@home_option
@dsn_option
@click.argument("out", default="-", metavar="[OUT|-]")
@click.option("--source", metavar="PLATFORM", help="Only sessions from this platform.")
@click.option("--session-id", "reference", metavar="ID", help="Only this session (id, unique id prefix or title).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "md", "html"]),
    default="jsonl",
    show_default=True,
    help="JSON lines to import again, or Markdown or HTML to read: one document per conversation.",
)
@reports_errors
def sessions_export(
    home: str | None, dsn: str | None, out: str, source: str | None, reference: str | None, fmt: str
) -> None:
    """Write sessions as JSON lines: one session per line, its fields beside "messages" (all of them, in order).

    OUT is a file, written whole or not at all, or - (the default) for standard output. Each message's content
    is what the agent saw: a string, or the JSON array of an imported multimodal message. 'hermesctl sessions
    import' reads the file back.

    With --format md or html each conversation (a session and its compression continuations, in order) becomes
    one document to read, tool calls folded and attachments linked into the media directory. OUT is then a
    directory (one file per conversation), a file named .md or .html (one conversation: pick it with
    --session-id), or - (the HTML page of one conversation, or Markdown of any number).

    Example: hermesctl sessions export backup.jsonl --source telegram

    Example: hermesctl sessions export --format html --session-id "Trip plans" trip.html
    """
    # One snapshot (SQLite's read transaction, PostgreSQL's REPEATABLE READ), however long the export takes and
    # whatever hermesd or the shard hosts write meanwhile.
    with open_reads(home, dsn) as store, _snapshot(store):
        if fmt in ("md", "html"):
            media_dir = database_path(resolve_home(home)).parent / MEDIA_DIR_NAME
            count = export_documents(
                store,
                fmt="md" if fmt == "md" else "html",
                out=out,
                media_dir=media_dir,
                source=source,
                reference=reference,
            )
            if out != "-":
                click.echo(f"Exported {plural(count, 'conversation')} to {out}.", err=True)
            return
        session_id = None
        if reference is not None:
            record = store.resolve_session(reference)
            session_id = record.id
            lineage = lineage_text(store, record)
            if lineage is not None:  # one segment of a conversation: say so, and where the rest is
                click.echo(f"Exporting session {record.id} only: it is {lineage}.", err=True)
        total = store.count_exports(source=source, session_id=session_id)
        lines = (encode_export_line(e) for e in store.iter_exports(source=source, session_id=session_id))
        if out == "-":
            _write_stream(lines)
            return
        _write_file(Path(out), lines, total)
    click.echo(f"Exported {plural(total, 'session')} to {out}.", err=True)


@contextlib.contextmanager
def _readable(path: str) -> Iterator[Lines]:
    """Yield a function reading the file (or standard input, kept in a temporary file) from its start."""
    with contextlib.ExitStack() as stack:
        if path == "-":
            spool = stack.enter_context(tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES))
            shutil.copyfileobj(sys.stdin.buffer, spool)

            def lines() -> Iterable[bytes]:
                spool.seek(0)
                return spool

        else:
            file = Path(path)
            if not file.is_file():
                raise click.ClickException(
                    f"no file {file}; name a file written by 'hermesctl sessions export', or - for standard input"
                )

            def lines() -> Iterable[bytes]:
                return stack.enter_context(file.open("rb"))

        yield lines


def _echo_import(result: JsonlImport) -> None:
    click.echo(
        f"Imported {plural(result.sessions_imported, 'session')} and {plural(result.messages_imported, 'message')} "
        f"of {plural(result.sessions_in_file, 'session')} in the file."
    )
    if result.sessions_present:
        click.echo(f"Skipped {plural(len(result.sessions_present), 'session')} already here (same id).")
    if result.inactive_messages:
        click.echo(
            f"Left out {plural(result.inactive_messages, 'message')} the reference system had compacted or rewound "
            "away (not active there)."
        )
    for note in result.titles:
        click.echo(f"  title of {note.session_id}: {one_line(note.source_title)!r} -> {note.title!r} ({note.reason})")
    for link in result.parent_links_dropped:
        click.echo(f"  {link.session_id}: {link.reason}")


@click.command("import")
@home_option
@dsn_option
@click.argument("path", metavar="FILE|-")
@reports_errors
def sessions_import(home: str | None, dsn: str | None, path: str) -> None:
    """Read sessions from a 'sessions export' file (ours or the reference system's) into the home.

    The whole file is checked first: a malformed line is an error naming its number, and nothing is imported.
    A session whose id is already here is skipped, so importing a file twice changes nothing. A title another
    session holds here is made unique ("title (2)"); both are reported. - reads standard input.

    Example: hermesctl sessions import backup.jsonl --home ~/.hermes-restored
    """
    # Into a home, the database is created when missing; a cluster's store must have the current schema.
    with (
        _readable(path) as lines,
        open_store(home, readonly=False) if dsn is None else open_writes(home, dsn) as store,
        contextlib.ExitStack() as stack,
    ):
        bars: list[Any] = []

        def progress(done: int, total: int) -> None:
            if not bars:
                bars.append(
                    stack.enter_context(click.progressbar(length=max(total, 1), label="Importing", file=sys.stderr))
                )
            bars[0].update(done - bars[0].pos)

        result = import_lines(lines, store, progress=progress)
    _echo_import(result)
