"""PostgreSQL's own health checks and compaction, behind ``PostgresStore.check_integrity``,
``check_search_indexes`` and ``optimize`` (pruning and export are written once for both stores:
:mod:`hermes_actors.store.prune`, :mod:`hermes_actors.store.export`).

``check_integrity`` runs the checks PostgreSQL has no built-in command for here: rows whose references dangle
(constraints make them impossible; a count proves it). ``check_search_indexes`` compares the search columns of a
sample of messages with their content; ``optimize`` recomputes every message's, then vacuums.
"""

from __future__ import annotations

from collections.abc import Callable

from hermes_actors.store.maintenance import database_bytes, reclaim
from hermes_actors.store.pg.text import from_db, index_text
from hermes_actors.store.records import OptimizeResult
from hermes_actors.store.sql import SqlDb

__all__ = ["check_integrity", "check_search_indexes", "optimize", "reindex_messages"]

_SEARCH_SAMPLE = 1000


_DANGLING = {
    "messages without a session": "SELECT count(*) FROM messages m WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.ref = m.session_ref)",
    "routes to a missing session": "SELECT count(*) FROM routes r WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.id = r.session_id)",
    "attachments without a message": "SELECT count(*) FROM attachments a WHERE NOT EXISTS "
    "(SELECT 1 FROM messages m WHERE m.id = a.message_id)",
}


def check_integrity(db: SqlDb, progress: Callable[[str], None]) -> list[str]:
    """Rows whose references dangle, one line per kind found."""
    problems = []
    for name, sql in _DANGLING.items():
        progress(name)
        found = int(db.value(sql) or 0)
        if found:
            problems.append(f"{found} {name}")
    return problems


def check_search_indexes(db: SqlDb, progress: Callable[[str], None]) -> list[str]:
    """The search columns of the newest :data:`_SEARCH_SAMPLE` messages against their content; one line if stale."""
    progress("search columns")
    rows = db.execute(
        "SELECT content, words::text, cjk::text, n_tokens FROM messages ORDER BY id DESC LIMIT ?", (_SEARCH_SAMPLE,)
    )
    expected = [index_text(from_db(content)) for content, *_ in rows]
    # The expected literals normalised by PostgreSQL itself, in one statement.
    normalised = db.execute(
        "SELECT w::tsvector::text, c::tsvector::text FROM unnest(?::text[], ?::text[]) AS e(w, c)",
        ([e.words for e in expected], [e.cjk for e in expected]),
    )
    stale = sum(
        1
        for (_, words, cjk, n_tokens), (want_words, want_cjk), e in zip(rows, normalised, expected, strict=True)
        if (words, cjk, n_tokens) != (want_words, want_cjk, e.n_tokens)
    )
    if not stale:
        return []
    return [f"messages search columns: {stale} of the newest {len(rows)} are stale; run 'hermesctl db optimize'"]


def reindex_messages(db: SqlDb, *, batch: int = 1000) -> int:
    """Recompute every message's search columns from its content, ``batch`` per transaction; how many."""
    done = after = 0
    while True:
        rows = db.execute("SELECT id, content FROM messages WHERE id > ? ORDER BY id LIMIT ?", (after, batch))
        if not rows:
            return done
        with db.transaction():
            updates = []
            for message_id, content in rows:
                indexed = index_text(from_db(content))
                updates.append((indexed.words, indexed.cjk, indexed.n_tokens, message_id))
            db.executemany(
                "UPDATE messages SET words = ?::tsvector, cjk = ?::tsvector, n_tokens = ? WHERE id = ?", updates
            )
        done += len(rows)
        after = int(rows[-1][0])


def optimize(db: SqlDb, progress: Callable[[str], None]) -> OptimizeResult:
    """Recompute the search columns, then vacuum and analyze the tables."""
    before = database_bytes(db)
    progress("search columns")
    indexed = reindex_messages(db)
    cjk = int(db.value("SELECT count(*) FROM messages WHERE cjk <> ''::tsvector") or 0)
    progress("vacuum")
    reclaim(db)
    return OptimizeResult(
        messages_indexed=indexed,
        cjk_indexed=cjk,
        wal_kept=False,
        bytes_before=before,
        bytes_after=database_bytes(db),
    )
