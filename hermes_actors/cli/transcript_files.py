"""``hermesctl sessions export --format md|html``: each conversation (compression lineage) as one document.

The transcript is the runtime's read of a lineage (:func:`hermes_actors.runtime.operator_reads.transcript`, the
console's), rendered by :mod:`hermes_actors.lifecycle.transcript_markdown` or
:mod:`~hermes_actors.lifecycle.transcript_html`. Attachments link into the home's media directory: by a path
relative to the written file, or by a ``file://`` URL in what goes to standard output.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import click

from hermes_actors.cli.formatting import plural
from hermes_actors.lifecycle.transcript_doc import Link, document_name
from hermes_actors.lifecycle.transcript_html import render_html
from hermes_actors.lifecycle.transcript_markdown import render_markdown
from hermes_actors.operator_port import AttachmentView, TranscriptView
from hermes_actors.runtime.operator_reads import transcript
from hermes_actors.store import StoreInterface

__all__ = ["DocumentFormat", "export_documents"]

DocumentFormat = Literal["md", "html"]

_RENDER: dict[str, Callable[..., str]] = {"md": render_markdown, "html": render_html}
_SUFFIXES: dict[str, tuple[str, ...]] = {"md": (".md", ".markdown"), "html": (".html", ".htm")}


def _media_file(media_dir: Path, attachment: AttachmentView) -> Path | None:
    if attachment.path is None:
        return None
    return Path(attachment.path) if Path(attachment.path).is_absolute() else media_dir / attachment.path


def _file_links(media_dir: Path) -> Link:
    def link(attachment: AttachmentView) -> str | None:
        file = _media_file(media_dir, attachment)
        return file.resolve().as_uri() if file is not None else None

    return link


def _relative_links(media_dir: Path, beside: Path) -> Link:
    def link(attachment: AttachmentView) -> str | None:
        file = _media_file(media_dir, attachment)
        if file is None:
            return None
        return quote(Path(os.path.relpath(file.resolve(), beside.resolve())).as_posix())

    return link


def _write_whole(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` and rename it over ``path``: the file is all of it or absent."""
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}; choose a writable path") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(name, path)
    except OSError as exc:
        Path(name).unlink(missing_ok=True)
        raise click.ClickException(f"writing {path} failed: {exc.strerror or exc}; choose another path") from exc


def _conversations(store: StoreInterface, source: str | None, reference: str | None) -> list[str]:
    """The tips of the conversations to export: the one through ``reference``, else every one (of ``source``)."""
    if reference is not None:
        return [store.lineage_tip(store.resolve_session(reference).id)]
    return [row.tip.id for row in store.list_lineages(source=source, limit=None).rows]


def export_documents(
    store: StoreInterface,
    *,
    fmt: DocumentFormat,
    out: str,
    media_dir: Path,
    source: str | None,
    reference: str | None,
) -> int:
    """Write the chosen conversations as ``fmt`` documents to ``out`` and return how many.

    ``out`` is ``-`` (standard output), a file named with the format's suffix (one conversation), or a directory
    (made when missing) that gets one file per conversation, named after its title and tip id.
    """
    render = _RENDER[fmt]
    tips = _conversations(store, source, reference)
    views: list[TranscriptView] = []

    def view_of(tip: str) -> TranscriptView:
        return transcript(store, tip)

    if out == "-":
        if fmt == "html" and len(tips) > 1:
            raise click.ClickException(
                f"{plural(len(tips), 'conversation')} to export, and standard output takes one HTML page; "
                "name one with --session-id, or give a directory as OUT for one file each"
            )
        for tip in tips:
            sys.stdout.write(render(view_of(tip), link=_file_links(media_dir)))
        sys.stdout.flush()
        return len(tips)
    path = Path(out)
    if path.suffix.lower() in _SUFFIXES[fmt]:
        if len(tips) != 1:
            raise click.ClickException(
                f"{plural(len(tips), 'conversation')} to export, and {path} is one file; name one with "
                "--session-id, or give a directory as OUT for one file each"
            )
        _write_whole(path, render(view_of(tips[0]), link=_relative_links(media_dir, path.parent)))
        return 1
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"cannot make the directory {path}: {exc.strerror or exc}") from exc
    with click.progressbar(tips, label=f"Exporting to {path}", file=sys.stderr) as bar:
        for tip in bar:
            view = view_of(tip)
            views.append(view)
            _write_whole(path / document_name(view, fmt), render(view, link=_relative_links(media_dir, path)))
    return len(views)
