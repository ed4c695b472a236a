"""Compression lineages on PostgreSQL: root, tip and chain of a session, and the listing of conversations.

The rules of :mod:`hermes_actors.store.lineage` and :mod:`hermes_actors.store.lineage_list`, in PostgreSQL's
recursive queries: a session continues its parent when the parent ended with ``compression`` and it is the
parent's newest child; each walk carries the ids it has visited (an array) and stops at one it has seen and after
:data:`~hermes_actors.store.lineage.MAX_DEPTH` steps, so a corrupt parent cycle cannot hang it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store.lineage import MAX_DEPTH
from hermes_actors.store.lineage_list import preview_text
from hermes_actors.store.pg.db import Database
from hermes_actors.store.records import EndReason, LineagePage, LineageRow, SessionFilter, SessionRecord, TipFilter

__all__ = ["chain_on", "lineage_root", "lineage_tip", "list_lineages"]

_COMPRESSION = EndReason.COMPRESSION.value
_FIELDS = SessionRecord.__struct_fields__

_UP = f"""
up(id, parent, depth, seen) AS (
    SELECT id, parent_session_id, 0, ARRAY[id] FROM sessions WHERE id = %(id)s
    UNION ALL
    SELECT p.id, p.parent_session_id, up.depth + 1, up.seen || p.id
    FROM up JOIN sessions AS p ON p.id = up.parent
    WHERE p.end_reason = '{_COMPRESSION}' AND up.depth < {MAX_DEPTH} AND NOT p.id = ANY(up.seen)
)"""

_DOWN = f"""
down(id, depth, seen) AS (
    SELECT id, 0, ARRAY[id] FROM sessions WHERE id = %(id)s
    UNION ALL
    SELECT c.id, down.depth + 1, down.seen || c.id
    FROM down
    JOIN sessions AS s ON s.id = down.id AND s.end_reason = '{_COMPRESSION}'
    JOIN sessions AS c ON c.id = (
        SELECT n.id FROM sessions AS n WHERE n.parent_session_id = s.id ORDER BY n.started_at DESC, n.id DESC LIMIT 1
    )
    WHERE down.depth < {MAX_DEPTH} AND NOT c.id = ANY(down.seen)
)"""

_ROOT = f"WITH RECURSIVE {_UP} SELECT id FROM up ORDER BY depth DESC LIMIT 1"
_TIP = f"WITH RECURSIVE {_DOWN} SELECT id FROM down ORDER BY depth DESC LIMIT 1"
_CHAIN = f"""WITH RECURSIVE {_UP}, {_DOWN}
SELECT id, position FROM (
    SELECT id, -depth AS position FROM up
    UNION ALL
    SELECT id, depth AS position FROM down WHERE depth > 0
) AS walked
ORDER BY position"""


def _not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")


def _single(db: Database, sql: str, session_id: str) -> str:
    found = db.value(sql, {"id": session_id})
    if found is None:
        raise _not_found(session_id)
    return str(found)


def lineage_root(db: Database, session_id: str) -> str:
    """The first session of ``session_id``'s lineage (:class:`SessionNotFoundError` for an unknown id)."""
    return _single(db, _ROOT, session_id)


def lineage_tip(db: Database, session_id: str) -> str:
    """The newest session continuing ``session_id`` through compressions (itself when none does)."""
    return _single(db, _TIP, session_id)


def chain_on(db: Database, session_id: str) -> list[str]:
    """The lineage through ``session_id``, root first and tip last."""
    chain = list(dict.fromkeys(str(sid) for sid, _ in db.execute(_CHAIN, {"id": session_id})))
    if not chain:
        raise _not_found(session_id)
    return chain


# -- listing conversations (see hermes_actors.store.lineage_list for the rules) -----------------------------------


def _next(alias: str) -> str:
    return (
        f"(SELECT n.id FROM sessions AS n WHERE n.parent_session_id = {alias}.id "
        "ORDER BY n.started_at DESC, n.id DESC LIMIT 1)"
    )


def _scope(alias: str, visible: SessionFilter | None, source: str | None) -> tuple[str, list[Any]]:
    from hermes_actors.store.pg.sessions import scope_sql  # sessions imports this module

    condition, params = scope_sql(visible, alias)
    if source is not None:
        condition += f" AND {alias}.source = %s"
        params = [*params, source]
    return condition, params


def _tips(
    visible: SessionFilter | None,
    source: str | None,
    ended: bool | None,
    among: Sequence[str] | None,
    tip: TipFilter | None = None,
) -> tuple[str, list[Any]]:
    scope, params = _scope("s", visible, source)
    child_scope, child_params = _scope("c", visible, source)
    clauses = [
        scope,
        f"NOT (s.end_reason = '{_COMPRESSION}' AND EXISTS "
        f"(SELECT 1 FROM sessions AS c WHERE c.id = {_next('s')} AND {child_scope}))",
    ]
    if ended is not None:
        clauses.append("s.ended_at IS NOT NULL" if ended else "s.ended_at IS NULL")
    tip_clauses, tip_params = (tip or TipFilter()).sql("%s")
    clauses.extend(tip_clauses)
    ids: list[Any] = [*tip_params]
    if among is not None:
        clauses.append("s.id = ANY(%s)")
        ids.append(list(dict.fromkeys(among)))
    return f"FROM sessions AS s WHERE {' AND '.join(clauses)}", [*params, *child_params, *ids]


def _page_sql(tips: str, scope: str, preview_chars: int) -> str:
    columns = ", ".join(f"t.{name}" for name in _FIELDS)
    return f"""
WITH RECURSIVE
tips AS ({tips}),
walk(tip, id, depth) AS (
    SELECT id, id, 0 FROM tips
    UNION ALL
    SELECT walk.tip, p.id, walk.depth + 1
    FROM walk JOIN sessions AS m ON m.id = walk.id JOIN sessions AS p ON p.id = m.parent_session_id
    WHERE p.end_reason = '{_COMPRESSION}' AND {scope} AND {_next("p")} = m.id AND walk.depth < {MAX_DEPTH}
),
members AS (
    SELECT walk.tip, walk.id, walk.depth, s.message_count,
        (SELECT u.id FROM messages AS u WHERE u.session_ref = s.ref AND u.role = 'user' ORDER BY u.id LIMIT 1)
            AS first_user
    FROM walk JOIN sessions AS s ON s.id = walk.id
),
lineages AS (
    SELECT tip, sum(message_count) AS messages, array_agg(id ORDER BY depth DESC) AS ids,
        (array_agg(first_user ORDER BY depth DESC) FILTER (WHERE first_user IS NOT NULL))[1] AS first_user
    FROM members
    GROUP BY tip
)
SELECT {columns}, l.messages, l.ids,
    (SELECT substr(content, 1, {preview_chars * 4}) FROM messages WHERE id = l.first_user) AS preview
FROM lineages AS l JOIN sessions AS t ON t.id = l.tip
ORDER BY t.last_active_at DESC, t.id DESC"""


def list_lineages(
    db: Database,
    *,
    source: str | None,
    ended: bool | None,
    limit: int | None,
    visible: SessionFilter | None,
    preview_chars: int,
    tips: Sequence[str] | None,
    offset: int = 0,
    tip: TipFilter | None = None,
) -> LineagePage:
    """One row per lineage in scope, most recently active tip first, the first ``offset`` skipped (see
    ``StoreInterface.list_lineages``)."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more (None: no limit), not {limit}")
    if preview_chars < 1:
        raise ValueError(f"preview_chars must be 1 or more, not {preview_chars}")
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    selected, tip_params = _tips(visible, source, ended, tips, tip)
    total = int(db.value(f"SELECT count(*) {selected}", tip_params) or 0)
    if limit == 0 or total <= offset:
        return LineagePage(rows=[], total=total)
    scope, scope_params = _scope("p", visible, source)
    page = f"SELECT s.id {selected} ORDER BY s.last_active_at DESC, s.id DESC LIMIT %s OFFSET %s"
    rows = []
    for row in db.execute(_page_sql(page, scope, preview_chars), [*tip_params, limit, offset, *scope_params]):
        record = SessionRecord(**dict(zip(_FIELDS, row[: len(_FIELDS)], strict=True)))
        messages, ids, preview = row[len(_FIELDS) :]
        members = [str(member) for member in ids]
        rows.append(
            LineageRow(
                tip=record,
                root_id=members[0],
                members=members,
                message_count=int(messages),
                compressions=len(members) - 1,
                preview=preview_text(preview, preview_chars),
            )
        )
    return LineagePage(rows=rows, total=total)
