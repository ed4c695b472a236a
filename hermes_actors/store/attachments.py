"""Attachment rows, and the media files they name.

Each file that came with a user message is one row of ``attachments``: kind, MIME type, size, the cached file's
path relative to the media directory, its sha256, source URL, name, and why it was not read. The bytes are never
in the database; they live in the media directory next to it (:func:`media_dir_for`), one file per distinct
content, shared by every row that names it.

Rows go with their message (``ON DELETE CASCADE``). Deleting sessions (``Store.delete_session``, pruning) deletes
their rows first, learning the paths (:meth:`Attachments.delete_for_sessions`); the files go once that transaction
has committed, and only those no remaining row names (:meth:`Attachments.remove_unreferenced`), so a file two
sessions received survives the deletion of one. Only files inside the media directory are ever removed. Inside an
enclosing ``store.transaction()`` nothing is removed (the rows could still roll back): call
:meth:`~Attachments.remove_unreferenced` again once it has committed. A file saved for a message still in the
inbox has no row yet; deleting another session that named the same bytes in that window removes it, and that
turn's model then gets the text stand-in without the image.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_actors.messages import Attachment
from hermes_actors.store.records import AttachmentRecord
from hermes_actors.store.sql import SqlDb

__all__ = ["MEDIA_DIR_NAME", "AttachmentRecord", "Attachments", "media_dir_for"]

MEDIA_DIR_NAME = "media"

_log = logging.getLogger(__name__)


def _record(row: tuple[Any, ...]) -> AttachmentRecord:
    return AttachmentRecord(**dict(zip(AttachmentRecord.__struct_fields__, row, strict=True)))


def media_dir_for(database: str | Path) -> Path | None:
    """The media directory of the database file ``database``: ``media`` beside it; ``None`` for an in-memory one."""
    name = str(database)
    if not name or name == ":memory:" or name.startswith("file::memory:"):
        return None
    return Path(name).resolve().parent / MEDIA_DIR_NAME


class Attachments:
    """The ``attachments`` table (``store.attachments``). ``media_dir`` is where the files live: beside a SQLite
    file (:func:`media_dir_for`); a PostgreSQL store has one only when it is given one."""

    __slots__ = ("_clock", "_db", "_media_dir")

    def __init__(self, db: SqlDb, clock: Callable[[], float], media_dir: Path | None) -> None:
        self._db = db
        self._clock = clock
        self._media_dir = media_dir

    @property
    def media_dir(self) -> Path | None:
        """Where the files of the attachments live (``None``: the store manages no files)."""
        return self._media_dir

    def _stored_path(self, path: str | None) -> str | None:
        """``path`` relative to the media directory when it lies inside it, else as it is."""
        if path is None or self._media_dir is None:
            return path
        try:
            return Path(path).resolve().relative_to(self._media_dir).as_posix()
        except ValueError:
            return path

    def add(self, message_id: int, attachment: Attachment, *, at: float | None = None) -> int:
        """Record ``attachment`` as a file of message ``message_id``; return the row id."""
        row_id = self._db.value(
            "INSERT INTO attachments (message_id, kind, mime_type, size, path, sha256, source_url, name, error, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                message_id,
                attachment.kind,
                attachment.mime_type,
                attachment.size,
                self._stored_path(attachment.path),
                attachment.sha256,
                attachment.source_url,
                attachment.name,
                attachment.error,
                self._clock() if at is None else at,
            ),
        )
        return int(row_id)

    def for_session(self, session_id: str) -> list[AttachmentRecord]:
        """Every attachment of the session's messages, in message order."""
        rows = self._db.execute(
            f"SELECT {', '.join('a.' + c for c in AttachmentRecord.__struct_fields__)} FROM attachments a "
            "JOIN messages m ON m.id = a.message_id "
            "WHERE m.session_ref = (SELECT ref FROM sessions WHERE id = ?) ORDER BY a.message_id, a.id",
            (session_id,),
        )
        return [_record(row) for row in rows]

    def delete_for_sessions(self, refs_sql: str, params: Iterable[object]) -> set[str]:
        """Delete the attachment rows of the sessions whose ``ref`` is in ``refs_sql`` (a SELECT with ``params``).

        Returns the file paths those rows named, for :meth:`remove_unreferenced` once the caller has committed.
        (The cascade from their messages would delete the rows too; deleting them first is how the paths are
        learnt, and, being a write, it takes the write lock before anything is read.)
        """
        rows = self._db.execute(
            "DELETE FROM attachments WHERE message_id IN "
            f"(SELECT id FROM messages WHERE session_ref IN ({refs_sql})) RETURNING path",
            tuple(params),
        )
        return {str(path) for (path,) in rows if path is not None}

    def _referenced(self, path: str) -> bool:
        return self._db.value("SELECT 1 FROM attachments WHERE path = ? LIMIT 1", (path,)) is not None

    def _file(self, path: str) -> Path | None:
        """The file a stored relative path names inside the media directory, or ``None`` for anything else."""
        relative = PurePosixPath(path)
        if self._media_dir is None or relative.is_absolute() or ".." in relative.parts or not relative.parts:
            return None
        return self._media_dir.joinpath(*relative.parts)

    def remove_unreferenced(self, paths: Iterable[str]) -> int:
        """Delete the files among ``paths`` (stored paths) that no row names any more; return how many went.

        Does nothing inside an open transaction, since its deletions could still roll back.
        """
        if self._db.in_transaction:
            _log.debug("attachments: not removing files inside an open transaction; call again after the commit")
            return 0
        removed = 0
        for path in sorted(set(paths)):
            target = self._file(path)
            if target is None or self._referenced(path):
                continue
            try:
                target.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                _log.warning("attachments: could not remove %s (%s); remove it by hand", target, exc)
                continue
            removed += 1
            if target.parent != self._media_dir:
                with contextlib.suppress(OSError):  # the shard directory, once it is empty
                    target.parent.rmdir()
        return removed
