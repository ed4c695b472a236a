"""``Idempotency-Key``: a retried request is answered from the store, not run again.

The reference system keeps keys in memory for 300 s. Here the key becomes the message's inbox id (with the key's
scope, so two API keys never collide), and a hash of the request body is kept in the inbox row: a retry with the
same body, even after a restart, waits for the turn or gets the reply stored for it; a retry with another body
gets 409. The window is the inbox's retention (completed rows are pruned after ``runtime.inbox_retention``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

import msgspec

from hermes_actors.ports import StoredAnswer
from platforms.api_server.turn_call import Finished
from platforms.api_server.wire import ApiError

__all__ = ["IDEMPOTENCY_HEADER", "Idempotency", "stored_outcome"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


class Idempotency(msgspec.Struct, frozen=True, kw_only=True):
    """A request's idempotency key as the inbox knows it: the message id and the request's fingerprint."""

    key: str
    message_id: str
    fingerprint: str

    @classmethod
    def of(cls, headers: Mapping[str, str], body: bytes, scope: str | None) -> Idempotency | None:
        """The request's key, ``None`` without the header; a 400 naming the header for a malformed one."""
        key = headers.get(IDEMPOTENCY_HEADER, "").strip()
        if not key:
            return None
        if not _KEY.fullmatch(key):
            raise ApiError(
                400,
                f"{IDEMPOTENCY_HEADER} must be 1 to 255 printable ASCII characters without spaces; a UUID is usual",
                code="invalid_header",
                param=IDEMPOTENCY_HEADER,
            )
        digest = hashlib.sha256(f"{scope or ''}\x00{key}".encode()).hexdigest()[:32]
        return cls(key=key, message_id=f"idem-{digest}", fingerprint=hashlib.sha256(body).hexdigest())

    def check(self, stored: StoredAnswer) -> None:
        """A 409 when the key was used for another request."""
        if stored.message.fingerprint != self.fingerprint:
            raise ApiError(
                409,
                f"{IDEMPOTENCY_HEADER} {self.key[:64]!r} was already used for a different request; send a new key "
                "for a new request, or the same body to get the first request's answer",
                code="idempotency_key_reused",
                param=IDEMPOTENCY_HEADER,
            )


def stored_outcome(stored: StoredAnswer) -> Finished | None:
    """The outcome of a request already answered, ``None`` while its turn is still to run."""
    if stored.state == "pending":
        return None
    if stored.state == "done" and stored.tool_calls is not None:  # it ended with calls of the client's tools
        reply = stored.reply or ""
        return Finished(session_id=stored.session_id, reply=reply, usage=stored.usage, tool_calls=stored.tool_calls)
    if stored.state == "done" and stored.reply is not None:
        return Finished(session_id=stored.session_id, reply=stored.reply, usage=stored.usage)
    if stored.state == "done":
        return Finished(
            session_id=stored.session_id,
            reply=None,
            failure="the first request with this key ended without an answer; send a new Idempotency-Key to run it "
            "again",
            failure_code="agent_incomplete",
        )
    return Finished(
        session_id=stored.session_id,
        reply=None,
        failure="the first request with this key was refused (the conversation was busy); send a new "
        "Idempotency-Key to try again",
        failure_code="service_unavailable",
    )
