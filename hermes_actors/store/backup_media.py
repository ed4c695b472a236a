"""The media files of a backup: the home's ``media`` directory copied to ``DEST.media`` beside the copy, and back.

The database never holds attachments' bytes (:mod:`.attachments`): they live in ``media`` next to ``state.db``,
one file per content, named by its sha256. So a file of the same name and size is the same file, and copying
into a directory that already holds some (a backup replaced with ``--force``, a home being restored) copies only
what is missing and never overwrites. Each file is written to a temporary name and renamed, so an interrupted copy
leaves no half file under a real name; files and directories are private to the owner (0600, 0700) as in a home.
Files a running hermesd is still writing (``.incoming-*``) are left out: no row names them yet.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from hermes_actors.errors import StoreError
from hermes_actors.store.connection import PRIVATE_DIRECTORY, PRIVATE_FILE

__all__ = ["MediaCopy", "copy_media", "media_backup_dir"]

_INCOMING = ".incoming-"


class MediaCopy(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`copy_media` did: files and bytes copied, files already there, and the ``expected`` files
    (relative paths) found in neither place."""

    directory: str
    copied: int
    bytes: int
    kept: int
    missing: list[str]


def media_backup_dir(dest: str | Path) -> Path:
    """Where the media files of the backup ``dest`` go: ``DEST.media`` beside it."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".media")


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        path
        for path in directory.rglob("*")
        if path.is_file() and not path.is_symlink() and not path.name.startswith(_INCOMING)
    )


def _make_directory(path: Path) -> None:
    if not path.is_dir():
        path.mkdir(mode=PRIVATE_DIRECTORY, parents=True)
        path.chmod(PRIVATE_DIRECTORY)  # mkdir's mode is reduced by the umask, never widened


def _copy_one(source: Path, target: Path) -> bool:
    """Copy ``source`` to ``target`` through a temporary name unless a file of its size is there; whether it did."""
    try:
        size = source.stat().st_size
    except FileNotFoundError:
        return False  # deleted meanwhile (a session pruned): the copy of the database no longer names it
    if target.is_file() and target.stat().st_size == size:
        return False
    _make_directory(target.parent)
    temporary = target.with_name(_INCOMING + target.name)
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        with open(source, "rb") as reader, os.fdopen(descriptor, "wb") as writer:
            shutil.copyfileobj(reader, writer)
        os.replace(temporary, target)
    except FileNotFoundError:
        temporary.unlink(missing_ok=True)
        return False
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return True


def copy_media(
    source_dir: str | Path,
    dest_dir: str | Path,
    *,
    expected: Iterable[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> MediaCopy:
    """Copy every file under ``source_dir`` (a home's media, or a backup's) into ``dest_dir``, keeping the files
    already there; ``progress`` hears files done and files in all. ``expected`` lists the relative paths the
    database copy names: those found in neither directory are reported ``missing``. Raises :class:`StoreError`
    naming the file when a copy fails (a full disk, a permission)."""
    source_dir, dest_dir = Path(source_dir), Path(dest_dir)
    files = _files(source_dir)
    copied = kept = size = 0
    for done, source in enumerate(files, start=1):
        target = dest_dir / source.relative_to(source_dir)
        try:
            if _copy_one(source, target):
                copied += 1
                size += target.stat().st_size
            else:
                kept += target.is_file()
        except OSError as exc:
            raise StoreError(f"cannot copy {source} to {target}: {exc.strerror or exc}") from exc
        if progress is not None:
            progress(done, len(files))
    missing = [path for path in expected if not (dest_dir / path).is_file()]
    if copied and dest_dir.is_dir():
        dest_dir.chmod(PRIVATE_DIRECTORY)
    return MediaCopy(directory=str(dest_dir), copied=copied, bytes=size, kept=kept, missing=missing)
