"""A route cached in one host's supervisor must not outlive a change another host made to it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.routing import build_session_key
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import home_shards, shard_of
from hermes_actors.testing import FakePlatform, poll_until

SHARDS = 8
HOSTS = ("h0", "h1")

pytestmark = pytest.mark.slow  # runs two hosts for a few seconds


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


@contextlib.contextmanager
def _two_hosts(dsn: str, ttl_s: float) -> Iterator[list[HostRuntime]]:
    """h0 and h1 started, each holding its home shards; stopped when the block ends."""
    hosts = [
        HostRuntime(HostSettings(name=n, postgres_dsn=dsn, hosts=HOSTS, shards=SHARDS, lease_ttl_s=ttl_s, grace_s=0.3))
        for n in HOSTS
    ]
    try:
        for host in hosts:
            host.start()
        homes = [home_shards(name, HOSTS, SHARDS) for name in HOSTS]
        poll_until(
            lambda: all(set(h.fence.held()) == home for h, home in zip(hosts, homes, strict=True)),
            what="each host holding its home shards",
        )
        yield hosts
    finally:
        for host in hosts:
            host.stop()


def _chat_homed_on(platform: FakePlatform, host: str) -> str:
    """A chat whose routing key's shard (so its first session's) is ``host``'s home."""
    home = home_shards(host, HOSTS, SHARDS)
    for n in range(1000):
        key = build_session_key(platform.message("x", chat_id=f"chat-{n}", user_id="u").source)
        if shard_of(key, SHARDS) in home:
            return f"chat-{n}"
    raise AssertionError(f"no chat homed on {host}")


def _answered(pg: PostgresStore) -> bool:
    return bool(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'") == 0)


def _session_of(pg: PostgresStore, text: str) -> str:
    return str(
        pg.database.value(
            "SELECT s.id FROM messages m JOIN sessions s ON s.ref = m.session_ref WHERE m.role = 'user' "
            "AND m.content = %s",
            (text,),
        )
    )


def test_a_shard_back_from_another_host_brings_no_route_its_supervisor_cached_before(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    """h0 runs chat A's session S1 and caches A's route. h0's renewals stall, h1 takes h0's shards and runs A's
    ``/new`` (S1 ends, A's next message starts S2 in the same shard). h0 renews again and gets its shards back:
    A's next message must go to S2, not to the S1 h0's supervisor still has cached."""
    with _two_hosts(postgres_dsn, 2.0) as hosts:
        platform = FakePlatform("fake")
        ingress = ClusterIngress(pg, shards=SHARDS)
        chat = _chat_homed_on(platform, "h0")

        def say(text: str) -> None:
            ingress.accept(platform.message(text, chat_id=chat, user_id="u"))
            poll_until(lambda: _answered(pg), timeout=20, what=f"{text!r} answered")

        say("first")
        first = _session_of(pg, "first")
        shard = shard_of(first, SHARDS)
        hosts[0].keeper.stall_renewals = True
        poll_until(lambda: shard in hosts[1].fence.held(), timeout=20, what="h1 taking h0's shards")
        say("/new")
        say("second")
        second = _session_of(pg, "second")
        assert second != first
        assert shard_of(second, SHARDS) == shard
        hosts[0].keeper.stall_renewals = False
        poll_until(lambda: shard in hosts[0].fence.held(), timeout=20, what="h0 taking its shards back")
        say("third")
        assert _session_of(pg, "third") == second
        assert not pg.get_session(first).is_live


def test_a_resume_to_a_session_in_another_hosts_shard_runs_once(postgres_dsn: str, pg: PostgresStore) -> None:
    """Chat A's session lives in h0's shard, chat B's in h1's. A's ``/resume <B's session>`` runs in h0 (the row
    is in A's shard) and re-points A's key there: it is answered once and completed by h0, although the session it
    names lives in a shard h0 does not hold."""
    with _two_hosts(postgres_dsn, 3.0):
        platform = FakePlatform("fake")
        ingress = ClusterIngress(pg, shards=SHARDS)
        chat_a, chat_b = _chat_homed_on(platform, "h0"), _chat_homed_on(platform, "h1")

        def say(text: str, chat: str) -> str:
            message = platform.message(text, chat_id=chat, user_id="u")
            ingress.accept(message)
            poll_until(lambda: _answered(pg), timeout=20, what=f"{text!r} answered")
            return message.message_id

        say("in a", chat_a)
        say("in b", chat_b)
        target = _session_of(pg, "in b")
        assert shard_of(target, SHARDS) in home_shards("h1", HOSTS, SHARDS)
        resume = say(f"/resume {target}", chat_a)
        time.sleep(2.5)  # a refused completion would have moved the row to h1's shard and run it there again
        rows = pg.database.execute(
            "SELECT state, shard, (SELECT count(*) FROM outbox o WHERE o.created_at >= i.received_at "
            "AND o.chat_id = %s) FROM inbox i WHERE platform_message_id = %s",
            (chat_a, resume),
        )
        assert [(state, shard_of_row) for state, shard_of_row, _ in rows] == [
            ("done", shard_of(build_session_key(platform.message("x", chat_id=chat_a, user_id="u").source), SHARDS))
        ]
        (replies,) = {int(count) for _, _, count in rows}
        assert replies == 1, "the /resume was answered more than once"
        say("after resume", chat_a)
        assert _session_of(pg, "after resume") == target
