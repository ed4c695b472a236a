"""Session ids: ``YYYYMMDD_HHMMSS_<hex>`` in local time.

Gateway sessions carry 8 hex digits, terminal (CLI) sessions 6, as Hermes does, so ids sort by start time and
users can type a short unique prefix.
"""

from __future__ import annotations

import enum
import re
import secrets
from datetime import datetime

__all__ = ["SessionKind", "is_session_id", "new_session_id"]

_SESSION_ID = re.compile(r"\d{8}_\d{6}_(?:[0-9a-f]{8}|[0-9a-f]{6})")


class SessionKind(enum.StrEnum):
    """Where a session was opened, which decides the length of its id suffix."""

    GATEWAY = "gateway"
    CLI = "cli"


def new_session_id(kind: SessionKind = SessionKind.GATEWAY, now: datetime | None = None) -> str:
    """Return a new id for a session started at ``now`` (local time; default: the current time)."""
    moment = now if now is not None else datetime.now()
    digits = 8 if kind is SessionKind.GATEWAY else 6
    return f"{moment:%Y%m%d_%H%M%S}_{secrets.token_hex(4)[:digits]}"


def is_session_id(text: str) -> bool:
    """Return whether ``text`` has the shape of a gateway or CLI session id."""
    return _SESSION_ID.fullmatch(text) is not None
