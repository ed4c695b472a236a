"""A hostile reference database, and helpers to compare it with what an import made of it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from hermes_actors.importer import COMPACTED_SUFFIX
from hermes_actors.store import Store
from tests.importer.hermes_v22 import HermesDb, multimodal

BIG_SESSION_MESSAGES = 10_000
SLACK_TEAM = "T9"


@dataclass
class Hostile:
    """The hostile fixture: its path and the ids tests look at."""

    path: Path
    chain: list[str] = field(default_factory=list)  # a compression lineage, root first
    hostile: str = ""  # the session with every kind of awkward content
    big: str = ""
    compacted: str = ""  # has rows compacted away and rows rewound
    duplicate_title: str = ""  # titled "dup", which the store under test already holds
    dirty_title: str = ""
    slack_dm: str = ""
    slack_moved: str = ""
    slack_refused: str = ""
    matrix: str = ""
    branched: str = ""
    delegate: str = ""
    odd_end: str = ""
    cesu_message: int = 0
    odd_role_message: int = 0
    plain_prefix_message: int = 0
    queries: list[str] = field(default_factory=list)  # words found there in content only
    cjk_queries: list[str] = field(default_factory=list)  # found by the trigram index there


def _big_texts(count: int) -> list[str]:
    words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    return [
        f"line {i} {words[i % len(words)]} {'长会话内容' if i % 500 == 0 else 'plain'} {i * 7919 % 10007}"
        for i in range(count)
    ]


def build_hostile(path: Path) -> Hostile:
    """Write the hostile reference database at ``path`` and return what it holds."""
    fx = Hostile(path=path)
    with HermesDb(path) as h:
        # A compression lineage with lineage titles; the root and middle ended by compression.
        origin = {"platform": "telegram", "chat_id": 4242, "chat_type": "dm", "user_id": "alice", "user_name": "Alice"}
        root = h.session(
            "20260528_100000_aaaa0001",
            session_key="agent:main:telegram:dm:4242",
            chat_id="4242",
            user_id="alice",
            origin=origin,
            title="project",
            end_reason="compression",
            ended_at=1_780_000_100.0,
            started_at=1_780_000_001.0,
            input_tokens=1200,
            output_tokens=340,
        )
        h.at(1_780_000_010.0)
        h.messages(root, ["let us plan the zebra migration", "sure, first the zebra schema"])
        middle = h.session(
            "20260528_100200_aaaa0002",
            session_key="agent:main:telegram:dm:4242",
            chat_id="4242",
            origin=origin,
            title="project #2",
            parent=root,
            end_reason="compression",
            ended_at=1_780_000_200.0,
            started_at=1_780_000_101.0,
        )
        h.at(1_780_000_110.0)
        h.messages(middle, ["summary of the zebra plan", "continue with quokka tests"])
        tip = h.session(
            "20260528_100400_aaaa0003",
            session_key="agent:main:telegram:dm:4242",
            chat_id="4242",
            origin=origin,
            title="project #3",
            parent=middle,
            started_at=1_780_000_201.0,
        )
        h.at(1_780_000_210.0)
        h.messages(tip, ["quokka tests pass", "ship it"])
        h.route("agent:main:telegram:dm:4242", tip, origin=origin)
        fx.chain = [root, middle, tip]

        # Every kind of awkward content, in one session.
        fx.hostile = h.session(
            "20260528_110000_bbbb0001", source="cli", chat_type=None, title="hostile \x1b[31mred\x1b[0m"
        )
        fx.dirty_title = fx.hostile
        h.message(fx.hostile, "system", "You are Hermes. Treat \x00 NUL bytes with care.")
        h.message(fx.hostile, "user", "before\x00after nulword", platform_message_id=None)
        h.message(fx.hostile, "user", "\x00leading nul then tapirword")
        h.message(
            fx.hostile,
            "user",
            multimodal(
                [
                    {"type": "text", "text": "describe this wombatword 中文字幕测试"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                ]
            ),
        )
        h.message(
            fx.hostile,
            "user",
            multimodal([{"type": "text", "text": "原始中文不转义的多模态 narwhalword"}], ensure_ascii=False),
        )
        h.message(fx.hostile, "user", multimodal([{"type": "text", "text": "broken emoji \ud83d here okapiword"}]))
        h.message(fx.hostile, "user", "\x00json:{not json at all")
        fx.plain_prefix_message = h.message(fx.hostile, "user", "abc\x00json:xyz lemurword")
        fx.cesu_message = h.message(fx.hostile, "user", b"cesu \xed\xa0\xbd\xed\xb8\x80 lone \xed\xa0\x80 raw \xff end")
        h.message(
            fx.hostile,
            "assistant",
            None,
            tool_calls=json.dumps(
                [{"id": "call_1", "type": "function", "function": {"name": "web_search", "arguments": '{"q": "ibex"}'}}]
            ),
        )
        h.message(fx.hostile, "tool", '{"output": "ibexword results"}', tool_name="web_search", tool_call_id="call_1")
        h.message(
            fx.hostile,
            "assistant",
            "emoji 🧪👩‍🔬, rtl \u202eevil\u202c, zero\u200bwidth, CRLF\r\nend",
            platform_message_id="1234567890",
            token_count=17,
        )
        h.message(fx.hostile, "assistant", "")
        fx.odd_role_message = h.message(fx.hostile, "session_meta", "role we do not have")
        h.message(fx.hostile, "developer", "developer instructions become system")
        h.message(fx.hostile, "user", "x" * 200_000 + " giraffeword")

        # 10,000 messages in one session.
        fx.big = h.session("20260528_120000_cccc0001", source="discord", chat_type="group", chat_id="555")
        h.messages(fx.big, _big_texts(BIG_SESSION_MESSAGES))

        # Rows compacted away and rows rewound; a title the store under test already holds; a value we drop.
        fx.compacted = h.session("20260528_130000_dddd0001", title="dup", cwd="/home/alice/project")
        fx.duplicate_title = fx.compacted
        h.message(fx.compacted, "user", "old question about marmotword", active=0, compacted=1)
        h.message(fx.compacted, "assistant", "old answer 旧的压缩内容", active=0, compacted=1)
        h.message(fx.compacted, "user", "a mistake I took back ocelotword", active=0, compacted=0)
        h.message(fx.compacted, "user", "[CONTEXT COMPACTION] summary of the marmot talk")
        h.message(fx.compacted, "assistant", "carry on", reasoning="thinking about marmots")

        # Slack: a DM of unknown workspace, a group whose workspace is known, a channel of unknown workspace.
        fx.slack_dm = h.session(
            "20260528_140000_eeee0001",
            source="slack",
            chat_type="dm",
            chat_id="D1",
            session_key="agent:main:slack:dm:D1",
            origin={"platform": "slack", "chat_type": "dm", "chat_id": "D1", "user_id": "U1"},
        )
        h.messages(fx.slack_dm, ["slack dm hello"])
        h.route("agent:main:slack:dm:D1", fx.slack_dm)
        slack_group = {
            "platform": "slack",
            "chat_type": "group",
            "chat_id": "C1",
            "user_id": "U1",
            "scope_id": SLACK_TEAM,
        }
        fx.slack_moved = h.session(
            "20260528_140100_eeee0002",
            source="slack",
            chat_type="group",
            chat_id="C1",
            session_key="agent:main:slack:group:C1:U1",
            origin=slack_group,
        )
        h.messages(fx.slack_moved, ["slack group hello"])
        h.route("agent:main:slack:group:C1:U1", fx.slack_moved, origin=slack_group)
        fx.slack_refused = h.session(
            "20260528_140200_eeee0003",
            source="slack",
            chat_type="channel",
            chat_id="C2",
            session_key="agent:main:slack:channel:C2:U2",
            origin={"platform": "slack", "chat_type": "channel", "chat_id": "C2", "user_id": "U2"},
        )
        h.messages(fx.slack_refused, ["slack channel hello"])
        h.route("agent:main:slack:channel:C2:U2", fx.slack_refused)

        # A Matrix room id with ':' in it: the same fields, our escaping.
        matrix_origin = {"platform": "matrix", "chat_type": "dm", "chat_id": "!room:hs.org", "user_id": "@al:hs.org"}
        fx.matrix = h.session(
            "20260528_150000_ffff0001",
            source="matrix",
            chat_id="!room:hs.org",
            session_key="agent:main:matrix:dm:!room:hs.org",
            origin=matrix_origin,
        )
        h.route("agent:main:matrix:dm:!room:hs.org", fx.matrix, origin=matrix_origin)

        # Other kinds of children, and an end reason we have no name for.
        fx.branched = h.session(
            "20260528_160000_gggg0001", source="cli", end_reason="branched", ended_at=1_780_100_000.0
        )
        fx.delegate = h.session(
            "20260528_160100_gggg0002",
            source="cli",
            parent=fx.branched,
            model_config=json.dumps({"_delegate_from": fx.branched}),
        )
        fx.odd_end = h.session("20260528_160200_gggg0003", source="cli", end_reason="mystery", ended_at=1_780_100_100.0)
    (path.parent / "sessions.json").write_text(
        json.dumps(
            {
                "_README": "legacy routing entries",
                "agent:main:whatsapp:dm:15550001": {
                    "session_id": fx.odd_end,
                    "platform": "whatsapp",
                    "updated_at": "2026-05-28T10:00:00",
                },
                "agent:main:telegram:dm:4242": {"session_id": root, "updated_at": "2026-01-01T00:00:00"},
            }
        )
    )
    fx.queries = [
        "zebra",
        "quokka",
        "nulword",
        "tapirword",
        "wombatword",
        "lemurword",
        "giraffeword",
        "ibexword",
        '"line 4321"',
        "marmotword",
        "okapiword",
        "narwhalword",
    ]
    fx.cjk_queries = ["长会话内容", "旧的压缩", "不转义的多模态"]
    return fx


def source_rows(path: Path, session_id: str, *, where: str = "active = 1") -> list[dict[str, object]]:
    """The source's rows of a session (content as raw bytes), in id order."""
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = db.execute(
            "SELECT id, role, CAST(content AS BLOB), tool_calls, tool_name, tool_call_id, timestamp, token_count, "
            f"CAST(platform_message_id AS TEXT) FROM messages WHERE session_id = ? AND {where} ORDER BY id",
            (session_id,),
        ).fetchall()
    finally:
        db.close()
    names = ("id", "role", "content", "tool_calls", "tool_name", "tool_call_id", "timestamp", "token_count", "pmid")
    return [dict(zip(names, row, strict=True)) for row in rows]


def id_map(store: Store, path: Path, session_ids: list[str]) -> dict[int, int]:
    """Source message id -> our message id, for live and compacted rows, by position (order is preserved)."""
    mapping: dict[int, int] = {}
    for session_id in session_ids:
        live = [
            r
            for r in source_rows(path, session_id)
            if r["role"] in ("system", "user", "assistant", "tool", "developer")
        ]
        mapping.update(
            zip((int(str(r["id"])) for r in live), (m.id for m in store.load_transcript(session_id)), strict=True)
        )
        compacted = source_rows(path, session_id, where="active = 0 AND compacted = 1")
        if compacted:
            ours = store.load_transcript(session_id + COMPACTED_SUFFIX)
            mapping.update(zip((int(str(r["id"])) for r in compacted), (m.id for m in ours), strict=True))
    return mapping


def decoded(raw: object) -> str | None:
    """Source content bytes as the text we expect back (strictly UTF-8; the one repaired row is checked apart)."""
    return None if raw is None else bytes(raw).decode("utf-8") if isinstance(raw, bytes) else str(raw)
