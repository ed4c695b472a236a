"""What a failed exchange raises, drawn as a tree; every one names the endpoint without credentials::

    PlatformError
    └── HttpError             an exchange failed
        ├── Unreachable       the request did not leave: connection refused, DNS, TLS, connect timeout
        └── NoAnswer          it left, and no complete answer came back: the server may have acted on it
            └── TooLarge      the answer was longer than the caller's limit

A non-2xx status is not an error here: it is a result, and the caller decides what it means.
"""

from __future__ import annotations

from hermes_actors.errors import PlatformError

__all__ = ["HttpError", "NoAnswer", "TooLarge", "Unreachable"]


class HttpError(PlatformError):
    """An HTTP exchange failed; the message names the endpoint (without credentials or query).

    ``reason`` is what went wrong without the endpoint (``[Errno 111] Connection refused``, ``timed out``), for a
    message about a URL that must not be shown; ``timed_out`` is set when a timeout ended the exchange.
    """

    def __init__(self, message: str, *, reason: str | None = None, timed_out: bool = False) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason
        self.timed_out = timed_out


class Unreachable(HttpError):
    """The request did not leave: connection refused, DNS, TLS. Retrying cannot duplicate it."""


class NoAnswer(HttpError):
    """The request left but no complete answer came back (timeout, reset): the server may have acted on it."""


class TooLarge(NoAnswer):
    """The answer passed the caller's limit; ``status`` is its HTTP status, ``size`` its ``Content-Length``
    when the server stated one."""

    def __init__(self, message: str, *, reason: str, status: int, size: int | None) -> None:
        super().__init__(message, reason=reason)
        self.status = status
        self.size = size
