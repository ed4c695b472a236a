"""Standard Webhooks (https://www.standardwebhooks.com): ``whsec_`` secrets, the HMAC-SHA256 signature and the checks a
request must pass; the webhook platform's inbound routes and callbacks and the event webhooks sign with it."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping

from hermes_actors.constraints import WEBHOOK_SECRET_HINT
from hermes_actors.errors import ConfigError
from platforms.support.http_host import Refused

__all__ = ["NEW_SECRET_HINT", "TOLERANCE_S", "bad_secret", "decode_secret", "new_webhook_secret", "sign", "verify"]

TOLERANCE_S = 300  # how far a webhook-timestamp may be from our clock, either way
_SECRET_PREFIX = "whsec_"
_MIN_KEY_BYTES = 24  # the Standard Webhooks lower bound
NEW_SECRET_HINT = WEBHOOK_SECRET_HINT
_WEBHOOK_ID = re.compile(r"[\x21-\x7e]{1,256}")  # printable ASCII: it is signed and stored as the message id
_TIMESTAMP = re.compile(r"[0-9]{1,15}")


def new_webhook_secret() -> str:
    """Return a fresh Standard Webhooks secret: ``whsec_`` and the base64 of 24 random bytes."""
    return _SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_MIN_KEY_BYTES)).decode()


def decode_secret(secret: str) -> bytes | None:
    """Return the HMAC key of a ``whsec_`` secret, or ``None`` if it is not one."""
    if not secret.startswith(_SECRET_PREFIX):
        return None
    try:
        key = base64.b64decode(secret[len(_SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return None
    return key if len(key) >= _MIN_KEY_BYTES else None


def bad_secret(path: str, what: str = "") -> ConfigError:
    subject = f"{what} must" if what else "must"
    return ConfigError(
        path,
        f"{subject} be 'whsec_' followed by the base64 of at least {_MIN_KEY_BYTES} random bytes; {NEW_SECRET_HINT}",
    )


def sign(key: bytes, webhook_id: str, timestamp: str, body: bytes) -> str:
    """The base64 HMAC-SHA256 of ``<id>.<timestamp>.<body>`` (without the ``v1,`` prefix)."""
    digest = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify(key: bytes, headers: Mapping[str, str], body: bytes, now: float) -> str:
    """Check the Standard Webhooks headers of a request; return its ``webhook-id`` or raise :class:`Refused`."""
    webhook_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if webhook_id is None or timestamp is None or signatures is None:
        raise Refused(401, "unsigned request: webhook-id, webhook-timestamp and webhook-signature are required")
    if not _WEBHOOK_ID.fullmatch(webhook_id):
        raise Refused(401, "webhook-id must be 1 to 256 printable ASCII characters")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "webhook-timestamp must be an integer number of Unix seconds")
    skew = now - int(timestamp)
    if skew > TOLERANCE_S:
        raise Refused(401, f"webhook-timestamp is {skew:.0f} s old, over the {TOLERANCE_S} s tolerance")
    if skew < -TOLERANCE_S:
        raise Refused(401, f"webhook-timestamp is {-skew:.0f} s in the future, over the {TOLERANCE_S} s tolerance")
    expected = sign(key, webhook_id, timestamp, body).encode()
    offered = [s.partition(",") for s in signatures.split() if s.isascii()]
    if not any(v == "v1" and hmac.compare_digest(sig.encode(), expected) for v, _, sig in offered):
        raise Refused(401, "webhook-signature does not match the body and the route's secret")
    return webhook_id
