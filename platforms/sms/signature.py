"""``X-Twilio-Signature``: how Twilio signs each webhook request, and checking it.

Twilio takes the full URL it called (scheme, host, path and query string, exactly as configured on the number), then
appends every POST parameter sorted by name, each name immediately followed by its value, with no separators; the
signature is the base64 of the HMAC-SHA1 of that string keyed with the account's Auth Token. Twilio has been seen to
sign an ``https`` URL with and without its default port, so both forms are accepted (as Twilio's own helper
libraries do). Comparison is constant-time. There is no timestamp in the signature: a replayed request is recognised
by its ``MessageSid`` in the durable inbox instead.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

__all__ = ["SIGNATURE_HEADER", "signature_of", "signed", "url_variants"]

SIGNATURE_HEADER = "X-Twilio-Signature"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def signature_of(auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> str:
    """The signature Twilio sends for a POST of ``params`` to ``url``."""
    text = url + "".join(name + value for name, value in sorted(params))
    digest = hmac.new(auth_token.encode(), text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def url_variants(url: str) -> list[str]:
    """``url`` as called, and the same with its default port written out or left out."""
    parts = urlsplit(url)
    default = _DEFAULT_PORTS.get(parts.scheme)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    userinfo = parts.netloc.rpartition("@")[0]
    prefix = f"{userinfo}@" if userinfo else ""
    variants = [url]
    if default is not None and parts.port in (None, default):
        for netloc in (f"{prefix}{host}", f"{prefix}{host}:{default}"):
            other = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
            if other not in variants:
                variants.append(other)
    return variants


def signed(header: str | None, auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> bool:
    """Whether ``header`` is Twilio's signature of ``params`` POSTed to ``url`` (with or without its default port)."""
    if not header:
        return False
    offered = header.strip().encode()
    pairs = list(params)
    return any(
        hmac.compare_digest(offered, signature_of(auth_token, candidate, pairs).encode())
        for candidate in url_variants(url)
    )
