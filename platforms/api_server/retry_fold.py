"""A request repeated soon after (or while) the same request ran is a client's retry, folded into the same turn.

openai-python, LiteLLM and most SDKs retry a 5xx or a dropped connection without an ``Idempotency-Key``. Each retry
would store the user's message again and call the model again. Here a request without ``Idempotency-Key`` whose
body, key, session and memory scope are exactly those of a request still running, or of one that failed (5xx) at
most ``platforms.api_server.retry_fold_s`` seconds ago, gets that request's message id: it waits for that turn, or
is answered with its stored outcome, as an idempotent retry is (:mod:`platforms.api_server.idempotency`). The same
request after an answer (a frontend's "regenerate"), after a 4xx or after its client left, or after the window, is a
new turn; ``retry_fold_s: 0`` turns folding off.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from platforms.api_server.idempotency import Idempotency
from platforms.api_server.turn_call import Finished

__all__ = ["Folded", "RetryFold", "retried_outcome"]


class Folded(msgspec.Struct, frozen=True, kw_only=True):
    """A request's place in the fold: its message id, and whether it repeats a request seen before."""

    digest: str
    message_id: str
    fingerprint: str
    retried: bool

    def idempotency(self) -> Idempotency | None:
        """For a retry, the idempotency that answers it from the first request's turn; ``None`` otherwise."""
        if not self.retried:
            return None
        return Idempotency(key="(a retried request)", message_id=self.message_id, fingerprint=self.fingerprint)


@dataclass
class _Seen:
    message_id: str
    active: int  # requests of this digest still running
    ended_at: float | None  # when the last of them ended (clock time), None while one runs


class RetryFold:
    """The requests of one API server seen in the last ``window_s`` seconds (0: folding is off)."""

    def __init__(self, window_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._seen: dict[str, _Seen] = {}

    def begin(self, body: bytes, *parts: str | None) -> Folded:
        """Place a request with ``body`` and the ``parts`` that tell requests apart (key scope, session, memory);
        call :meth:`end` with the result when the request is done."""
        fingerprint = hashlib.sha256(body).hexdigest()
        seed = "\x00".join(part or "" for part in parts) + "\x00" + fingerprint
        digest = hashlib.sha256(seed.encode()).hexdigest()
        if self._window_s <= 0:
            return Folded(digest=digest, message_id=f"api-{uuid.uuid4().hex}", fingerprint=fingerprint, retried=False)
        now = self._clock()
        self._prune(now)
        seen = self._seen.get(digest)
        if seen is not None:
            seen.active += 1
            seen.ended_at = None
            return Folded(digest=digest, message_id=seen.message_id, fingerprint=fingerprint, retried=True)
        message_id = f"api-{uuid.uuid4().hex}"
        self._seen[digest] = _Seen(message_id=message_id, active=1, ended_at=None)
        return Folded(digest=digest, message_id=message_id, fingerprint=fingerprint, retried=False)

    def end(self, folded: Folded, *, failed: bool) -> None:
        """The request placed as ``folded`` is done. When it ``failed`` (a 5xx: its client got no answer) the window
        of its retries starts now; once it was answered (or refused, or its client left) the same request again is
        a new turn (a frontend's "regenerate" sends the same body)."""
        seen = self._seen.get(folded.digest)
        if seen is None or seen.message_id != folded.message_id:
            return
        seen.active = max(0, seen.active - 1)
        if seen.active == 0:
            if failed:
                seen.ended_at = self._clock()
            else:
                del self._seen[folded.digest]

    def _prune(self, now: float) -> None:
        stale = [
            digest
            for digest, seen in self._seen.items()
            if seen.ended_at is not None and now - seen.ended_at > self._window_s
        ]
        for digest in stale:
            del self._seen[digest]


def retried_outcome(outcome: Finished) -> Finished:
    """The stored outcome of a folded retry, its failure said as what it is (not as an ``Idempotency-Key``'s)."""
    if outcome.reply is not None:
        return outcome
    return msgspec.structs.replace(
        outcome,
        failure="this request repeats one that ended without an answer moments ago, and gets its outcome (a "
        "client's retries are folded into one turn); the message is kept in its session: send it again after "
        "platforms.api_server.retry_fold_s seconds, or with a new Idempotency-Key, to run it again",
    )
