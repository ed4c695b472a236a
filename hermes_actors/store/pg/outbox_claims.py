"""The outbox as several dispatchers share it in cluster mode: each claims rows with ``FOR UPDATE SKIP LOCKED``.

Only the head of a chat (its oldest unsent row, by platform, account, chat and thread) can be claimed, so replies
to one chat leave in commit order whichever dispatcher sends them; a claim lasts ``lease_s`` by the database clock,
so the rows of a dispatcher that died are claimed again once it ends. ``SKIP LOCKED`` lets dispatchers claim at
once without waiting on each other's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.store.outbox_queue import OUTBOX_COLUMNS, outbox_row
from hermes_actors.store.records import OutboxRow
from hermes_actors.store.sql import SqlTable

__all__ = ["Claimed", "OutboxClaims"]

_COLUMNS = ", ".join(f"o.{column.strip()}" for column in OUTBOX_COLUMNS.split(","))
_RETURNED = ", ".join(f"heads.{column.strip()}" for column in OUTBOX_COLUMNS.split(","))
_UNSENT = "{t}.sent_at IS NULL AND {t}.abandoned_at IS NULL"
_MARK = (  # rows found by id = ANY (the key's index, whatever plan), each's platform id taken from the list
    "UPDATE outbox SET sent_at = :at, last_error = NULL, "
    "platform_message_id = (:found::text[])[array_position(:ids::bigint[], id)], "
    "claimed_by = CASE WHEN claimed_by = :who THEN NULL ELSE claimed_by END, "
    "claimed_until = CASE WHEN claimed_by = :who THEN NULL ELSE claimed_until END "
    "WHERE id = ANY(:ids::bigint[])"
)


class Claimed(msgspec.Struct, frozen=True, kw_only=True):
    """What one :meth:`OutboxClaims.claim` took: the rows in id order, the ids of those with another unsent reply of
    their chat behind them, and for a claim ``under`` role terms, the target each row was claimed through (row id ->
    position in ``targets``); each of those rows had its send attempt counted (``attempts`` is the count before)."""

    rows: list[OutboxRow]
    followed: frozenset[int]
    via: dict[int, int] = msgspec.field(default_factory=dict)


class OutboxClaims(SqlTable):
    """Claims of unsent outbox rows by dispatchers (``outbox.claimed_by``, ``claimed_until``; schema version 3)."""

    def claim(
        self,
        dispatcher: str,
        *,
        limit: int = 100,
        lease_s: float = 30.0,
        targets: Sequence[tuple[str, str | None]] | None = None,
        under: tuple[str, dict[str, Any]] | None = None,
        sent: Sequence[tuple[int, str | None]] = (),
    ) -> Claimed:
        """Claim up to ``limit`` rows that are due, unclaimed (or whose claim ran out) and the head of their chat;
        with ``targets``, only rows of those (platform, account) pairs, an account of ``None`` standing for every
        account of its platform. Says which of them have another unsent reply of their chat behind them (the next
        claim's, once they are settled).

        ``under``: the role term each target is sent under, as a query of the positions (from 1) of the targets
        whose term is held (:meth:`~hermes_actors.store.pg.roles.PgRoles.held_among_query`) and its parameters.
        Then only rows of a target whose term is held are claimed, through the first such target that names their
        account (else the first for their platform), and each claimed row's send attempt is counted in the same
        statement: a dispatcher sends only what was claimed and counted under a term it held.

        ``sent``: rows ``dispatcher`` has delivered since, recorded in the same statement as :meth:`sent` does (and
        no longer unsent to the claim: a chat's next reply is claimed in it)."""
        if targets is not None and not targets:
            self.sent(dispatcher, sent)
            return Claimed(rows=[], followed=frozenset())
        if under is not None and targets is None:
            raise ValueError("a claim under role terms names its targets")
        held, held_params = under if under is not None else ("SELECT NULL::bigint AS n WHERE FALSE", {})
        through = (  # the target a row is claimed through: held (or no terms asked), its account's before any
            "SELECT t.n - 1 FROM unnest(:platforms::text[], :accounts::text[]) "
            "WITH ORDINALITY AS t(platform, account, n) WHERE t.platform = {o}.platform "
            "AND (t.account IS NULL OR t.account = {o}.account_id) "
            "AND (NOT :under OR t.n IN (SELECT n FROM held)) ORDER BY t.account IS NULL, t.n LIMIT 1"
        )
        rows = self._db.execute(
            f"WITH held AS ({held}), marked AS ({_MARK}), "
            f"heads AS (SELECT {_COLUMNS} FROM outbox o WHERE {_UNSENT.format(t='o')} AND o.id <> ALL(:ids::bigint[]) "
            "AND o.next_attempt_at <= :now AND (o.claimed_until IS NULL OR o.claimed_until < clock_timestamp()) "
            f"AND (:platforms::text[] IS NULL OR EXISTS ({through.format(o='o')})) "
            f"AND NOT EXISTS (SELECT 1 FROM outbox p WHERE {_UNSENT.format(t='p')} AND p.id < o.id "
            "AND p.id <> ALL(:ids::bigint[]) "
            "AND p.platform = o.platform AND p.account_id = o.account_id "
            "AND p.chat_id IS NOT DISTINCT FROM o.chat_id AND p.thread_id IS NOT DISTINCT FROM o.thread_id) "
            "ORDER BY o.id LIMIT :limit FOR UPDATE OF o SKIP LOCKED) "
            "UPDATE outbox AS u SET claimed_by = :who, attempts = u.attempts + CASE WHEN :under THEN 1 ELSE 0 END, "
            "claimed_until = clock_timestamp() + make_interval(secs => :lease) "
            f"FROM heads WHERE u.id = heads.id RETURNING {_RETURNED}, EXISTS (SELECT 1 FROM outbox n "
            f"WHERE {_UNSENT.format(t='n')} AND n.id > heads.id AND n.id <> ALL(:ids::bigint[]) "
            "AND n.platform = heads.platform "
            "AND n.account_id = heads.account_id AND n.chat_id IS NOT DISTINCT FROM heads.chat_id "
            f"AND n.thread_id IS NOT DISTINCT FROM heads.thread_id), ({through.format(o='heads')})",
            {
                **held_params,
                **self._marks(dispatcher, sent),
                "now": self._clock(),
                "limit": limit,
                "who": dispatcher,
                "lease": lease_s,
                "under": under is not None,
                "platforms": None if targets is None else [platform for platform, _ in targets],
                "accounts": None if targets is None else [account for _, account in targets],
            },
            keyed=True,  # the unsent rows' partial index whatever the values
        )
        claimed = sorted(((outbox_row(row[:-2]), bool(row[-2]), row[-1]) for row in rows), key=lambda r: r[0].id)
        return Claimed(
            rows=[row for row, _, _ in claimed],
            followed=frozenset(row.id for row, behind, _ in claimed if behind),
            via={row.id: int(at) for row, _, at in claimed if under is not None and at is not None},
        )

    def uncount(self, dispatcher: str, outbox_ids: Sequence[int], *, unclaim: bool) -> int:
        """Take back the attempts a claim ``under`` role terms counted for ``outbox_ids`` that ``dispatcher`` did not
        send after all (with ``unclaim``, ending its claims of them too); how many it held."""
        ended = ", claimed_by = NULL, claimed_until = NULL" if unclaim else ""
        return self._db.count(
            f"UPDATE outbox SET attempts = greatest(attempts - 1, 0){ended} WHERE id = ANY(?) AND claimed_by = ?",
            (list(outbox_ids), dispatcher),
        )

    def sent(self, dispatcher: str | None, sent: Sequence[tuple[int, str | None]]) -> None:
        """Record the delivery of rows (row id, platform message id) as
        :meth:`~hermes_actors.store.outbox_queue.Outbox.mark_sent_many` does, and end ``dispatcher``'s claims of
        them (``None``: rows no dispatcher claimed), in one statement."""
        if not sent:
            return
        self._db.execute(_MARK, self._marks(dispatcher, sent), keyed=True)

    def _marks(self, dispatcher: str | None, sent: Sequence[tuple[int, str | None]]) -> dict[str, Any]:
        return {"at": self._clock(), "who": dispatcher, "ids": [i for i, _ in sent], "found": [p for _, p in sent]}

    def failed(self, dispatcher: str, outbox_id: int, error: str, retry_at: float) -> None:
        """Record a failed attempt and when to try again, as
        :meth:`~hermes_actors.store.outbox_queue.Outbox.mark_failed` does, and end ``dispatcher``'s claim of the row,
        in one statement."""
        self._db.execute(
            "UPDATE outbox SET last_error = ?, next_attempt_at = ?, "
            "claimed_by = CASE WHEN claimed_by = ? THEN NULL ELSE claimed_by END, "
            "claimed_until = CASE WHEN claimed_by = ? THEN NULL ELSE claimed_until END WHERE id = ?",
            (error, retry_at, dispatcher, dispatcher, outbox_id),
        )

    def unclaim(self, dispatcher: str, outbox_ids: Sequence[int]) -> int:
        """End ``dispatcher``'s claims of ``outbox_ids`` (sent, failed or put back); how many it held."""
        return self._db.count(
            "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL WHERE id = ANY(?) AND claimed_by = ?",
            (list(outbox_ids), dispatcher),
        )
