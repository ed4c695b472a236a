"""WeChat media into the media store: a GET from WeChat's CDN, then AES-128-ECB decryption.

iLink does not hand a bot its users' files directly: a media item names an encrypted copy on WeChat's CDN by its
``encrypt_query_param`` and gives the AES-128 key (:class:`~platforms.wechat.wire.MediaRef`). The file is
``GET {cdn_base_url}/download?encrypted_query_param=<param>`` (no other credentials: the parameter is the
capability), AES-128-ECB encrypted with PKCS#7 padding. The key comes as ``image_item.aeskey`` (32 hex digits) or
as ``media.aes_key``: base64 of the 16 key bytes, or of their 32 hex digits; both forms are accepted.

Decryption needs the ``cryptography`` package, the ``feishu`` extra. It is imported only when a file arrives;
without it the file is refused with a reason that says what to install, and the text of the message still runs.

Otherwise as Telegram's download: a file over ``media.max_bytes`` by the size WeChat states is refused before it
is fetched, then by the answer's ``Content-Length``, then while reading (the ciphertext is at most 16 bytes longer
than the file); every failure becomes a refused attachment that says why. This runs on the account's poll thread
(blocking, like the poll), before the messages are stored. The records carry no source URL: the parameter in it
opens the file.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from hermes_actors.media import MediaStore, format_size
from hermes_actors.messages import Attachment
from platforms.support import http_client
from platforms.wechat.wire import MediaRef

__all__ = ["INSTALL_HINT", "decrypt", "fetch_media"]

_log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'hermes-actors[feishu]'"
_BLOCK = 16  # AES block size: PKCS#7 adds 1 to 16 bytes
_HEX_KEY = re.compile(r"[0-9a-fA-F]{32}")
_IMAGE_TYPES = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF8", "image/gif"),
    (b"RIFF", "image/webp"),  # RIFF....WEBP
)


class _Failed(Exception):
    """A download that did not give the file; the text completes "I could not read X: "."""

    def __init__(self, problem: str, size: int | None = None) -> None:
        super().__init__(problem)
        self.size = size


def fetch_media(
    refs: Sequence[MediaRef], *, media: MediaStore, cdn_base_url: str, timeout_s: float, account: str
) -> tuple[Attachment, ...]:
    """The attachments of ``refs``: each downloaded, decrypted and saved into ``media``, or refused saying why."""
    return tuple(_fetch(ref, media=media, cdn=cdn_base_url, timeout_s=timeout_s, account=account) for ref in refs)


def _fetch(ref: MediaRef, *, media: MediaStore, cdn: str, timeout_s: float, account: str) -> Attachment:
    def refuse(problem: str, size: int | None = ref.size) -> Attachment:
        return media.refuse(problem, kind=ref.kind, mime_type=ref.mime_type, name=ref.name, size=size)

    if ref.problem is not None:
        return refuse(ref.problem)
    problem = media.check(ref.kind, ref.size)
    if problem is not None:
        return refuse(problem)
    key = aes_key(ref)
    if key is None:
        return refuse("the key WeChat sent for it is not an AES-128 key")
    try:
        _cipher_parts()
    except ImportError:
        _log.error(
            "wechat account %r: a %s arrived, but decrypting WeChat media needs the 'cryptography' package: %s",
            account,
            ref.kind,
            INSTALL_HINT,
        )
        return refuse(f"decrypting WeChat files needs the 'cryptography' package ({INSTALL_HINT})")
    assert ref.query is not None  # a reference without a problem names its file
    url = f"{cdn.rstrip('/')}/download?encrypted_query_param={quote(ref.query, safe='')}"
    limit = media.config.max_bytes
    try:
        encrypted = _get(url, limit=limit + _BLOCK, timeout_s=timeout_s)
    except _Failed as exc:
        _log.warning("wechat account %r: downloading a %s from the CDN failed: %s", account, ref.kind, exc)
        return refuse(str(exc), exc.size if exc.size is not None else ref.size)
    try:
        data = decrypt(encrypted, key)
    except ValueError as exc:
        _log.warning("wechat account %r: a %s from the CDN did not decrypt: %s", account, ref.kind, exc)
        return refuse("it could not be decrypted with the key WeChat sent", len(encrypted))
    if len(data) > limit:
        return refuse(f"it is {format_size(len(data))}, over the {format_size(limit)} limit", len(data))
    mime = _image_type(data) if ref.kind == "image" else ref.mime_type
    return media.save(data, kind=ref.kind, mime_type=mime, name=ref.name)


def aes_key(ref: MediaRef) -> bytes | None:
    """The 16 key bytes of ``ref``: its hex ``aeskey``, else its base64 ``aes_key`` of the bytes or of their hex."""
    if ref.hex_key is not None and _HEX_KEY.fullmatch(ref.hex_key):
        return bytes.fromhex(ref.hex_key)
    if ref.aes_key is None:
        return None
    try:
        decoded = base64.b64decode(ref.aes_key, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(decoded) == _BLOCK:
        return decoded
    if _HEX_KEY.fullmatch(decoded.decode("ascii", "replace")):
        return bytes.fromhex(decoded.decode("ascii"))
    return None


def _cipher_parts() -> tuple[Any, Any, Any, Any]:
    """``Cipher``, ``algorithms``, ``modes`` and ``padding`` from ``cryptography``; :class:`ImportError` without it."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    return Cipher, algorithms, modes, padding


def decrypt(data: bytes, key: bytes) -> bytes:
    """``data`` decrypted with AES-128-ECB and unpadded (PKCS#7); :class:`ValueError` when it does not fit ``key``."""
    cipher_type, algorithms, modes, padding = _cipher_parts()
    if not data or len(data) % _BLOCK:
        raise ValueError(f"{len(data)} bytes is not a whole number of AES blocks")
    decryptor = cipher_type(algorithms.AES(key), modes.ECB()).decryptor()  # ECB: the CDN's format, not a choice
    padded = decryptor.update(data) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    plain: bytes = unpadder.update(padded) + unpadder.finalize()  # ValueError for bad padding: a wrong key
    return plain


def _image_type(data: bytes) -> str:
    """The type of an image from its first bytes; JPEG, what WeChat sends most, when they say nothing."""
    for magic, mime in _IMAGE_TYPES:
        if data.startswith(magic):
            return mime
    return "image/jpeg"


def _get(url: str, *, limit: int, timeout_s: float) -> bytes:
    """GET ``url`` and read at most ``limit`` bytes of it; :class:`_Failed` saying why otherwise."""
    over = f"over the {format_size(limit - _BLOCK)} limit"
    try:
        result = http_client.request(
            "GET", url, headers={"Accept": "application/octet-stream"}, timeout=timeout_s, max_bytes=limit
        )
    except http_client.TooLarge as exc:
        if exc.status != 200:
            raise _Failed(f"its download failed (HTTP {exc.status})") from exc
        if exc.size is not None:
            raise _Failed(f"it is {format_size(exc.size)}, {over}", exc.size) from exc
        raise _Failed(f"it is {over}") from exc
    except http_client.Unreachable as exc:
        raise _Failed("WeChat's CDN could not be reached") from exc
    except http_client.HttpError as exc:  # reset, timed out, or cut short of its Content-Length
        raise _Failed("its download broke off") from exc
    if result.status != 200:
        raise _Failed(f"its download failed (HTTP {result.status})")
    return result.body
