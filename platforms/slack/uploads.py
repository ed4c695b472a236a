"""A reply's document (``/save``) shared into its channel with Slack's external upload, in three steps.

``files.getUploadURLExternal`` (form fields ``filename`` and ``length``) answers an ``upload_url`` and a
``file_id``; the file's bytes are POSTed to that URL; ``files.completeUploadExternal`` (``files: [{id, title}]``,
``channel_id``, ``thread_ts``, ``initial_comment``: the caption) shares it, which is the one message the channel
sees. The app needs the ``files:write`` scope. The upload URL must be Slack's (HTTPS on ``slack.com`` or a
subdomain) or on the configured API's origin (a test server), or the file is not sent there.

The first two steps show nothing, so any failure in them sends the reply's text instead; so does a refusal of the
third. A lost answer to the third may have shared the file: it is retried (Slack has no idempotency key, so the
retry is flagged as a possible duplicate).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from hermes_actors.messages import OutboundDocument
from platforms.base import SendError
from platforms.slack.config import ResolvedApp
from platforms.support import http_client
from platforms.support.documents import UploadFailed, before_posting, posting_failed, same_site

__all__ = ["SLACK_HOSTS", "share_document"]

SLACK_HOSTS = ("slack.com",)  # upload URLs: https://files.slack.com/upload/v1/...
_HINTS = {
    "missing_scope": "the app lacks the files:write scope; add it and reinstall the app",
    "not_in_channel": "the app is not in the channel; invite it with /invite",
    "channel_not_found": "the channel does not exist or the app cannot see it; invite the app to it",
    "invalid_auth": "the bot token is not valid; check the app's bot_token",
    "file_uploads_disabled": "the workspace does not allow file uploads",
}


def share_document(
    app: ResolvedApp, api_base_url: str, channel: str, thread_ts: str | None, document: OutboundDocument, timeout: float
) -> str:
    """Upload ``document`` and share it in ``channel`` (and ``thread_ts``); return the file's id."""
    base = api_base_url.rstrip("/")
    where = f"slack app '{app.name}': a file for {channel}"
    headers = {"authorization": f"Bearer {app.bot_token}"}
    with before_posting(where):
        fields = {"filename": document.name, "length": str(len(document.data))}
        form = urlencode(fields).encode()
        form_headers = headers | {"content-type": "application/x-www-form-urlencoded"}
        answer = _call(f"{base}/files.getUploadURLExternal", form, None, form_headers, timeout, where)
        upload_url, file_id = answer.get("upload_url"), answer.get("file_id")
        if not isinstance(upload_url, str) or not isinstance(file_id, str):
            raise UploadFailed(f"{where}: files.getUploadURLExternal answered no upload_url and file_id")
        if not same_site(upload_url, base, hosts=SLACK_HOSTS):
            raise UploadFailed(f"{where}: the upload URL it answered is neither Slack's nor the configured API's")
        _upload(upload_url, document, timeout, where)
    body: dict[str, Any] = {
        "files": [{"id": file_id, "title": document.name}],
        "channel_id": channel,
        "initial_comment": document.caption,
    }
    if thread_ts:
        body["thread_ts"] = thread_ts
    try:
        _call(f"{base}/files.completeUploadExternal", None, body, headers, timeout, where)
    except SendError as exc:
        raise posting_failed(exc) from None
    return file_id


def _upload(url: str, document: OutboundDocument, timeout: float, where: str) -> None:
    headers = {"content-type": document.mime_type}
    try:
        result = http_client.request("POST", url, body=document.data, headers=headers, timeout=timeout)
    except http_client.HttpError as exc:
        raise UploadFailed(f"{where}: the upload failed ({exc.reason})") from None
    if result.status != 200:
        raise UploadFailed(f"{where}: the upload was refused with HTTP {result.status}: {result.excerpt()!r}")


def _call(
    url: str, raw: bytes | None, body: object, headers: dict[str, str], timeout: float, where: str
) -> dict[str, Any]:
    method = url.rsplit("/", 1)[-1]
    try:
        result = http_client.request("POST", url, body=raw, json_body=body, headers=headers, timeout=timeout)
    except http_client.HttpError as exc:
        raise http_client.send_error(exc, f"{where}: {method}") from None
    if result.status != 200:
        raise http_client.status_error(result, f"{where}: {method}")
    try:
        answer = result.json()
    except http_client.HttpError as exc:
        raise SendError(f"{where}: {method}: {exc}", outcome_unknown=True) from None
    if not isinstance(answer, dict):
        raise SendError(f"{where}: {method}: expected a JSON object, got {result.excerpt()!r}", outcome_unknown=True)
    if answer.get("ok") is True:
        return answer
    code = str(answer.get("error") or "no error code")[:80]
    if code == "ratelimited":
        wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or 1.0
        raise SendError(f"{where}: {method}: asked to slow down (ratelimited)", retry_after_s=wait)
    raise SendError(f"{where}: {method}: Slack answered {code!r}: {_HINTS.get(code, 'it will be retried')}")
