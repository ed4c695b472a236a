"""The PostgreSQL store (``pip install 'hermes-actors[cluster]'``): :class:`PostgresStore` implements the same store
interface as the SQLite :class:`~hermes_actors.store.Store`.

Nothing the single-machine daemon imports by default imports this package, so psycopg stays optional: importing
it without psycopg installed raises :class:`ImportError` naming the extra.
"""

from __future__ import annotations

try:
    import psycopg  # noqa: F401
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - the test extra installs psycopg
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and its pool: pip install 'hermes-actors[cluster]'"
    ) from exc

from hermes_actors.store.pg.store import PostgresStore

__all__ = ["PostgresStore"]
