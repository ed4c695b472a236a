"""One JSON-RPC 2.0 call to signal-cli's ``POST /api/v1/rpc``, and what its errors mean.

signal-cli answers every request it could read with HTTP 200 and a JSON-RPC response: ``result`` on success,
``error`` (``code``, ``message``, optional ``data``) otherwise. Its own codes: -1 a user error (a recipient that
is not registered, a group we are not in, or "Failed to send message" when every recipient failed), -3 an I/O
error talking to Signal, -4 untrusted identities, -5 a rate limit (newer versions; older ones report it inside
``data.response.results`` only), and the JSON-RPC standard -32700..-32603. When a send failed for every
recipient, ``data.response.results[].type`` says why per recipient (``UNREGISTERED_FAILURE``,
``IDENTITY_FAILURE``, ``RATE_LIMIT_FAILURE`` with ``retryAfterSeconds``, ``NETWORK_FAILURE``, ...).

A failure before the request left (the daemon is down) is :class:`~platforms.support.http_client.Unreachable`; one after
it left without an answer is :class:`~platforms.support.http_client.NoAnswer` (Signal may have delivered the message).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import msgspec

from hermes_actors.errors import PlatformError
from platforms.support import http_client

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "IO_ERROR",
    "RATE_LIMIT_ERROR",
    "UNTRUSTED_KEY_ERROR",
    "USER_ERROR",
    "RpcClient",
    "RpcError",
    "SendResult",
    "send_results",
    "send_timestamp",
    "status_of",
]

USER_ERROR = -1
IO_ERROR = -3
UNTRUSTED_KEY_ERROR = -4
RATE_LIMIT_ERROR = -5
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class SendResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One recipient's outcome of a ``send``."""

    type: str = "SUCCESS"
    retry_after_seconds: float | None = None
    token: str | None = None  # a proof-required (captcha) challenge


class _SendAnswer(msgspec.Struct, frozen=True, kw_only=True):
    timestamp: int | None = None
    results: list[SendResult] | None = None


class _ErrorData(msgspec.Struct, frozen=True, kw_only=True):
    response: _SendAnswer | None = None


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    code: int
    message: str = ""
    data: Any = None


class _Response(msgspec.Struct, frozen=True, kw_only=True):
    jsonrpc: str | None = None
    id: Any = None
    result: Any = None
    error: _Error | None = None


_decode_response = msgspec.json.Decoder(_Response).decode


class RpcError(PlatformError):
    """signal-cli answered with a JSON-RPC error; ``results`` are the per-recipient outcomes it attached."""

    def __init__(self, code: int, message: str, results: tuple[SendResult, ...] = ()) -> None:
        super().__init__(f"signal-cli error {code}: {message}")
        self.code = code
        self.message = message
        self.results = results

    def failures(self, kind: str) -> list[SendResult]:
        """The recipients that failed with ``kind`` (``RATE_LIMIT_FAILURE``, ...)."""
        return [result for result in self.results if result.type == kind]


class RpcClient:
    """Calls methods on one daemon; safe to use from several threads."""

    def __init__(self, base_url: str, *, timeout_s: float) -> None:
        self.url = base_url.rstrip("/") + "/api/v1/rpc"
        self._timeout = timeout_s
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def call(self, method: str, params: dict[str, Any]) -> Any:
        """Call ``method``; return its ``result``, or raise :class:`RpcError` or :class:`http_client.HttpError`."""
        with self._lock:
            request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "method": method, "params": params, "id": request_id}
        answer = http_client.request(
            "POST", self.url, json_body=body, headers={"accept": "application/json"}, timeout=self._timeout
        )
        if answer.status != 200:
            raise _StatusError(answer)
        try:
            response = _decode_response(answer.body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise http_client.NoAnswer(f"POST {http_client.shown(self.url)}: not a JSON-RPC response ({exc})") from None
        if response.error is not None:
            raise RpcError(response.error.code, response.error.message[:500], _results(response.error.data))
        if response.id != request_id:
            raise http_client.NoAnswer(
                f"POST {http_client.shown(self.url)}: the response is for request {response.id!r}, not {request_id}"
            )
        return response.result


class _StatusError(http_client.HttpError):
    """A non-200 answer (the daemon always answers 200 to a JSON-RPC request it could read)."""

    def __init__(self, result: http_client.HttpResult) -> None:
        super().__init__(f"HTTP {result.status}: {result.excerpt()!r}")
        self.result = result


def status_of(error: http_client.HttpError) -> http_client.HttpResult | None:
    """The HTTP answer behind ``error`` when the daemon answered with a status other than 200."""
    return error.result if isinstance(error, _StatusError) else None


def send_timestamp(result: Any) -> int | None:
    """The timestamp a successful ``send`` returned (Signal's id of the sent message)."""
    try:
        answer = msgspec.convert(result, _SendAnswer)
    except msgspec.ValidationError:
        return None
    return answer.timestamp


def send_results(result: Any) -> tuple[SendResult, ...]:
    """The per-recipient outcomes of a successful ``send`` (a group send can fail for some members)."""
    try:
        answer = msgspec.convert(result, _SendAnswer)
    except msgspec.ValidationError:
        return ()
    return tuple(answer.results or ())


def _results(data: Any) -> tuple[SendResult, ...]:
    try:
        found = msgspec.convert(data, _ErrorData) if data is not None else None
    except msgspec.ValidationError:
        return ()
    if found is None or found.response is None:
        return ()
    return tuple(found.response.results or ())
