"""How QQ signs an HTTP callback, and the answer to its address validation (op 13).

The bot's Ed25519 key pair is derived from its AppSecret: the seed is the secret repeated until it is at least 32
bytes long, cut to 32 bytes. QQ signs ``X-Signature-Timestamp`` followed by the raw body and sends the signature in
``X-Signature-Ed25519`` (hex, 64 bytes). To validate a callback address QQ sends op 13 with ``plain_token`` and
``event_ts``; the answer is ``plain_token`` with the bot's signature of ``event_ts + plain_token`` (hex).
"""

from __future__ import annotations

import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "Signer", "seed_of"]

SIGNATURE_HEADER = "X-Signature-Ed25519"
TIMESTAMP_HEADER = "X-Signature-Timestamp"
_SEED_BYTES = 32


def seed_of(secret: str) -> bytes:
    """The Ed25519 seed QQ derives from ``secret``: the secret repeated to 32 bytes or more, cut to 32."""
    raw = secret.encode()
    if not raw:
        raise ValueError("an empty secret has no key")
    while len(raw) < _SEED_BYTES:
        raw += raw
    return raw[:_SEED_BYTES]


class Signer:
    """The key pair of one bot: signs validation answers, checks QQ's signatures."""

    def __init__(self, secret: str) -> None:
        self._private = Ed25519PrivateKey.from_private_bytes(seed_of(secret))
        self._public = self._private.public_key()

    def sign(self, data: bytes) -> str:
        """The hex signature of ``data``."""
        return self._private.sign(data).hex()

    def verify(self, signature_hex: str, timestamp: str, body: bytes) -> bool:
        """Whether ``signature_hex`` is the signature of ``timestamp`` + ``body``."""
        try:
            signature = binascii.unhexlify(signature_hex.strip())
        except (binascii.Error, ValueError):
            return False
        if len(signature) != 64:
            return False
        try:
            self._public.verify(signature, timestamp.encode() + body)
        except InvalidSignature:
            return False
        return True

    def validation_answer(self, plain_token: str, event_ts: str) -> dict[str, str]:
        """The body that answers op 13: the token back with the signature of ``event_ts + plain_token``."""
        return {"plain_token": plain_token, "signature": self.sign((event_ts + plain_token).encode())}
