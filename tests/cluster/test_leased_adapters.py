"""Long-poll adapters as leased singletons: two replicas (ClusterReplica objects standing for two hermesd --cluster
processes, each with a store of its own) compete for a Telegram polling bot on a local fake of the Bot API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from hermes_actors.cluster.replica.entry_points import ClusterReplica
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.cluster.replica.singleton import LeasedAdapter
from hermes_actors.errors import RoleLostError
from hermes_actors.media import MediaStore
from hermes_actors.messages import InboundMessage, OutboundMessage, decode_inbound, encode
from hermes_actors.ports import Adapter, PollCursor
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.platform_board import PlatformBoard
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import poll_until
from platforms import registry
from platforms.registry import placement
from platforms.telegram import TelegramAdapter, TelegramBot, TelegramConfig
from platforms.telegram.updates import PLATFORM
from tests.platforms.telegram_fake import TelegramFake, message, post_update, private_chat, user
from tests.platforms.test_telegram import OTHER_TOKEN, SECRET, TOKEN, an_update, make_config, webhook_config

SHARDS = 8
TTL = 1.0  # a role term: the takeover waits for it to run out
ALICE = user(5001, "Alice", username="alice")


@pytest.fixture
def fake() -> Iterator[TelegramFake]:
    with TelegramFake() as server:
        server.add_bot(TOKEN)
        yield server


class Replica:
    """One hermesd --cluster replica without Ray: its own store (pool), ingress, inbox and entry points; the adapters
    it built, in order."""

    def __init__(self, name: str, dsn: str, config: TelegramConfig, media: Path) -> None:
        self.store = PostgresStore.open(dsn, migrate_schema=False)
        self.ingress = ClusterIngress(self.store, shards=SHARDS)
        board = PlatformBoard()
        self.inbox = ClusterInbox(self.ingress, MediaStore(media), board=board)
        self.built: list[Adapter] = []
        self.entry = ClusterReplica(
            self.store,
            self.inbox,
            {"telegram": config},
            build=self._build,
            name=name,
            role_ttl_s=TTL,
            dispatch_interval_s=0.05,
            board=board,
        )

    def bot(self, name: str) -> LeasedAdapter:
        """The singleton of the bot ``name`` in this replica."""
        return self.entry.leased[(PLATFORM, name)]

    @property
    def leased(self) -> LeasedAdapter:
        return self.bot("main")

    def _build(self, platform: str, config: msgspec.Struct) -> Adapter:
        assert isinstance(config, TelegramConfig)
        adapter = TelegramAdapter(config, environ={})
        self.built.append(adapter)
        return adapter

    def close(self) -> None:
        self.entry.stop()
        self.inbox.close()
        self.store.close()


def _inbox_ids(store: PostgresStore) -> list[str]:
    rows = store.database.execute("SELECT platform_message_id FROM inbox WHERE platform = %s ORDER BY id", (PLATFORM,))
    return [str(row[0]) for row in rows]


def _push(fake: TelegramFake, texts: list[str]) -> list[int]:
    return [fake.push(TOKEN, message(private_chat(ALICE), ALICE, text)) for text in texts]


def test_one_replica_polls_and_the_other_takes_over_from_the_committed_cursor_after_the_term(
    fake: TelegramFake, postgres_dsn: str, tmp_path: Path
) -> None:
    config = make_config(fake, poll_timeout_s=1)
    a = Replica("replica-a", postgres_dsn, config, tmp_path / "a")
    b = Replica("replica-b", postgres_dsn, config, tmp_path / "b")
    a.entry.start(heartbeats=False)  # the test ticks the heartbeats itself: a "killed" replica stops ticking
    b.entry.start(heartbeats=False)
    try:
        assert a.leased.tick()
        assert not b.leased.tick()
        _push(fake, [f"before {n}" for n in range(5)])

        def a_alive_and(check: int) -> bool:
            a.leased.tick()
            b.leased.tick()
            return len(_inbox_ids(a.store)) >= check

        poll_until(lambda: a_alive_and(5), timeout=10, interval=0.05, what="the first five updates in the inbox")
        assert b.built == []  # b never polled while a held the role
        first_cursor = a.store.kv.get_cursor(PLATFORM, "main")
        assert first_cursor is not None

        # a is killed: its adapter stops with the process, its term is not released and not renewed.
        a.built[0].stop()
        polls_before = len(fake.offsets(TOKEN))
        _push(fake, [f"during {n}" for n in range(5)])
        took_over = poll_until(lambda: b.leased.tick(), timeout=TTL * 5, interval=0.05, what="b taking the role over")
        assert took_over
        assert len(b.built) == 1
        poll_until(lambda: len(fake.offsets(TOKEN)) > polls_before, what="b's first poll")
        assert fake.offsets(TOKEN)[polls_before] == int(first_cursor)  # b went on from the committed cursor
        _push(fake, [f"after {n}" for n in range(5)])
        poll_until(
            lambda: b.leased.tick() and len(_inbox_ids(b.store)) >= 15,
            timeout=10,
            interval=0.05,
            what="all fifteen updates in the inbox",
        )
        ids = _inbox_ids(b.store)
        assert len(ids) == len(set(ids)) == 15  # every update once, none lost
        texts = [
            decode_inbound(bytes(row[0])).text
            for row in b.store.database.execute("SELECT payload FROM inbox ORDER BY id")
        ]
        assert texts == [f"{when} {n}" for when in ("before", "during", "after") for n in range(5)]
        assert int(b.store.kv.get_cursor(PLATFORM, "main") or 0) > int(first_cursor)
        poll_until(lambda: fake.pending(TOKEN) == 0, what="the fake told every update was confirmed")
    finally:
        a.close()
        b.close()


def test_a_paused_replica_that_still_polls_after_its_term_commits_nothing_and_nothing_is_lost(
    fake: TelegramFake, postgres_dsn: str, tmp_path: Path
) -> None:
    config = make_config(fake, poll_timeout_s=1)
    a = Replica("replica-a", postgres_dsn, config, tmp_path / "a")
    b = Replica("replica-b", postgres_dsn, config, tmp_path / "b")
    try:
        assert a.leased.tick()
        _push(fake, ["one", "two"])
        poll_until(lambda: len(_inbox_ids(a.store)) == 2, interval=0.05, what="the first updates in the inbox")
        # a stops renewing but its adapter goes on polling (a stalled heartbeat, a paused process waking up)
        poll_until(lambda: b.leased.tick(), timeout=TTL * 5, interval=0.05, what="b taking the role over")
        assert a.leased.running  # a never heard: its adapter still runs
        _push(fake, [f"later {n}" for n in range(6)])
        poll_until(
            lambda: b.leased.tick() and len(_inbox_ids(b.store)) >= 8,
            timeout=10,
            interval=0.05,
            what="every update in the inbox although two replicas poll",
        )
        ids = _inbox_ids(b.store)
        assert len(ids) == len(set(ids)) == 8
        with pytest.raises(RoleLostError):  # what a's poller meets on each batch it tries to commit
            a.leased.inbox.accept_many([], cursor=PollCursor(platform=PLATFORM, cursor="1", account_id="main"))
    finally:
        a.close()
        b.close()


def test_a_replica_whose_role_was_taken_cannot_commit_a_batch_or_move_the_cursor(
    fake: TelegramFake, postgres_dsn: str, tmp_path: Path
) -> None:
    config = make_config(fake, poll_timeout_s=1)
    a = Replica("replica-a", postgres_dsn, config, tmp_path / "a")
    b = Replica("replica-b", postgres_dsn, config, tmp_path / "b")
    try:
        assert a.leased.tick()
        batch = [inbound("m-1", "one")]
        a.leased.inbox.accept_many(batch, cursor=PollCursor(platform=PLATFORM, cursor="101", account_id="main"))
        assert a.inbox.poll_cursor(PLATFORM, "main") == "101"
        a.built[0].stop()  # a is paused past its term: no renewals
        poll_until(lambda: b.leased.tick(), timeout=TTL * 5, interval=0.05, what="b taking the role over")
        stale = [inbound("m-2", "two")]
        with pytest.raises(RoleLostError):
            a.leased.inbox.accept_many(stale, cursor=PollCursor(platform=PLATFORM, cursor="102", account_id="main"))
        assert b.inbox.poll_cursor(PLATFORM, "main") == "101"  # the cursor did not move
        assert _inbox_ids(b.store) == ["m-1"]  # nor did its rows commit
        a.leased.term.keep()  # even were its local term renewed: the database refuses the old epoch
        with pytest.raises(RoleLostError):
            a.leased.inbox.accept_many(stale, cursor=None)
    finally:
        a.close()
        b.close()


def inbound(message_id: str, text: str) -> InboundMessage:
    source = SessionSource(platform=PLATFORM, chat_id="5001", user_id="5001", account_id="main")
    return InboundMessage(source=source, message_id=message_id, text=text)


def test_each_platform_section_has_one_placement() -> None:
    assert placement("webhook") == "push"
    assert {placement(p) for p in ("telegram", "discord", "matrix", "signal", "email", "qqbot", "dingtalk")} == {
        "leased"
    }
    assert placement("api_server") == "request"
    push = ("slack", "feishu", "whatsapp", "teams", "sms", "bluebubbles", "wecom")
    assert {placement(p) for p in push} == {"push"}
    assert "not yet" not in {placement(p) for p in registry.PLATFORMS}  # every platform runs in cluster mode
    assert placement("no-such-platform") == "not yet"


def _reply(store: PostgresStore, text: str) -> int:
    reply = OutboundMessage(platform=PLATFORM, account_id="main", chat_id="5001", text=text)
    return store.outbox.add(
        session_id=None, platform=PLATFORM, account_id="main", chat_id="5001", thread_id=None, payload=encode(reply)
    )


def test_a_leased_adapter_s_replies_are_sent_by_the_replica_that_runs_it_and_follow_it_on_a_takeover(
    fake: TelegramFake, postgres_dsn: str, tmp_path: Path
) -> None:
    config = make_config(fake, poll_timeout_s=1)
    a = Replica("replica-a", postgres_dsn, config, tmp_path / "a")
    b = Replica("replica-b", postgres_dsn, config, tmp_path / "b")
    a.entry.start(heartbeats=False)
    b.entry.start(heartbeats=False)
    try:
        assert a.leased.tick()
        assert not b.leased.tick()
        _reply(a.store, "from a")
        fake.wait_for(lambda: [m["text"] for m in fake.sent(TOKEN)] == ["from a"])
        assert a.entry.dispatcher.held() == {"adapter:telegram:main"}  # the bot's replies go with its adapter
        assert b.entry.dispatcher.held() == set()  # b has no Telegram sender: it runs no Telegram adapter
        a.entry.stop()  # a shuts down: both roles are released
        poll_until(lambda: b.leased.tick(), timeout=5, interval=0.05, what="b taking the adapter over")
        _reply(b.store, "from b")
        fake.wait_for(lambda: [m["text"] for m in fake.sent(TOKEN)] == ["from a", "from b"])
        assert b.entry.dispatcher.held() == {"adapter:telegram:main"}
        poll_until(lambda: b.store.outbox.backlog() == 0, what="both replies marked sent")
    finally:
        a.close()
        b.close()


def test_a_batch_and_its_cursor_commit_together_after_the_check_and_poke_each_new_shard_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    pokes: list[int] = []
    refuse = [False]

    def check() -> None:
        if refuse[0]:
            raise RoleLostError("lost")

    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        ingress = ClusterIngress(store, shards=SHARDS, poke=pokes.append)
        batch = [inbound(f"m-{n}", str(n)) for n in range(3)]  # one chat: one routing key, one shard
        ids = ingress.accept_batch(
            batch, cursor=PollCursor(platform=PLATFORM, cursor="7", account_id="main"), check=check
        )
        assert None not in ids
        assert len(pokes) == 1  # after the commit, once for its shard
        assert ingress.accept_batch(batch, cursor=None, check=check) == [None, None, None]  # a redelivery: nothing
        assert len(pokes) == 1
        refuse[0] = True
        with pytest.raises(RoleLostError):
            ingress.accept_batch([inbound("m-9", "9")], cursor=PollCursor(platform=PLATFORM, cursor="8"), check=check)
        inbox = ClusterInbox(ingress, MediaStore(tmp_path / "media"))
        guarded = inbox.guarded(check)
        with pytest.raises(RoleLostError):  # a cursor of its own (WeChat's context tokens, Email's threads)
            guarded.accept_many([], cursor=PollCursor(platform=f"{PLATFORM}:extra", cursor="x"))
        with pytest.raises(RoleLostError):  # a single message too
            guarded.accept(inbound("m-9", "9"))
        assert ingress.poll_cursor(PLATFORM, "main") == "7"
        assert ingress.poll_cursor(PLATFORM, "") is None
        assert len(_inbox_ids(store)) == 3
        assert len(pokes) == 1
        assert inbox.accept(inbound("m-9", "9")).inbox_id is not None  # the unguarded inbox (push adapters)
        inbox.close()


def _reply_as(store: PostgresStore, bot: str, text: str) -> int:
    reply = OutboundMessage(platform=PLATFORM, account_id=bot, chat_id="5001", text=text)
    return store.outbox.add(
        session_id=None, platform=PLATFORM, account_id=bot, chat_id="5001", thread_id=None, payload=encode(reply)
    )


def _ready(replica: Replica) -> dict[str, str]:
    return {p.name: p.state for p in replica.inbox.readiness().platforms}


def _bots_built(replica: Replica) -> list[set[str]]:
    return [set(adapter.config.bots) for adapter in replica.built if isinstance(adapter, TelegramAdapter)]


def test_two_bots_of_one_section_run_in_two_replicas_each_polling_and_answering_for_its_own_bot(
    fake: TelegramFake, postgres_dsn: str, tmp_path: Path
) -> None:
    fake.add_bot(OTHER_TOKEN)
    bots = {"main": TelegramBot(token=TOKEN), "second": TelegramBot(token=OTHER_TOKEN)}
    config = make_config(fake, bots, poll_timeout_s=1)
    a = Replica("replica-a", postgres_dsn, config, tmp_path / "a")
    b = Replica("replica-b", postgres_dsn, config, tmp_path / "b")
    a.entry.start(heartbeats=False)
    b.entry.start(heartbeats=False)
    try:
        assert set(a.entry.leased) == {(PLATFORM, "main"), (PLATFORM, "second")}  # one lease per bot, not per section
        assert a.bot("main").tick()
        assert not b.bot("main").tick()
        assert b.bot("second").tick()  # the section's other bot goes to the other replica
        assert not a.bot("second").tick()
        assert _bots_built(a) == [{"main"}]
        assert _bots_built(b) == [{"second"}]
        assert _ready(a) == {"telegram:main": "running"}  # each replica's health names the bots it runs
        assert _ready(b) == {"telegram:second": "running"}
        _push(fake, ["to main"])
        fake.push(OTHER_TOKEN, message(private_chat(ALICE), ALICE, "to second"))
        poll_until(lambda: len(_inbox_ids(a.store)) == 2, interval=0.05, what="both bots' updates in the inbox")
        rows = a.store.database.execute("SELECT account_id FROM inbox WHERE platform = %s ORDER BY id", (PLATFORM,))
        assert sorted(str(row[0]) for row in rows) == ["main", "second"]
        assert a.store.kv.get_cursor(PLATFORM, "main") is not None
        assert a.store.kv.get_cursor(PLATFORM, "second") is not None

        _reply_as(a.store, "main", "from main")
        _reply_as(a.store, "second", "from second")
        fake.wait_for(lambda: [m["text"] for m in fake.sent(TOKEN)] == ["from main"])
        fake.wait_for(lambda: [m["text"] for m in fake.sent(OTHER_TOKEN)] == ["from second"])
        assert a.entry.dispatcher.held() == {"adapter:telegram:main"}  # each bot's replies leave its own replica
        assert b.entry.dispatcher.held() == {"adapter:telegram:second"}
        poll_until(lambda: a.store.outbox.backlog() == 0, what="both replies marked sent")
        sent_by = a.store.database.execute(
            "SELECT account_id, claimed_by IS NULL FROM outbox WHERE sent_at IS NOT NULL ORDER BY id"
        )
        assert [(str(row[0]), row[1]) for row in sent_by] == [("main", True), ("second", True)]

        a.entry.stop()  # a shuts down: main's role is released and b takes that bot too
        poll_until(lambda: b.bot("main").tick(), timeout=5, interval=0.05, what="b taking main over")
        assert _bots_built(b) == [{"second"}, {"main"}]
        assert _ready(b) == {"telegram:main": "running", "telegram:second": "running"}
        _reply_as(b.store, "main", "main from b")
        fake.wait_for(lambda: [m["text"] for m in fake.sent(TOKEN)] == ["from main", "main from b"])
        assert b.entry.dispatcher.held() == {"adapter:telegram:main", "adapter:telegram:second"}
    finally:
        a.close()
        b.close()


def test_a_webhook_bot_is_served_by_every_replica_while_the_polling_bot_of_its_section_is_leased(
    fake: TelegramFake, postgres_dsn: str, tmp_path: Path
) -> None:
    fake.add_bot(OTHER_TOKEN)
    config = webhook_config(fake, poll_timeout_s=1)  # "hook" is called by Telegram, "poller" polls
    a = Replica("replica-a", postgres_dsn, config, tmp_path / "a")
    b = Replica("replica-b", postgres_dsn, config, tmp_path / "b")
    a.entry.start(heartbeats=False)
    b.entry.start(heartbeats=False)
    try:
        assert set(a.entry.leased) == {(PLATFORM, "poller")}
        assert a.bot("poller").tick()
        assert not b.bot("poller").tick()
        assert _bots_built(a) == [{"hook"}, {"poller"}]
        assert _bots_built(b) == [{"hook"}]  # b serves the webhook bot and runs no poller
        served = [next(x for x in r.entry.push if isinstance(x, TelegramAdapter)) for r in (a, b)]
        assert post_update(served[0].url + "/telegram/hook", an_update(10, "via a"), SECRET)[0] == 200
        assert post_update(served[1].url + "/telegram/hook", an_update(11, "via b", 2), SECRET)[0] == 200
        fake.push(OTHER_TOKEN, message(private_chat(ALICE), ALICE, "polled"))
        poll_until(lambda: len(_inbox_ids(a.store)) == 3, interval=0.05, what="the three updates in the inbox")
        rows = a.store.database.execute("SELECT account_id FROM inbox WHERE platform = %s ORDER BY id", (PLATFORM,))
        assert sorted(str(row[0]) for row in rows) == ["hook", "hook", "poller"]

        _reply_as(a.store, "hook", "hook reply")
        _reply_as(a.store, "poller", "poller reply")
        fake.wait_for(lambda: [m["text"] for m in fake.sent(TOKEN)] == ["hook reply"])
        fake.wait_for(lambda: [m["text"] for m in fake.sent(OTHER_TOKEN)] == ["poller reply"])
        held = [r.entry.dispatcher.held() for r in (a, b)]
        assert "adapter:telegram:poller" in held[0]
        assert [("send:telegram" in roles) for roles in held].count(True) == 1  # the webhook bot's replies: one
    finally:
        a.close()
        b.close()
