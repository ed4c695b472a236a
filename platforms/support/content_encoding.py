"""A request body decoded from its ``Content-Encoding``, within a size limit, without expanding a bomb.

:func:`~platforms.support.http_host.read_decoded` uses it instead of aiohttp's own decoding (its docstring says
why); it decodes what aiohttp would and refuses what aiohttp would, with aiohttp's exceptions.
"""

from __future__ import annotations

import zlib

from aiohttp import web

__all__ = ["decode_content"]

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decode_content(raw: bytes, encoding: str, limit: int) -> bytes:
    """``raw`` decoded from ``encoding`` (as aiohttp would: gzip, deflate with or without its zlib header; any
    other value but br and zstd, which it cannot decode here, leaves the body as it is)."""
    if encoding in ("br", "zstd"):
        raise web.RequestPayloadError(f"Can not decode content-encoding: {encoding}")
    wbits = _WBITS.get(encoding)
    if wbits is None or not raw:
        return raw
    if encoding == "deflate" and raw[0] & 0xF != 8:  # a raw deflate stream, without the zlib header (as aiohttp)
        wbits = -zlib.MAX_WBITS
    decompressor = zlib.decompressobj(wbits=wbits)
    try:
        decoded = decompressor.decompress(raw, limit + 1)  # at most one byte past the limit: no bomb is expanded
    except zlib.error:
        raise web.RequestPayloadError(f"Can not decode content-encoding: {encoding}") from None
    if len(decoded) > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(decoded))
    if not decompressor.eof:
        raise web.RequestPayloadError(f"Can not decode content-encoding: {encoding} (the stream does not end)")
    return decoded
