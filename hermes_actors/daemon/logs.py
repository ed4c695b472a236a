"""Structured logs: one line per event, as logfmt ``key=value`` pairs (the default) or as a JSON object.

``daemon.log_format: logfmt``:
``time=2026-11-30T02:40:01.123Z level=info logger=hermesd msg="webhook started" pid=4242``;
``daemon.log_format: json``:
``{"time": "2026-11-30T02:40:01.123Z", "level": "info", "logger": "hermesd", "msg": "webhook started"}``.
A line about a session carries ``session_id`` and ``platform`` (:mod:`hermes_actors.runtime.log_fields`), and any
other ``extra=`` field given to the call, after the standard ones. A traceback is kept in the ``error`` field (in
logfmt with its newlines escaped), so one event is always one line.
"""

from __future__ import annotations

import logging
import sys
import time
import typing
from typing import IO

import msgspec

from hermes_actors.runtime.log_fields import FIELDS, fields_of

__all__ = ["LOG_FORMATS", "JsonFormatter", "LogFormat", "LogfmtFormatter", "configure_logging"]

LogFormat = typing.Literal["logfmt", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = typing.get_args(LogFormat)

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
"""A record's own attributes; anything else on it came from ``extra=``."""


def _quote(value: str) -> str:
    if value and not any(c in value for c in ' "=\\\n\r\t'):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    escaped = escaped.replace("\t", "\\t")
    return f'"{escaped}"'


def _stamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class _Structured(logging.Formatter):
    """The fields of a record, in order: time, level, logger, msg, the session's, the other extras, error."""

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        found: dict[str, object] = {
            "time": _stamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        found |= fields_of(record)
        for name, value in record.__dict__.items():
            if name not in _STANDARD and name not in FIELDS and not name.startswith("_"):
                found.setdefault(name, value)
        if record.exc_info:
            found["error"] = self.formatException(record.exc_info)
        return found


class LogfmtFormatter(_Structured):
    """Formats a record as one logfmt line."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{name}={_quote(str(value))}" for name, value in self.fields(record).items())


class JsonFormatter(_Structured):
    """Formats a record as one JSON object (values that are not JSON types are written as their ``str``)."""

    def format(self, record: logging.LogRecord) -> str:
        return msgspec.json.encode(self.fields(record), enc_hook=str).decode()


def configure_logging(level: int, stream: IO[str] | None = None, *, log_format: LogFormat = "logfmt") -> None:
    """Send every log record at ``level`` or above to ``stream`` (stderr), one line each in ``log_format``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
