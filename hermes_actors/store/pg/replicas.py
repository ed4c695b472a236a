"""The ``hermesd --cluster`` replicas (``cluster_replicas``, schema version 7): who runs, since when, on which config.

Each replica beats every few seconds (by the database clock, as the shard hosts do), so ``hermesctl cluster status``
and the replicas' ``/metrics`` list every replica, not only those holding a role. A beat carries the fingerprint of
the replica's cluster-relevant config and that config as text, so replicas started with different configs can be
told apart, and the difference shown. A replica that stops cleanly removes its row; a killed one's row shows how
long ago it beat, and is removed by the next replica to start once it is a day old.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from hermes_actors.store.sql import SqlDb

__all__ = ["PgReplicas", "ReplicaBeat"]

_NOW = "(clock_timestamp() + make_interval(secs => :skew))"
_FORGOTTEN_AFTER = "1 day"


class ReplicaBeat(msgspec.Struct, frozen=True, kw_only=True):
    """One replica: seconds since its last beat and since it started, and its config's fingerprint and text."""

    name: str
    seen_s_ago: float
    up_s: float
    fingerprint: str
    settings: str


class PgReplicas:
    """The ``cluster_replicas`` table (``skew`` seconds are added to the database clock, for tests)."""

    __slots__ = ("_db", "_skew")

    def __init__(self, db: SqlDb, skew: Callable[[], float]) -> None:
        self._db = db
        self._skew = skew

    def beat(self, name: str, *, fingerprint: str = "", settings: str = "") -> None:
        """Record that replica ``name`` runs now, on the config ``settings`` (``fingerprint`` its digest)."""
        self._db.execute(
            "INSERT INTO cluster_replicas (name, seen_at, started_at, fingerprint, settings) "
            f"VALUES (:name, {_NOW}, {_NOW}, :fingerprint, :settings) "
            "ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at, fingerprint = excluded.fingerprint, "
            "settings = excluded.settings",
            {"name": name, "fingerprint": fingerprint, "settings": settings, "skew": self._skew()},
        )

    def forget(self, name: str) -> None:
        """Remove replica ``name`` (it stopped), and every replica silent for a day."""
        self._db.execute(
            f"DELETE FROM cluster_replicas WHERE name = :name OR seen_at < {_NOW} - interval '{_FORGOTTEN_AFTER}'",
            {"name": name, "skew": self._skew()},
        )

    def beats(self) -> list[ReplicaBeat]:
        """Every replica known, by name."""
        rows = self._db.execute(
            f"SELECT name, extract(epoch FROM {_NOW} - seen_at)::double precision, "
            f"extract(epoch FROM {_NOW} - started_at)::double precision, fingerprint, settings "
            "FROM cluster_replicas ORDER BY name",
            {"skew": self._skew()},
        )
        return [
            ReplicaBeat(name=str(n), seen_s_ago=float(seen), up_s=float(up), fingerprint=str(f), settings=str(s))
            for n, seen, up, f, s in rows
        ]
