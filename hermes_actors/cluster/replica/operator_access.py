"""The operator's routes (``/api/sessions``, the web console) in cluster mode: the same
:class:`~hermes_actors.runtime.operator.GatewayOperator`, reading and writing the PostgreSQL store directly and
handing renames, ends and deletes to the session's shard host through its ``admin``."""

from __future__ import annotations

from typing import TypeVar

from hermes_actors.cluster.admin_requests import AdminOp, request_change
from hermes_actors.runtime.operator import GatewayOperator, SessionAdmin
from hermes_actors.runtime.store_access import DirectAccess
from hermes_actors.store import EndReason, SessionRecord
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["ClusterSessionAdmin", "cluster_operator"]

T = TypeVar("T")


class ClusterSessionAdmin:
    """:class:`~hermes_actors.runtime.operator.SessionAdmin` of a cluster: each change is an admin row of the
    session's shard, applied by the holding host (:func:`~hermes_actors.cluster.admin_requests.request_change`,
    as ``hermesctl sessions ... --dsn`` does), so the session's live actor applies it wherever it runs."""

    def __init__(self, store: PostgresStore, *, timeout_s: float | None = None) -> None:
        self._store = store
        self._timeout = timeout_s

    def check(self, session_id: str) -> SessionRecord:
        """The session's record (:class:`~hermes_actors.errors.SessionNotFoundError` for none). No other process
        can hold it busy: its shard's host applies every change."""
        return self._store.get_session(session_id)

    def rename(self, record: SessionRecord, title: str) -> str | None:
        outcome = request_change(self._store, AdminOp.RENAME, record.id, title=title, timeout_s=self._timeout)
        return outcome.title

    def end(self, record: SessionRecord, reason: EndReason = EndReason.OPERATOR) -> bool:
        outcome = request_change(self._store, AdminOp.END, record.id, reason=reason, timeout_s=self._timeout)
        return outcome.ended

    def delete(self, record: SessionRecord) -> tuple[bool, bool]:
        outcome = request_change(self._store, AdminOp.DELETE, record.id, timeout_s=self._timeout)
        return outcome.ended, outcome.deleted


def cluster_operator(store: PostgresStore, admin_key: str, admin: SessionAdmin) -> GatewayOperator:
    """The operator of a ``hermesd --cluster`` replica."""
    return GatewayOperator(DirectAccess(store), admin_key, admin=admin)
