"""Listing conversations: one row per compression lineage, shown by its tip (see :mod:`.lineage`).

A session continues its parent when the parent ended with ``compression`` and it is the parent's newest child (by
``started_at``, then id): the same rule :func:`~.lineage.lineage_tip` walks. Every session is then in exactly one
lineage, and a lineage's tip is the one session of it that nothing continues.

A listing sees only the sessions its filters (``visible`` and ``source``) pass: a continuation another principal
holds does not count, so a lineage never reaches into sessions the caller may not see, and its totals and preview
come from visible sessions only. ``ended`` applies to the tip (a lineage is live while its tip is). Two queries
answer a page whatever its size: the total, and the page with its members' totals, gathered by a walk from each of
the page's tips up to its root. They are written once; SQLite gathers a lineage's members in a JSON array,
PostgreSQL in an array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from hermes_actors.store.lineage import MAX_DEPTH
from hermes_actors.store.records import EndReason, LineagePage, LineageRow, SessionFilter, SessionRecord, TipFilter
from hermes_actors.store.sql import Dialect, SqlDb

__all__ = ["DEFAULT_PREVIEW_CHARS", "list_lineages"]

DEFAULT_PREVIEW_CHARS = 80

_COMPRESSION = EndReason.COMPRESSION.value
_FIELDS = SessionRecord.__struct_fields__


def _next(alias: str) -> str:
    """The id of the session continuing ``alias`` if it ended by compression: its newest child."""
    return (
        f"(SELECT n.id FROM sessions AS n WHERE n.parent_session_id = {alias}.id "
        "ORDER BY n.started_at DESC, n.id DESC LIMIT 1)"
    )


def _scope(alias: str, visible: SessionFilter | None, source: str | None) -> tuple[str, list[Any]]:
    """The condition a session ``alias`` must meet to be listed at all, and its parameters."""
    condition, params = (visible or SessionFilter()).sql(alias)
    if source is not None:
        condition += f" AND {alias}.source = ?"
        params = [*params, source]
    return condition, params


def _tips(
    dialect: Dialect,
    visible: SessionFilter | None,
    source: str | None,
    ended: bool | None,
    among: Sequence[str] | None,
    tip: TipFilter | None = None,
) -> tuple[str, list[Any]]:
    """``FROM sessions AS s WHERE ...`` selecting the tips in scope, and the parameters."""
    scope, params = _scope("s", visible, source)
    child_scope, child_params = _scope("c", visible, source)
    clauses = [
        scope,
        f"NOT (s.end_reason = '{_COMPRESSION}' AND EXISTS "
        f"(SELECT 1 FROM sessions AS c WHERE c.id = {_next('s')} AND {child_scope}))",
    ]
    if ended is not None:
        clauses.append("s.ended_at IS NOT NULL" if ended else "s.ended_at IS NULL")
    tip_clauses, tip_params = (tip or TipFilter()).sql()
    clauses += tip_clauses
    ids: list[Any] = [*tip_params]
    if among is not None:
        clauses.append(dialect.member("s.id"))
        ids.append(dialect.members(list(dict.fromkeys(among))))
    return f"FROM sessions AS s WHERE {' AND '.join(clauses)}", [*params, *child_params, *ids]


def _page_sql(dialect: Dialect, tips: str, scope: str, preview_chars: int) -> str:
    # The walk cannot loop: a member's parent is taken only when that member is the parent's continuation, and a
    # session has one continuation, so a walk that starts at a tip (continued by nothing) never enters a cycle.
    # MAX_DEPTH bounds it anyway. SQLite's CROSS JOIN keeps its join order: from each walked row by primary key,
    # never from an index on a filter column (with a source filter it otherwise scanned the source's sessions per
    # step). PostgreSQL has no CROSS JOIN ... ON, and plans this walk well as a plain JOIN.
    join = "CROSS JOIN" if dialect is Dialect.SQLITE else "JOIN"
    if dialect is Dialect.SQLITE:
        gathered = (
            "json_group_array(id ORDER BY depth DESC) AS ids, (json_group_array(first_user ORDER BY depth DESC) "
            "FILTER (WHERE first_user IS NOT NULL)) ->> 0 AS first_user"
        )
    else:
        gathered = (
            "array_agg(id ORDER BY depth DESC) AS ids, (array_agg(first_user ORDER BY depth DESC) "
            "FILTER (WHERE first_user IS NOT NULL))[1] AS first_user"
        )
    columns = ", ".join(f"t.{name}" for name in _FIELDS)
    return f"""
WITH RECURSIVE
tips AS ({tips}),
walk(tip, id, depth) AS (
    SELECT id, id, 0 FROM tips
    UNION ALL
    SELECT walk.tip, p.id, walk.depth + 1
    FROM walk {join} sessions AS m ON m.id = walk.id {join} sessions AS p ON p.id = m.parent_session_id
    WHERE p.end_reason = '{_COMPRESSION}' AND {scope} AND {_next("p")} = m.id AND walk.depth < {MAX_DEPTH}
),
members AS (
    SELECT walk.tip, walk.id, walk.depth, s.message_count,
        (SELECT u.id FROM messages AS u WHERE u.session_ref = s.ref AND u.role = 'user' ORDER BY u.id LIMIT 1)
            AS first_user
    FROM walk {join} sessions AS s ON s.id = walk.id
),
lineages AS (
    SELECT tip, sum(message_count) AS messages, {gathered}
    FROM members
    GROUP BY tip
)
SELECT {columns}, l.messages, l.ids,
    (SELECT substr(content, 1, {preview_chars * 4}) FROM messages WHERE id = l.first_user) AS preview
FROM lineages AS l JOIN sessions AS t ON t.id = l.tip
ORDER BY t.last_active_at DESC, t.id DESC"""


def _preview_text(content: str | None, chars: int) -> str | None:
    """The first user message as a listing shows it: its text part (an imported multimodal message keeps its
    original value after a NUL), on one line, cut to ``chars`` characters with ``…``."""
    if content is None:
        return None
    text = " ".join(content.split("\x00", 1)[0].split())
    if not text:
        return None
    return text if len(text) <= chars else text[: max(chars - 1, 0)].rstrip() + "…"


def list_lineages(
    db: SqlDb,
    *,
    source: str | None = None,
    ended: bool | None = None,
    limit: int | None = 20,
    visible: SessionFilter | None = None,
    preview_chars: int = DEFAULT_PREVIEW_CHARS,
    tips: Sequence[str] | None = None,
    offset: int = 0,
    tip: TipFilter | None = None,
) -> LineagePage:
    """Return the lineages in scope, most recently active tip first (at most ``limit``; ``None``: all; the first
    ``offset`` skipped), with the number there are in all; ``tips`` keeps only the lineages whose tips have these
    ids, ``tip`` those whose tip passes it. See the module docstring for what a lineage and the scope are."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be 0 or more (None: no limit), not {limit}")
    if preview_chars < 1:
        raise ValueError(f"preview_chars must be 1 or more, not {preview_chars}")
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    dialect = db.dialect
    selected, tip_params = _tips(dialect, visible, source, ended, tips, tip)
    total = int(db.value(f"SELECT count(*) {selected}", tip_params) or 0)
    if limit == 0 or total <= offset:
        return LineagePage(rows=[], total=total)
    scope, scope_params = _scope("p", visible, source)
    page = f"SELECT s.id {selected} ORDER BY s.last_active_at DESC, s.id DESC LIMIT ? OFFSET ?"
    params = [*tip_params, dialect.limit(limit), offset, *scope_params]
    rows = []
    for row in db.execute(_page_sql(dialect, page, scope, preview_chars), params):
        tip_record = SessionRecord(**dict(zip(_FIELDS, row[: len(_FIELDS)], strict=True)))
        messages, ids, preview = row[len(_FIELDS) :]
        members = [str(member) for member in (msgspec.json.decode(ids) if isinstance(ids, str) else ids)]
        rows.append(
            LineageRow(
                tip=tip_record,
                root_id=members[0],
                members=members,
                message_count=int(messages),
                compressions=len(members) - 1,
                preview=_preview_text(preview, preview_chars),
            )
        )
    return LineagePage(rows=rows, total=total)
