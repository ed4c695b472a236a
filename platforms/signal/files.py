"""Signal attachments into the media store: signal-cli's JSON-RPC ``getAttachment`` on ``POST /api/v1/rpc``.

signal-cli downloads and decrypts every attachment it receives (unless run with ``--ignore-attachments``) into its
own attachments directory, and lists it in the envelope with an ``id``, ``contentType``, ``filename`` and
``size``. ``getAttachment`` (signal-cli 0.11.5 and later, in every JSON-RPC transport, the HTTP daemon's included)
takes the ``account``, the ``id`` and the chat it came in (``recipient``: the sender, or ``groupId``) and answers
``{"data": "<base64>"}``: the whole file in one answer, so that answer is the download.

As Telegram's download does: a file over ``media.max_bytes`` by its listed ``size`` is refused before the call;
the answer is read only up to the base64 length of the limit (and a little for the JSON around it); the bytes
are decoded and saved off the event loop; every failure (no id, signal-cli not having the file, an error answer,
a broken connection) becomes a refused attachment saying why, so the message's text still runs. The endpoint has
no credentials and the records carry no source URL.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from typing import Any

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, format_size
from hermes_actors.messages import Attachment, InboundMessage
from platforms.signal.envelopes import SignalFile
from platforms.signal.rpc import USER_ERROR

__all__ = ["attach_files"]

_log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
_ENVELOPE_BYTES = 4096  # the JSON-RPC answer around the base64
_METHOD_NOT_FOUND = -32601
_ids = itertools.count(1)


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    data: str


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    code: int = 0
    message: str = ""


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    result: Any = None
    error: _Error | None = None


_decode_answer = msgspec.json.Decoder(_Answer).decode


async def attach_files(
    inbound: InboundMessage,
    files: Sequence[SignalFile],
    *,
    account: str,
    rpc_url: str,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with ``files`` fetched from signal-cli into ``media`` as its attachments (refused ones say why)."""
    if not files:
        return inbound
    chat: dict[str, str] = (
        {"groupId": inbound.source.chat_id or ""}
        if inbound.source.chat_type == "group"
        else {"recipient": inbound.source.chat_id or ""}
    )
    attachments = [
        await _fetch(
            file, account=account, chat=chat, rpc_url=rpc_url, media=media, session=session, timeout_s=timeout_s
        )
        for file in files
    ]
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *attachments))


async def _fetch(
    file: SignalFile,
    *,
    account: str,
    chat: dict[str, str],
    rpc_url: str,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> Attachment:
    def refuse(problem: str, size: int | None = file.size) -> Attachment:
        return media.refuse(problem, kind=file.kind, mime_type=file.mime_type, name=file.name, size=size)

    problem = media.check(file.kind, file.size)
    if problem is not None:
        return refuse(problem)
    if file.id is None:
        return refuse("signal-cli gave no id to fetch it by")
    limit = media.config.max_bytes
    most = (limit + 2) // 3 * 4 + _ENVELOPE_BYTES
    request = {
        "jsonrpc": "2.0",
        "method": "getAttachment",
        "params": {"account": account, "id": file.id, **chat},
        "id": f"attachment-{next(_ids)}",
    }
    label = file.name or file.kind
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    try:
        async with session.post(rpc_url, json=request, timeout=timeout) as response:
            if response.status != 200:
                return refuse(f"signal-cli answered HTTP {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) > most:
                    return refuse(f"it is over the {format_size(limit)} limit", None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        _log.warning("signal account %s: getAttachment for %s failed: %s", account, label, exc or type(exc).__name__)
        return refuse("signal-cli could not be reached to fetch it")
    try:
        answer = _decode_answer(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return refuse("signal-cli's answer to getAttachment is not JSON-RPC")
    if answer.error is not None:
        _log.warning(
            "signal account %s: getAttachment for %s: error %d: %s",
            account,
            label,
            answer.error.code,
            answer.error.message[:200],
        )
        return refuse(_error_problem(answer.error))
    try:
        encoded = msgspec.convert(answer.result, _Data).data
    except msgspec.ValidationError:
        return refuse("signal-cli's answer to getAttachment holds no data")
    return await asyncio.to_thread(media.save_base64, encoded, kind=file.kind, mime_type=file.mime_type, name=file.name)


def _error_problem(error: _Error) -> str:
    text = error.message.strip()[:200] or "no description"
    if error.code == _METHOD_NOT_FOUND:
        return "this signal-cli has no getAttachment (it needs version 0.11.5 or later)"
    if error.code == USER_ERROR:
        return (
            f"signal-cli does not have it ({text}); it keeps no files when run with --ignore-attachments, or when "
            "it could not download them from Signal"
        )
    return f"signal-cli could not hand it over (error {error.code}: {text})"
