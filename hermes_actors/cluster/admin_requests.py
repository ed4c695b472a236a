"""An operator's rename, end or delete of a session in cluster mode, sent as a row of the session's shard inbox.

In a cluster a session's live actor runs in whichever shard host holds its shard, and every change to it must
commit under that shard's fenced lease. So ``hermesctl sessions rename/end/delete --dsn`` does not write the store
itself: :func:`request_change` commits an inbox row of kind :attr:`~hermes_actors.store.records.InboxKind.ADMIN`
into the session's shard
(its ``NOTIFY`` wakes the holder), the holding host applies it through its supervisor's ordinary admin path
(:mod:`hermes_actors.cluster.host.admin`, the one hermesd's control socket uses) and completes the row with the
outcome written into its payload, and :func:`request_change` returns that outcome. A row no host takes within the
wait is withdrawn, so a host started later never applies a change its operator was told had failed.
"""

from __future__ import annotations

import enum
import threading
import time
import uuid
from collections.abc import Callable

import msgspec

from hermes_actors.errors import HermesError
from hermes_actors.store import EndReason, InboxState
from hermes_actors.store.pg.shards import shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.records import InboxKind

__all__ = [
    "CHANGE_TIMEOUT_S",
    "AdminOp",
    "AdminOutcome",
    "AdminRequest",
    "decode_request",
    "encode_request",
    "request_change",
    "shard_count",
]

CHANGE_TIMEOUT_S = 30.0
"""How long ``hermesctl`` waits for a shard host to apply a change."""

_POLL_S = 0.1


class AdminOp(enum.StrEnum):
    """What an operator asks of one session."""

    RENAME = "rename"
    END = "end"
    DELETE = "delete"  # ends the session first when it is live (the operator confirmed that)


class AdminOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What the host did: ``error`` (why nothing changed) or the stored ``title`` (rename), whether a live session
    was ``ended`` (end, delete) and whether it was ``deleted``; ``host`` names the host that applied it."""

    host: str
    error: str | None = None
    title: str | None = None
    ended: bool = False
    deleted: bool = False


class AdminRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The payload of an admin row: the change, and once a host completed the row, its ``outcome``."""

    op: AdminOp
    session_id: str
    request_id: str
    title: str | None = None
    reason: EndReason | None = None  # an end's reason (``None``: ``operator``; a fork ends its parent ``branched``)
    outcome: AdminOutcome | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AdminRequest)


def encode_request(request: AdminRequest) -> bytes:
    """The row payload of ``request``."""
    return _encoder.encode(request)


def decode_request(payload: bytes) -> AdminRequest:
    """The request (and outcome) an admin row's payload holds."""
    return _decoder.decode(payload)


def shard_count(store: PostgresStore) -> int:
    """The cluster's shard count (the rows of its shard map); an error naming the fix when no host ever ran."""
    shards = len(store.shards.leases())
    if shards == 0:
        raise HermesError(
            f"no shard host has ever run on {store.path}, so no host can apply the change; start the cluster "
            "('hermesd --cluster') and check it with 'hermesctl cluster status'"
        )
    return shards


def request_change(
    store: PostgresStore,
    op: AdminOp,
    session_id: str,
    *,
    title: str | None = None,
    reason: EndReason | None = None,
    timeout_s: float | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> AdminOutcome:
    """Commit the change as a row of the session's shard and wait (``timeout_s``, :data:`CHANGE_TIMEOUT_S` by
    default) for the holding host's outcome. :class:`HermesError` when the host refused it (its reason) or when
    no host completed it in time (naming ``hermesctl cluster status``)."""
    shard = shard_of(session_id, shard_count(store))
    request = AdminRequest(op=op, session_id=session_id, request_id=uuid.uuid4().hex, title=title, reason=reason)
    inbox_id = store.shard_queue.add(
        shard,
        kind=InboxKind.ADMIN,
        platform="",
        account_id="",
        platform_message_id=request.request_id,
        routing_key=f"admin:{session_id}",
        payload=encode_request(request),
    )
    if inbox_id is None:  # a fresh uuid4 never collides; refuse rather than wait for someone else's row
        raise HermesError(f"the change to session {session_id} could not be queued; try again")
    wait = CHANGE_TIMEOUT_S if timeout_s is None else timeout_s
    outcome = _wait_outcome(store, inbox_id, monotonic() + wait, monotonic)
    if outcome is None and store.shard_queue.withdraw(inbox_id):
        raise HermesError(
            f"no shard host applied the change to session {session_id} within {wait:g} s (shard {shard}), so it "
            "was withdrawn and nothing changed; check that a host holds the shard with 'hermesctl cluster status', "
            "then try again"
        )
    if outcome is None:  # a host took it: completed just now, or still at it
        outcome = _wait_outcome(store, inbox_id, monotonic(), monotonic)
    if outcome is None:
        row = store.inbox.get(inbox_id)
        holder = row.owner if row is not None and row.owner else "a shard host"
        raise HermesError(
            f"{holder} took the change to session {session_id} but has not finished it within {wait:g} s (a turn "
            "of the session may still be running); it applies when that turn ends. Check it with 'hermesctl "
            "sessions show', and the hosts with 'hermesctl cluster status'"
        )
    if outcome.error is not None:
        raise HermesError(outcome.error)
    return outcome


def _wait_outcome(
    store: PostgresStore, inbox_id: int, deadline: float, monotonic: Callable[[], float]
) -> AdminOutcome | None:
    pause = threading.Event()
    while True:
        row = store.inbox.get(inbox_id)
        if row is not None and row.state is not InboxState.PENDING:
            request = decode_request(row.payload)
            if request.outcome is None:  # refused without an outcome: withdrawn by someone else
                return AdminOutcome(host="", error=f"the change to session {request.session_id} was withdrawn")
            return request.outcome
        if monotonic() >= deadline:
            return None
        pause.wait(_POLL_S)
