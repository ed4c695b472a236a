"""What the cluster tests check in SQL after the inbox drains (the turns' agent is :class:`SeeingAgent`)."""

from __future__ import annotations

import itertools
import re

from hermes_actors.store.pg import PostgresStore

__all__ = ["counts", "order_violations", "overlapping_turns", "pending_rows", "replies", "stale_context_commits"]

_SAW = re.compile(r"^saw (\d+) after (.*?)(?: @([\d.]+)-([\d.]+))?$", re.DOTALL)


def pending_rows(pg: PostgresStore) -> int:
    """Inbox rows not answered yet."""
    return int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'"))


def replies(pg: PostgresStore) -> list[tuple[str, str]]:
    """(session id, text) of every assistant message, in commit order."""
    rows = pg.database.execute(
        "SELECT s.id, m.content FROM messages m JOIN sessions s ON s.ref = m.session_ref "
        "WHERE m.role = 'assistant' ORDER BY m.id"
    )
    return [(str(s), str(c)) for s, c in rows]


def stale_context_commits(pg: PostgresStore) -> list[str]:
    """The turns whose agent did not see the whole committed history before them: a turn's reply ``saw N after
    T`` must follow exactly N earlier user messages of its conversation (its own excluded), the last of them T.

    A conversation is a routing key's (these tests send no /new or /reset): a second session created for the same
    key by a host that did not see the first one's commit counts against it too."""
    rows = pg.database.execute(
        "SELECT s.routing_key, m.role, m.content FROM messages m JOIN sessions s ON s.ref = m.session_ref "
        "ORDER BY s.routing_key, m.id"
    )
    wrong: list[str] = []
    users: dict[str, list[str]] = {}
    for session_id, role, content in rows:
        seen = users.setdefault(str(session_id), [])
        if role == "user":
            seen.append(str(content))
            continue
        match = _SAW.match(str(content or ""))
        if role != "assistant" or match is None:
            continue
        before = seen[:-1]
        expected = (len(before), before[-1] if before else "-")
        if (int(match[1]), match[2]) != expected:
            wrong.append(f"{session_id}: {content!r} after {len(before)} user messages, the last {expected[1]!r}")
    return wrong


def counts(pg: PostgresStore) -> dict[str, int]:
    """Inbox rows, outbox rows, committed turns (assistant messages) and user messages."""
    value = pg.database.value
    return {
        "inbox": int(value("SELECT count(*) FROM inbox")),
        "outbox": int(value("SELECT count(*) FROM outbox")),
        "turns": int(value("SELECT count(*) FROM messages WHERE role = 'assistant'")),
        "user_messages": int(value("SELECT count(*) FROM messages WHERE role = 'user'")),
    }


def order_violations(pg: PostgresStore) -> list[str]:
    """Conversations whose user messages were committed in another order than their inbox rows."""
    inbox: dict[str, list[str]] = {}
    for key, message_id in pg.database.execute("SELECT routing_key, platform_message_id FROM inbox ORDER BY id"):
        inbox.setdefault(str(key), []).append(str(message_id))
    committed: dict[str, list[str]] = {}
    rows = pg.database.execute(
        "SELECT s.routing_key, m.platform_message_id FROM messages m JOIN sessions s ON s.ref = m.session_ref "
        "WHERE m.role = 'user' ORDER BY m.id"
    )
    for key, message_id in rows:
        committed.setdefault(str(key), []).append(str(message_id))
    wrong = []
    for key in sorted(inbox):
        got = committed.get(key, [])
        if got != inbox[key]:
            first = next((i for i, (a, b) in enumerate(zip(got, inbox[key], strict=False)) if a != b), len(got))
            wrong.append(
                f"{key}: from #{first} inbox {inbox[key][first : first + 4]} committed {got[first : first + 4]}"
            )
    return wrong


def overlapping_turns(pg: PostgresStore) -> list[str]:
    """Committed turns of one conversation whose agent calls overlapped in time (replies of ``stamped`` agents)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    rows = pg.database.execute(
        "SELECT s.routing_key, m.content FROM messages m JOIN sessions s ON s.ref = m.session_ref "
        "WHERE m.role = 'assistant'"
    )
    for key, content in rows:
        match = _SAW.match(str(content or ""))
        if match is not None and match[3] is not None:
            spans.setdefault(str(key), []).append((float(match[3]), float(match[4])))
    wrong = []
    for key, turns in spans.items():
        turns.sort()
        wrong += [f"{key}: {a} and {b}" for a, b in itertools.pairwise(turns) if b[0] < a[1]]
    return wrong
