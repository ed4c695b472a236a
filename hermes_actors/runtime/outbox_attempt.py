"""One send of an outbox lane, run on a lane worker: count the attempt (unless its row was committed with it
counted ahead), send, add the reply's sent mark, and tell the outbox actor what happened.

Counting waits for the writer's commit (up to :data:`ATTEMPT_TIMEOUT_S`): the count is what flags a resend after a
crash, so a send whose attempt could not be counted is not made, unless the sender's sends are idempotent (then a
repeat is harmless and the reply goes anyway). A sender raising something other than
:class:`~hermes_actors.ports.SendError` is logged and the failure's outcome is unknown.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pykka

from hermes_actors.messages import OutboundMessage
from hermes_actors.ports import ReplySender, SendError
from hermes_actors.runtime.protocol import ChatKey, ReplyFailed, ReplySent
from hermes_actors.runtime.sent_marks import SentMarks
from hermes_actors.store.writer import StoreWriter

__all__ = ["ATTEMPT_TIMEOUT_S", "Attempt"]

_log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_S = 10.0  # counting an attempt waits this long for the writer; then the send is retried later


class Attempt:
    """One send on a lane worker: count the attempt (unless counted ahead), send, add its sent mark, tell the actor
    what happened."""

    __slots__ = ("_actor", "_count", "_key", "_marks", "_message", "_outbox_id", "_sender", "_writer")

    def __init__(
        self,
        actor: pykka.ActorRef[Any],
        sender: ReplySender,
        writer: StoreWriter,
        marks: SentMarks,
        key: ChatKey,
        outbox_id: int,
        message: OutboundMessage,
        *,
        count: bool,
    ) -> None:
        self._actor = actor
        self._sender = sender
        self._writer = writer
        self._marks = marks
        self._key = key
        self._outbox_id = outbox_id
        self._message = message
        self._count = count

    def __call__(self) -> None:
        self._tell(self._attempt())

    def _attempt(self) -> ReplySent | ReplyFailed:
        outbox_id, message = self._outbox_id, self._message
        try:
            if self._count:
                self._writer.call(lambda store: store.outbox.begin_attempt(outbox_id), timeout=ATTEMPT_TIMEOUT_S)
        except Exception as exc:  # a writer timeout, a full disk or a closed store
            if not self._sender.idempotent_sends:  # the count is what flags a resend after a crash: not sent
                return self._failure(f"its attempt could not be counted ({exc!r}), so it was not sent")
            _log.warning(
                "outbox %s: reply %d's attempt could not be counted (%s); sent anyway, as a repeated send of it is "
                "harmless",
                message.platform,
                outbox_id,
                exc,
            )
        try:
            platform_id = self._sender.send(message)
        except SendError as exc:
            return self._failure(
                str(exc), retry_after_s=exc.retry_after_s, unknown=exc.outcome_unknown, permanent=exc.permanent
            )
        except Exception as exc:
            _log.exception("outbox %s: the sender failed on reply %d", message.platform, outbox_id)
            return self._failure(f"the sender failed: {exc!r}", unknown=True)
        self._marks.add(outbox_id, platform_id)
        return ReplySent(key=self._key, outbox_id=outbox_id, message=message)

    def _failure(
        self, error: str, *, retry_after_s: float | None = None, unknown: bool = False, permanent: bool = False
    ) -> ReplyFailed:
        return ReplyFailed(
            key=self._key,
            outbox_id=self._outbox_id,
            message=self._message,
            error=error,
            retry_after_s=retry_after_s,
            unknown=unknown,
            permanent=permanent,
        )

    def _tell(self, outcome: ReplySent | ReplyFailed) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # stopped meanwhile: the store has what matters
            self._actor.tell(outcome)
