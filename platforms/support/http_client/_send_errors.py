"""From a failed exchange or a refusing answer to the :class:`SendError` a sender raises, and ``Retry-After``."""

from __future__ import annotations

import time
from datetime import UTC
from email.utils import parsedate_to_datetime

from hermes_actors.ports import SendError
from platforms.support.http_client._errors import HttpError, NoAnswer
from platforms.support.http_client._exchange import HttpResult

__all__ = ["MAX_RETRY_AFTER_S", "retry_after_seconds", "send_error", "status_error"]

MAX_RETRY_AFTER_S = 3600.0  # a server asking for longer is tried again after an hour anyway


def retry_after_seconds(value: str | float | int | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (seconds, or an HTTP date), capped at an hour."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return min(max(float(value), 0.0), MAX_RETRY_AFTER_S)
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


def send_error(error: HttpError, what: str) -> SendError:
    """The :class:`SendError` for a failed exchange while sending ``what`` (a reply, a message to chat X)."""
    if isinstance(error, NoAnswer):
        return SendError(
            f"{what}: {error}; it will be retried and flagged as a possible duplicate", outcome_unknown=True
        )
    return SendError(f"{what}: {error}; it will be retried")


def status_error(result: HttpResult, what: str, *, now: float | None = None) -> SendError:
    """The :class:`SendError` for a non-2xx answer: 429 carries ``Retry-After``, 5xx and 4xx are retried."""
    if result.status == 429:
        wait = retry_after_seconds(result.headers.get("retry-after"), now)
        return SendError(f"{what}: asked to slow down (HTTP 429); it will be retried", retry_after_s=wait)
    if result.status >= 500:
        return SendError(f"{what}: failed with HTTP {result.status}: {result.excerpt()!r}; it will be retried")
    return SendError(
        f"{what}: refused the request with HTTP {result.status}: {result.excerpt()!r} (it will be retried with backoff)"
    )
