"""Bot API calls: ``POST {base}/bot{token}/{method}`` with a JSON body, and what their answers mean.

Every answer is ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": ..., "description": ...,
"parameters": {"retry_after": ..., "migrate_to_chat_id": ...}}``. :func:`read_answer` turns one into its result or
a :class:`BotApiError` carrying those hints, for the blocking calls here and the asynchronous long poll alike.
The token is part of every URL, so it is cut out of anything this module says.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from hermes_actors.errors import PlatformError
from platforms.support import http_client
from platforms.support.documents import FormFile, form_data

__all__ = ["BotApi", "BotApiError", "read_answer", "result_as"]

_log = logging.getLogger(__name__)

_EXCERPT = 200

T = TypeVar("T")


class BotApiError(PlatformError):
    """A Bot API call failed.

    ``status`` is Telegram's ``error_code`` (else the HTTP status; ``None`` when no answer came), ``retry_after_s``
    its flood-control wait, ``migrate_to`` the supergroup a group became, ``outcome_unknown`` that the request left
    but no answer came back (Telegram may have acted on it).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        description: str = "",
        retry_after_s: float | None = None,
        migrate_to: int | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.description = description or message
        self.retry_after_s = retry_after_s
        self.migrate_to = migrate_to
        self.outcome_unknown = outcome_unknown


class _Parameters(msgspec.Struct, frozen=True, kw_only=True):
    retry_after: int | float | None = None
    migrate_to_chat_id: int | None = None


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    result: msgspec.Raw = msgspec.Raw(b"null")
    error_code: int | None = None
    description: str | None = None
    parameters: _Parameters | None = None


_decode_answer = msgspec.json.Decoder(_Answer).decode


def read_answer(status: int, headers: Mapping[str, str], body: bytes, where: str) -> msgspec.Raw:
    """The raw JSON ``result`` of a successful answer; :class:`BotApiError` for anything else.

    ``headers`` are lower-cased. Decode the result with :func:`result_as`.
    """
    try:
        answer = _decode_answer(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        excerpt = body[:_EXCERPT].decode("utf-8", "replace")
        wait = http_client.retry_after_seconds(headers.get("retry-after")) if status == 429 else None
        raise BotApiError(
            f"{where}: HTTP {status} without a Bot API answer: {excerpt!r}", status=status, retry_after_s=wait
        ) from None
    if answer.ok and 200 <= status < 300:
        return answer.result
    code = answer.error_code or status
    description = answer.description or f"HTTP {status}"
    parameters = answer.parameters or _Parameters()
    wait = parameters.retry_after
    retry_after_s = http_client.retry_after_seconds(
        wait if wait is not None else (headers.get("retry-after") if code == 429 else None)
    )
    raise BotApiError(
        f"{where}: {description} (error {code})",
        status=code,
        description=description,
        retry_after_s=retry_after_s,
        migrate_to=parameters.migrate_to_chat_id,
    )


def result_as(raw: msgspec.Raw, kind: type[T], where: str) -> T | None:
    """``raw`` decoded as ``kind``, or ``None`` (logged) when Telegram's answer lacks what we expect."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        _log.warning("%s: unexpected result %.200r (%s)", where, bytes(raw), exc)
        return None


class BotApi:
    """One bot's blocking Bot API client (for the outbox thread and handoffs)."""

    def __init__(self, name: str, token: str, base_url: str, *, timeout_s: float) -> None:
        self.name = name
        self._token = token
        self._base = base_url.rstrip("/")
        self._timeout = timeout_s

    def url(self, method: str) -> str:
        """The URL of ``method`` (it holds the token: never log it)."""
        return f"{self._base}/bot{self._token}/{method}"

    def redact(self, text: str) -> str:
        """``text`` with the token replaced, for logs and errors."""
        return text.replace(self._token, "<token>")

    def call(self, method: str, params: Mapping[str, Any], *, timeout: float | None = None) -> msgspec.Raw:
        """Call ``method`` and return its raw ``result``; :class:`BotApiError` when it fails in any way."""
        where = f"telegram bot '{self.name}': {method}"
        try:
            result = http_client.request(
                "POST", self.url(method), json_body=dict(params), timeout=timeout or self._timeout
            )
        except http_client.HttpError as exc:
            unknown = isinstance(exc, http_client.NoAnswer)
            raise BotApiError(f"{where}: {self.redact(str(exc))}", outcome_unknown=unknown) from None
        return read_answer(result.status, result.headers, result.body, where)

    def upload(self, method: str, fields: Mapping[str, str], file: FormFile) -> msgspec.Raw:
        """Call ``method`` with ``fields`` and ``file`` as ``multipart/form-data``, as the Bot API takes a new file;
        its raw ``result``, or :class:`BotApiError`."""
        where = f"telegram bot '{self.name}': {method}"
        body, content_type = form_data(fields, [file])
        try:
            result = http_client.request(
                "POST", self.url(method), body=body, headers={"content-type": content_type}, timeout=self._timeout
            )
        except http_client.HttpError as exc:
            unknown = isinstance(exc, http_client.NoAnswer)
            raise BotApiError(f"{where}: {self.redact(str(exc))}", outcome_unknown=unknown) from None
        return read_answer(result.status, result.headers, result.body, where)
