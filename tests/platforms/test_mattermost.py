"""The Mattermost platform against a real gateway and a local fake of Mattermost (tests/platforms/mattermost_fake.py).

Users post through the fake, which broadcasts ``posted`` events over the adapter's real websocket; replies are read
back from the posts the fake's REST API created. Missed events (drops, restarts, lost ``seq`` numbers, kills) are
provoked on the fake and must be caught up over REST, answered once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_actors.errors import ConfigError, StoreError
from hermes_actors.media import MediaConfig
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.ports import Inbox
from hermes_actors.store.attachments import AttachmentRecord
from hermes_actors.testing import poll_until
from platforms import registry
from platforms.base import ConnectionReporter, SendError, ThreadCreator
from platforms.mattermost import (
    MattermostAdapter,
    MattermostBot,
    MattermostConfig,
    MattermostSender,
    Post,
    ReadState,
    RestClient,
    Skipped,
    Where,
    WireError,
    decode_envelope,
    decode_post,
    inbound_from_post,
    pending_post_id,
    retry_after,
)
from platforms.mattermost.wire import Posted, decode
from tests.platforms.crash import AdapterWorker, wait_for_inbox
from tests.platforms.mattermost_fake import MattermostFake, new_id
from tests.platforms.support import RunningAdapter, StartGateway, inbound_messages, wait_problem

TOKEN = "xh7ys8bq4jgdmkqy1o9wcpd3ta"
OTHER_TOKEN = "p3kc5dn8ueyw1rbq7tgzhx4m6a"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(100))


@dataclass
class World:
    """The fake with the bot ``hermes`` (``TOKEN``), users alice and bob and another bot, in one team."""

    fake: MattermostFake
    bot: str
    alice: str
    bob: str
    robot: str
    team: str
    town: str  # a public channel of the team


@pytest.fixture
def world() -> Iterator[World]:
    with MattermostFake() as fake:
        bot = fake.add_user("hermes", token=TOKEN, bot=True)
        alice, bob = fake.add_user("alice"), fake.add_user("bob")
        robot = fake.add_user("robot", bot=True)
        team = fake.add_team([bot, alice, bob, robot])
        town = fake.add_channel("O", [bot, alice, bob, robot], team_id=team, name="Town Square")
        yield World(fake, bot, alice, bob, robot, team, town)


def make_config(fake: MattermostFake, bots: dict[str, MattermostBot] | None = None, **options: Any) -> MattermostConfig:
    settings: dict[str, Any] = {
        "url": fake.url,
        "bots": bots if bots is not None else {"main": MattermostBot(token=TOKEN)},
        "request_timeout_s": 5.0,
        "reconnect_min_s": 0.05,
        "reconnect_max_s": 0.2,
        "hello_timeout_s": 5.0,
        "requests_per_second": 1000.0,
    }
    return MattermostConfig(**(settings | options))


@dataclass(frozen=True)
class Running(RunningAdapter[MattermostAdapter]):
    def inbox(self) -> list[str]:
        return [message_id for (message_id,) in self.inbox_rows("platform_message_id")]

    def read_state(self, bot: str = "main") -> ReadState | None:
        with self.gateway.read() as store:
            cursor = store.kv.get_cursor("mattermost", bot)
        return None if cursor is None else msgspec.json.decode(cursor, type=ReadState)

    def attachments(self, key: str) -> list[AttachmentRecord]:
        session = self.session_of(key)
        assert session is not None, f"no session for {key}"
        with self.gateway.read() as store:
            return store.attachments.for_session(session)


Start = Callable[..., Running]


@pytest.fixture
def start(world: World, start_gateway: StartGateway) -> Start:
    def run(config: MattermostConfig | None = None, *, media: MediaConfig | None = None, **options: Any) -> Running:
        adapter = MattermostAdapter(config or make_config(world.fake), environ={}, rng=random.Random(7))
        gateway = start_gateway(adapter, tick_interval_s=0.1, media=media, **options)
        return Running(adapter, gateway)

    return run


def key(world: World, *parts: str, bot: str = "main") -> str:
    return ":".join([f"agent:main:mattermost.{world.team}~{bot}", "group", *parts])


def texts(posts: list[dict[str, Any]]) -> list[str]:
    return [post["message"] for post in posts]


# -- chats, threads and accounts ---------------------------------------------------------------------------------


def test_a_direct_message_is_answered_in_its_channel_and_keyed_by_it(world: World, start: Start) -> None:
    fake = world.fake
    dm = fake.add_channel("D", [world.bot, world.alice])
    running = start()
    fake.wait_connected(TOKEN)
    post_id = fake.post(dm, world.alice, "hello")
    (reply,) = fake.wait_posts(world.bot, 1)
    assert (reply["channel_id"], reply["message"], reply["root_id"]) == (dm, "echo: hello", "")
    assert len(reply["pending_post_id"]) == 26
    dm_key = f"agent:main:mattermost~main:dm:{dm}"
    assert running.transcript(dm_key) == [("user", "hello"), ("assistant", "echo: hello")]
    assert running.inbox() == [post_id]
    (inbound,) = inbound_messages(running.gateway, "mattermost")
    assert (inbound.source.user_id, inbound.source.user_name, inbound.source.scope_id) == (world.alice, "alice", None)


def test_a_channel_post_is_keyed_by_team_and_member_and_a_thread_reply_stays_in_its_thread(
    world: World, start: Start
) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    root = fake.post(world.town, world.alice, "question")
    fake.post(world.town, world.bob, "another")
    fake.wait_posts(world.bot, 2)
    fake.post(world.town, world.alice, "more on it", root_id=root)
    replies = fake.wait_posts(world.bot, 3)
    # alice's and bob's sessions answer in either order; the thread's reply comes last
    assert sorted((p["message"], p["root_id"]) for p in replies[:2]) == [("echo: another", ""), ("echo: question", "")]
    assert (replies[2]["message"], replies[2]["root_id"]) == ("echo: more on it", root)
    assert running.transcript(key(world, world.town, world.alice)) == [
        ("user", "question"),
        ("assistant", "echo: question"),
    ]
    assert running.session_of(key(world, world.town, world.bob)) is not None
    assert running.transcript(key(world, world.town, root)) == [
        ("user", "more on it"),
        ("assistant", "echo: more on it"),
    ]
    (first, _, threaded) = inbound_messages(running.gateway, "mattermost")
    assert (first.source.chat_name, threaded.source.thread_id) == ("Town Square", root)


def test_a_group_message_is_keyed_by_its_channel_without_a_team(world: World, start: Start) -> None:
    fake = world.fake
    group = fake.add_channel("G", [world.bot, world.alice, world.bob])
    running = start()
    fake.wait_connected(TOKEN)
    fake.post(group, world.bob, "hi all")
    (reply,) = fake.wait_posts(world.bot, 1)
    assert reply["channel_id"] == group
    assert running.transcript(f"agent:main:mattermost~main:group:{group}:{world.bob}")[0] == ("user", "hi all")


def test_own_posts_bots_system_messages_and_mentions_are_handled_as_mattermost_means_them(
    world: World, start: Start
) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    fake.post(world.town, world.robot, "beep")  # another bot (props.from_bot)
    fake.post(world.town, world.alice, "alice joined the channel", type="system_join_channel")
    fake.post(world.town, world.alice, "@hermes what time is it?")
    (reply,) = fake.wait_posts(world.bot, 1)
    assert reply["message"] == "echo: what time is it?"
    # our own reply came back as a posted event and started nothing; the next post is the barrier
    fake.post(world.town, world.alice, "thanks")
    assert texts(fake.wait_posts(world.bot, 2)) == ["echo: what time is it?", "echo: thanks"]
    assert len(running.inbox()) == 2


def test_two_bots_on_one_server_keep_separate_sessions(world: World, start: Start) -> None:
    fake = world.fake
    other = fake.add_user("other", token=OTHER_TOKEN, bot=True)
    channel = fake.add_channel("O", [world.bot, other, world.alice], team_id=world.team, name="both")
    bots = {"main": MattermostBot(token=TOKEN), "second": MattermostBot(token=OTHER_TOKEN)}
    running = start(make_config(fake, bots))
    fake.wait_connected(TOKEN)
    fake.wait_connected(OTHER_TOKEN)
    fake.post(channel, world.alice, "to both")
    fake.wait_posts(world.bot, 1)
    fake.wait_posts(other, 1)
    for bot in ("main", "second"):
        assert running.transcript(key(world, channel, world.alice, bot=bot))[0] == ("user", "to both")
    assert running.adapter.status() == {"main": "connected", "second": "connected"}


def test_a_replayed_posted_event_starts_no_second_turn(world: World, start: Start) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    post_id = fake.post(world.town, world.alice, "only once")
    fake.wait_posts(world.bot, 1)
    fake.rebroadcast(post_id)
    fake.post(world.town, world.alice, "barrier")  # the same chat: its reply leaves after any the replay queued
    fake.wait_posts(world.bot, 2)
    assert texts(fake.posts_by(world.bot)) == ["echo: only once", "echo: barrier"]
    assert len(running.inbox()) == 2


def test_an_event_without_its_team_is_keyed_by_the_team_the_api_names(world: World, start: Start) -> None:
    fake = world.fake
    fake.omit_team_ids = True
    running = start()
    fake.wait_connected(TOKEN)
    fake.post(world.town, world.alice, "which team?")
    fake.post(world.town, world.bob, "same one")
    fake.wait_posts(world.bot, 2)
    assert running.session_of(key(world, world.town, world.alice)) is not None
    assert len(fake.requests(f"GET /channels/{world.town}")) == 1  # asked once, then remembered


# -- missed events -----------------------------------------------------------------------------------------------


def test_posts_made_while_the_adapter_was_stopped_are_caught_up_once_in_order(world: World, start: Start) -> None:
    fake = world.fake
    dm = fake.add_channel("D", [world.bot, world.alice])
    first = start()
    fake.wait_connected(TOKEN)
    fake.post(world.town, world.alice, "before")
    fake.wait_posts(world.bot, 1)
    assert first.read_state() is not None
    first.stop()
    fake.post(world.town, world.alice, "while away 1")
    fake.post(dm, world.alice, "while away 2")  # a channel the bot had never read: found by the overall mark
    fake.post(world.town, world.bob, "while away 3")
    second = start()
    replies = fake.wait_posts(world.bot, 4)
    assert sorted(texts(replies)) == ["echo: before", "echo: while away 1", "echo: while away 2", "echo: while away 3"]
    # accepted in the order they were posted (the replies of three sessions may leave in any order)
    assert [m.text for m in inbound_messages(second.gateway, "mattermost")] == [
        "before",
        "while away 1",
        "while away 2",
        "while away 3",
    ]
    fake.post(world.town, world.alice, "live again")  # the barrier: nothing was answered twice
    assert texts(fake.wait_posts(world.bot, 5))[-1] == "echo: live again"
    assert len(fake.posts_by(world.bot)) == 5
    assert len(second.inbox()) == 5
    state = second.read_state()
    assert state is not None
    assert set(state.channels) == {world.town, dm}


def test_a_catch_up_that_fails_halfway_runs_again_on_the_next_connection(world: World, start: Start) -> None:
    fake = world.fake
    first = start()
    fake.wait_connected(TOKEN)
    fake.post(world.town, world.alice, "seen")
    fake.wait_posts(world.bot, 1)
    first.stop()
    fake.post(world.town, world.alice, "missed")
    fake.fail("GET /channels/{channel_id}/posts", 502)
    start()
    assert texts(fake.wait_posts(world.bot, 2)) == ["echo: seen", "echo: missed"]
    assert fake.connects[TOKEN] == 3  # the second connection's catch-up failed; the third one's read the post
    assert [r.status for r in fake.requests(f"GET /channels/{world.town}/posts")] == [502, 200]


def test_a_dropped_connection_is_a_connection_problem_until_it_is_back_and_catches_up_what_was_posted(
    world: World, start: Start
) -> None:
    fake = world.fake
    running = start()
    assert isinstance(running.adapter, ConnectionReporter)
    fake.wait_connected(TOKEN)
    assert running.adapter.connection_problem() is None
    fake.refuse_sockets = True
    fake.drop(TOKEN)
    fake.post(world.town, world.alice, "into the void")
    fake.wait_for(lambda: len(fake.requests("GET /users/me")) >= 2)  # it tried again, and was refused
    problem = wait_problem(running.adapter, "503")
    assert problem.startswith("bot 'main': reconnecting (the connection failed (503")
    fake.refuse_sockets = False
    fake.wait_connected(TOKEN, 2)
    assert texts(fake.wait_posts(world.bot, 1)) == ["echo: into the void"]
    poll_until(lambda: running.adapter.connection_problem() is None, what="the new connection to clear the problem")


def test_a_gap_in_seq_is_closed_by_catching_up(world: World, start: Start) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    fake.lose_next_event(TOKEN)
    fake.post(world.town, world.alice, "lost on the way")
    fake.post(world.town, world.alice, "arrived")
    replies = fake.wait_posts(world.bot, 2)
    assert texts(replies) == ["echo: lost on the way", "echo: arrived"]
    assert len(running.inbox()) == 2


class FailingFirstPost:
    """An inbox whose first commit of a post fails, as if the disk were full for a moment."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self.failed = 0

    def accept_many(self, batch: list[InboundMessage], **options: Any) -> Any:
        if batch and not self.failed:
            self.failed += 1
            raise StoreError("disk full (simulated)")
        return self._inbox.accept_many(batch, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inbox, name)


def test_a_post_that_could_not_be_stored_is_caught_up_after_a_reconnect(
    world: World, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake = world.fake
    running = start(inbox_for=lambda inbox: cast(Inbox, FailingFirstPost(inbox)))
    fake.wait_connected(TOKEN)
    post_id = fake.post(world.town, world.alice, "survive")
    assert texts(fake.wait_posts(world.bot, 1)) == ["echo: survive"]
    assert fake.connects[TOKEN] == 2  # the read position did not pass the post: the next connection caught it up
    assert running.inbox() == [post_id]
    assert f"mattermost bot 'main': could not store post {post_id}" in caplog.text


def test_the_read_position_is_committed_with_the_post_it_covers(world: World, start: Start) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    fresh = poll_until(running.read_state, 10, what="the first read position")
    assert fresh.channels == {}  # the first connection stores where it began
    post_id = fake.post(world.town, world.alice, "mark me")
    fake.wait_posts(world.bot, 1)
    state = running.read_state()
    assert state is not None
    assert running.inbox() == [post_id]
    created = next(p for p in fake.posts_by(world.alice) if p["id"] == post_id)["create_at"]
    assert state.channels[world.town] == created
    assert state.since >= created


# -- replies -----------------------------------------------------------------------------------------------------


def sender_for(world: World, **options: Any) -> tuple[MattermostSender, RestClient]:
    rest = RestClient("main", TOKEN, world.fake.url + "/api/v4", requests_per_second=1000.0, **options)
    return MattermostSender({"main": rest}, max_message_chars=options.pop("limit", 100)), rest


def reply(world: World, text: str, *, outbox_id: int = 1, thread_id: str | None = None) -> OutboundMessage:
    return OutboundMessage(
        platform="mattermost",
        text=text,
        account_id="main",
        chat_id=world.town,
        thread_id=thread_id,
        outbox_id=outbox_id,
    )


def test_a_long_reply_is_split_and_a_retry_resumes_after_the_parts_posted(world: World) -> None:
    sender, _ = sender_for(world)
    text = " ".join(f"word{i}" for i in range(60))  # about 400 characters: five parts of at most 100
    world.fake.fail("POST /posts", 500, after=2)
    with pytest.raises(SendError) as failed:
        sender.send(reply(world, text))
    assert not failed.value.permanent
    assert len(world.fake.posts_by(world.bot)) == 2
    sender.send(reply(world, text))
    posted = texts(world.fake.posts_by(world.bot))
    assert all(len(part) <= 100 for part in posted)
    assert " ".join(posted) == text


def test_a_lost_answer_is_retried_without_a_second_post(world: World) -> None:
    sender, _ = sender_for(world)
    world.fake.fail("POST /posts", 201, lose_answer=True)
    with pytest.raises(SendError) as failed:
        sender.send(reply(world, "once only"))
    assert failed.value.outcome_unknown
    first = sender.send(reply(world, "once only"))
    assert [p["id"] for p in world.fake.posts_by(world.bot)] == [first]


def test_rate_limits_and_refusals_become_the_right_send_errors(world: World) -> None:
    sender, _ = sender_for(world)
    world.fake.fail("POST /posts", 429, headers={"Retry-After": "7"})
    with pytest.raises(SendError) as limited:
        sender.send(reply(world, "slow"))
    assert (limited.value.retry_after_s, limited.value.permanent) == (7.0, False)
    with pytest.raises(SendError) as held:  # the bot stays quiet until then, without asking again
        sender.send(reply(world, "slow"))
    assert held.value.retry_after_s is not None
    assert 6.0 < held.value.retry_after_s <= 7.0
    assert len(world.fake.requests("POST /posts")) == 1
    sender, _ = sender_for(world)
    world.fake.fail("POST /posts", 429, headers={"X-Ratelimit-Reset": "3", "X-Ratelimit-Remaining": "0"})
    with pytest.raises(SendError) as reset:
        sender.send(reply(world, "slower", outbox_id=2))
    assert reset.value.retry_after_s == 3.0
    sender, _ = sender_for(world)
    for status in (400, 403, 404):
        world.fake.fail("POST /posts", status)
        with pytest.raises(SendError) as refused:
            sender.send(reply(world, "no", outbox_id=10 + status))
        assert refused.value.permanent
        assert f"HTTP {status}" in str(refused.value)
    with pytest.raises(SendError) as unknown_bot:
        sender.send(msgspec.structs.replace(reply(world, "who"), account_id="nobody"))
    assert unknown_bot.value.permanent
    assert world.fake.posts_by(world.bot) == []


def test_retry_after_reads_retry_after_then_the_reset_header() -> None:
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"x-ratelimit-reset": "4"}) == 4.0
    assert retry_after({"x-ratelimit-reset": "1764460810"}, now=1764460800.0) == 10.0
    assert retry_after({"x-ratelimit-reset": "nan"}) == 1.0
    assert retry_after({}) == 1.0


def test_a_handoff_thread_is_a_root_post_and_replies_go_under_it(world: World) -> None:
    sender, _ = sender_for(world)
    assert isinstance(sender, ThreadCreator)
    root = sender.create_thread(world.town, "Handoff: the plan", account_id="main")
    sender.send(reply(world, "in the thread", thread_id=root))
    posts = world.fake.posts_by(world.bot)
    assert [(p["message"], p["root_id"]) for p in posts] == [("Handoff: the plan", ""), ("in the thread", root)]


def test_pending_post_ids_are_stable_per_part_and_shaped_like_ids() -> None:
    first = pending_post_id("abc", 0)
    assert first == pending_post_id("abc", 0) != pending_post_id("abc", 1)
    assert len(first) == 26
    assert first.isalnum()
    assert first.lower() == first


# -- files -------------------------------------------------------------------------------------------------------


def test_files_are_downloaded_into_the_media_store_and_a_large_one_is_refused(
    world: World, start: Start, tmp_path: Path
) -> None:
    fake = world.fake
    running = start(media=MediaConfig(max_bytes=1000))
    fake.wait_connected(TOKEN)
    png = fake.add_file(PNG, "plot.png", "image/png")
    big = fake.add_file(b"x" * 10, "huge.pdf", "application/pdf", size=5000)
    fake.post(world.town, world.alice, "look", file_ids=[png, big])
    plain = fake.add_file(b"plain text", "notes.txt", "text/plain")
    fake.post(world.town, world.alice, "", file_ids=[plain], with_file_metadata=False)
    fake.wait_posts(world.bot, 2)
    first, second = inbound_messages(running.gateway, "mattermost")
    assert first.text == "look\n[image: plot.png]\n[file: huge.pdf]"
    saved, refused = first.attachments
    digest = hashlib.sha256(PNG).hexdigest()
    assert (saved.kind, saved.mime_type, saved.name, saved.sha256, saved.error) == (
        "image",
        "image/png",
        "plot.png",
        digest,
        None,
    )
    assert saved.path is not None
    assert Path(saved.path).read_bytes() == PNG
    assert refused.error is not None
    assert "over the" in refused.error
    assert second.text == "[file]"
    (text_file,) = second.attachments
    assert (text_file.name, text_file.error) == ("notes.txt", None)
    downloads = fake.requests("GET /files/")
    assert [r.path.split("/")[2] for r in downloads if not r.path.endswith("/info")] == [png, plain]
    assert all(r.token == TOKEN for r in downloads)


# -- hostile input -----------------------------------------------------------------------------------------------


BAD_FRAMES = [
    "not json",
    "[" * 200 + "]" * 200,
    json.dumps({"event": "posted", "data": {"post": "not json"}, "seq": 1}),
    json.dumps({"event": "posted", "data": {"post": json.dumps({"id": "short"})}, "seq": 2}),
    json.dumps({"event": "posted", "data": {"post": 17}, "seq": 3}),
    json.dumps({"event": "posted", "data": None, "seq": 4}),
    json.dumps({"event": 5, "seq": "x"}),
    json.dumps([1, 2, 3]),
]


def test_malformed_frames_are_logged_and_the_connection_keeps_working(
    world: World, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    with caplog.at_level(logging.WARNING, logger="platforms.mattermost"):
        for frame in BAD_FRAMES:
            fake.send_raw(TOKEN, frame)
        fake.send_raw(TOKEN, b"\x00\x01binary")
        fake.post(world.town, world.alice, "still there?")
        assert texts(fake.wait_posts(world.bot, 1)) == ["echo: still there?"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("ignored a websocket message" in line for line in warnings)
    assert any("skipped a posted event" in line and "data.post" in line for line in warnings)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert running.adapter.status() == {"main": "connected"}


_posted_data = st.fixed_dictionaries(
    {
        "post": st.one_of(
            st.text(max_size=80), st.builds(json.dumps, st.dictionaries(st.text(max_size=8), st.text(max_size=30)))
        )
    },
    optional={"channel_type": st.text(max_size=3), "team_id": st.text(max_size=30), "sender_name": st.integers()},
)


@settings(max_examples=200, deadline=None)
@given(
    frame=st.one_of(
        st.text(max_size=200),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
        _posted_data.map(lambda data: json.dumps({"event": "posted", "data": data, "seq": 1})),
    )
)
def test_decoding_any_frame_raises_nothing_but_a_wire_error(frame: str) -> None:
    try:
        envelope = decode_envelope(frame)
        posted = decode(envelope.data, Posted, "a posted event's data")
        post = decode_post(posted.post)
    except WireError as exc:
        problem = str(exc)
    else:
        assert len(post.id) == 26  # only a post of the right shape gets through
        return
    assert " is malformed: " in problem or " is not valid JSON: " in problem  # it says what is wrong, and where


def post_of(**fields: Any) -> Post:
    base = {"id": new_id(), "channel_id": new_id(), "user_id": new_id(), "create_at": 1_700_000_000_000}
    return msgspec.convert(base | fields, Post)


def test_posts_that_start_no_turn_say_why() -> None:
    me = new_id()
    where = Where(channel_type="O", team_id=new_id())
    cases = {
        "our own post": post_of(user_id=me, message="x"),
        "a post of a bot, webhook or plugin": post_of(message="x", props={"from_webhook": "true"}),
        "a system message (system_header_change)": post_of(message="x", type="system_header_change"),
        "a post without text or files": post_of(message="  "),
        "a deleted post": post_of(message="x", delete_at=5),
    }
    for reason, post in cases.items():
        outcome = inbound_from_post(post, "main", own_user_id=me, own_username="hermes", where=where)
        assert outcome == Skipped(reason=reason, quiet=outcome.quiet if isinstance(outcome, Skipped) else False)
    teamless = inbound_from_post(
        post_of(message="x"), "main", own_user_id=me, own_username="hermes", where=Where(channel_type="P")
    )
    assert isinstance(teamless, Skipped)
    assert "team is not known" in teamless.reason


# -- configuration and lifecycle ---------------------------------------------------------------------------------


def test_a_refused_token_stops_the_bot_with_the_fix_in_the_log(
    world: World, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(world.fake, {"main": MattermostBot(token="wrongtoken0000000000000000")})
    with caplog.at_level(logging.ERROR, logger="platforms.mattermost"):
        running = start(config)
        poll_until(lambda: running.adapter.status()["main"].startswith("stopped"), 10, what="the bot to stop")
    assert "create a new access token" in running.adapter.status()["main"]
    problem = running.adapter.connection_problem()
    assert problem is not None
    assert problem.startswith("bot 'main': stopped: ")
    assert problem.endswith("the token was refused; create a new access token for the bot")
    assert any("not reconnecting" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("fields", "path", "words"),
    [
        ({"bots": {"main": {"token": TOKEN}}}, "platforms.mattermost.url", "http(s) URL"),
        ({"url": "ftp://chat"}, "platforms.mattermost.url", "http(s) URL"),
        ({"url": "https://chat.example.com", "bots": {"main": {}}}, "platforms.mattermost.bots.main.token", "required"),
        (
            {"url": "https://c.example", "bots": {"main": {"token": "Bearer x"}}},
            "platforms.mattermost.bots.main.token",
            "bare token",
        ),
        (
            {"url": "https://c.example", "bots": {"main": {"token_env": "1X"}}},
            "platforms.mattermost.bots.main.token_env",
            "variable name",
        ),
        ({"url": "https://c.example", "bots": {"a b": {"token": TOKEN}}}, "platforms.mattermost.bots.a b", "bot name"),
        ({"url": "https://c.example", "max_message_chars": 99999}, "platforms.mattermost.max_message_chars", "16383"),
        ({"url": "https://c.example", "reconnect_min_s": 0}, "platforms.mattermost.reconnect_min_s", "positive"),
    ],
)
def test_config_errors_name_the_field(fields: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        msgspec.convert(fields, MattermostConfig)
    assert caught.value.path == path
    assert words in str(caught.value)


def test_a_token_env_is_read_when_the_adapter_is_built(world: World) -> None:
    config = make_config(world.fake, {"main": MattermostBot(token_env="MM_TOKEN")})
    with pytest.raises(ConfigError) as caught:
        MattermostAdapter(config, environ={})
    assert caught.value.path == "platforms.mattermost.bots.main.token_env"
    assert "MM_TOKEN is not set" in str(caught.value)
    adapter = MattermostAdapter(config, environ={"MM_TOKEN": TOKEN})
    (line,) = adapter.describe()
    assert "token from $MM_TOKEN" in line
    assert "/api/v4/websocket" in line


def test_the_registry_builds_the_adapter_from_its_section(world: World) -> None:
    config = msgspec.convert(
        {"url": world.fake.url, "bots": {"main": {"token": TOKEN}}}, registry.config_type("mattermost")
    )
    adapter = registry.build("mattermost", config, {})
    assert isinstance(adapter, MattermostAdapter)
    assert adapter.capabilities.threads


# -- crashes -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(world: World, tmp_path: Path) -> None:
    fake = world.fake
    db = tmp_path / "state.db"
    config = make_config(fake)
    worker = AdapterWorker.start(db, "mattermost", config, agent="hold")
    try:
        fake.wait_connected(TOKEN)
        post_id = fake.post(world.town, world.alice, "survive")
        assert wait_for_inbox(db, 1) == [(post_id, "pending")]
    finally:
        worker.kill()
    assert fake.posts_by(world.bot) == []
    worker = AdapterWorker.start(db, "mattermost", config, agent="echo")
    try:
        fake.wait_posts(world.bot, 1, timeout=20)
        # The catch-up fetched the post again (a duplicate); a later post of the same chat is the barrier.
        fake.wait_connected(TOKEN, 2)
        fake.post(world.town, world.alice, "after")
        fake.wait_posts(world.bot, 2, timeout=20)
    finally:
        worker.stop()
    assert texts(fake.posts_by(world.bot)) == ["echo: survive", "echo: after"]
    assert [state for _, state in wait_for_inbox(db, 2)] == ["done", "done"]


# -- /save -------------------------------------------------------------------------------------------------------


def test_save_uploads_the_markdown_and_makes_one_post_with_it(world: World, start: Start) -> None:
    fake = world.fake
    dm = fake.add_channel("D", [world.bot, world.alice])
    running = start()
    fake.wait_connected(TOKEN)
    fake.post(dm, world.alice, "hello")
    fake.wait_posts(world.bot, 1)
    fake.post(dm, world.alice, "/save")
    _, saved = fake.wait_posts(world.bot, 2)
    assert running.gateway.wait_idle()
    (file_id,) = saved["file_ids"]
    info, data = fake.uploaded(file_id)
    assert (info["channel_id"], info["post_id"]) == (dm, saved["id"])
    assert info["name"].endswith(".md")
    assert info["mime_type"] == "text/markdown"
    markdown = data.decode("utf-8")
    assert markdown.index("hello") < markdown.index("echo: hello")
    assert saved["message"].endswith("the conversation as Markdown (2 messages, 1 part(s)).")
    assert len(fake.posts_by(world.bot)) == 2  # the file instead of the text, not beside it


def test_a_lost_answer_to_the_file_post_is_retried_under_its_pending_post_id_and_posts_once(
    world: World, start: Start
) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    fake.post(world.town, world.alice, "hello")
    fake.wait_posts(world.bot, 1)
    fake.fail("POST /posts", 201, lose_answer=True)
    fake.post(world.town, world.alice, "/save")
    fake.wait_for(lambda: len(fake.requests("POST /posts")) >= 3)
    assert running.gateway.wait_idle()
    _, lost, retried = fake.requests("POST /posts")
    assert lost.body["pending_post_id"] == retried.body["pending_post_id"]
    assert [len(post["file_ids"]) for post in fake.posts_by(world.bot)] == [0, 1]
    assert len(fake.requests("POST /files")) == 2  # the retry uploaded again; the channel shows one post


def test_save_sends_the_text_when_file_uploads_are_off(
    world: World, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    fake = world.fake
    running = start()
    fake.wait_connected(TOKEN)
    fake.post(world.town, world.alice, "hello")
    fake.wait_posts(world.bot, 1)
    fake.fail(
        "POST /files", 501, {"id": "api.file.upload_file.storage.app_error", "message": "File storage is disabled"}
    )
    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        fake.post(world.town, world.alice, "/save")
        _, text = fake.wait_posts(world.bot, 2)
        assert running.gateway.wait_idle()
    assert text["file_ids"] == []
    assert text["message"].index("hello") < text["message"].index("echo: hello")
    assert "File storage is disabled" in caplog.text
    assert "the reply's text is sent instead" in caplog.text
