"""The operator's key: what opens the API server's ``/api/sessions`` routes, which see every session.

It is ``daemon.admin_key`` of ``config.yaml``, else ``$HERMES_ADMIN_KEY``, else the key in ``$HERMES_HOME/admin_key``,
which the first ``hermesd`` start (or ``hermesctl admin-key``) generates: 32 random bytes, written with mode 0600
into a temporary file and linked into place, so two processes starting at once end up with one key and nobody
reads a half-written file. Later starts reuse it; deleting the file makes the next start generate a new one.
``hermesd`` (and ``hermesctl config check``) refuse a configured admin key that is also the API's client key
(:func:`refuse_shared_key`).
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

import msgspec

from hermes_actors.daemon.config_file import Settings
from hermes_actors.errors import ConfigError

__all__ = ["ADMIN_KEY_ENV", "ADMIN_KEY_NAME", "AdminKey", "admin_key", "configured_admin_key", "refuse_shared_key"]

ADMIN_KEY_NAME = "admin_key"
ADMIN_KEY_ENV = "HERMES_ADMIN_KEY"
_PREFIX = "hk-admin-"


class AdminKey(msgspec.Struct, frozen=True, kw_only=True):
    """The key and where it came from: ``config`` (``daemon.admin_key``), ``environment`` or ``file`` (``path``)."""

    key: str
    origin: str
    path: str | None = None

    def describe(self) -> str:
        """Where the key comes from, for a person."""
        match self.origin:
            case "config":
                return "daemon.admin_key in config.yaml"
            case "environment":
                return f"${ADMIN_KEY_ENV}"
        return f"{self.path} (generated; delete it to have the next start make a new one)"


def admin_key(home: Path, settings: Settings, environ: Mapping[str, str]) -> AdminKey:
    """The admin key of ``home``; generates ``home/admin_key`` (mode 0600) when neither the configuration nor the
    environment sets one. Raises :class:`ConfigError` for a key file that holds no key."""
    configured = configured_admin_key(settings, environ)
    if configured is not None:
        return configured
    path = home / ADMIN_KEY_NAME
    key = _read(path)
    if key is None:
        key = _generate(path)
    return AdminKey(key=key, origin="file", path=str(path))


def configured_admin_key(settings: Settings, environ: Mapping[str, str]) -> AdminKey | None:
    """``daemon.admin_key``, else ``$HERMES_ADMIN_KEY``; ``None`` when neither is set (the home's file is used)."""
    if settings.daemon.admin_key is not None:
        return AdminKey(key=settings.daemon.admin_key, origin="config")
    from_env = environ.get(ADMIN_KEY_ENV, "").strip()
    return AdminKey(key=from_env, origin="environment") if from_env else None


def refuse_shared_key(found: AdminKey, settings: Settings, environ: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` when the admin key is also the API server's client key: whoever may chat would
    then see every session."""
    section = settings.platforms.get("api_server")
    if section is None:
        return
    client = getattr(section, "key", None) or environ.get(getattr(section, "key_env", "") or "", "").strip() or None
    if client is not None and hmac.compare_digest(client.encode(), found.key.encode()):
        raise ConfigError(
            "daemon.admin_key",
            f"the admin key ({found.describe()}) is also the API's client key, so every client could reach every "
            "session; give the operator API a key of its own",
        )


def _read(path: Path) -> str | None:
    """The key in ``path`` (made private if it was not), ``None`` when there is no file."""
    try:
        text = path.read_text(encoding="utf-8").strip()
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
    if not text:
        raise ConfigError(
            "daemon.admin_key", f"{path} is empty; delete it to have a new key generated, or set daemon.admin_key"
        )
    if mode & 0o077:
        os.chmod(path, 0o600)  # it opens every session
    return text


def _generate(path: Path) -> str:
    """Write a new key to ``path`` unless another process just did; return the key ``path`` holds."""
    key = _PREFIX + secrets.token_urlsafe(32)
    descriptor, temporary = tempfile.mkstemp(prefix=".admin_key.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(key + "\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temporary, path)  # atomic, and refuses to replace a key another process wrote meanwhile
        except FileExistsError:
            existing = _read(path)
            assert existing is not None
            return existing
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return key
