"""Structured logs: one line per event, ``key=value`` pairs (logfmt), easy to grep and to parse.

``time=2026-11-30T02:40:01.123Z level=info logger=hermesd msg="webhook started" pid=4242``; a traceback is kept on
the same line with its newlines escaped, so one event is always one line.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO

__all__ = ["LogfmtFormatter", "configure_logging"]


def _quote(value: str) -> str:
    if value and not any(c in value for c in ' "=\\\n\r\t'):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    escaped = escaped.replace("\t", "\\t")
    return f'"{escaped}"'


class LogfmtFormatter(logging.Formatter):
    """Formats a record as one logfmt line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        parts = [
            f"time={stamp}",
            f"level={record.levelname.lower()}",
            f"logger={_quote(record.name)}",
            f"msg={_quote(record.getMessage())}",
        ]
        if record.exc_info:
            parts.append(f"error={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def configure_logging(level: int, stream: IO[str] | None = None) -> None:
    """Send every log record at ``level`` or above to ``stream`` (stderr) as logfmt lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
