"""The OpenAI-compatible API in cluster mode: the request waits in a replica, its turn runs in a shard host.

A shard host runs in this process (no Ray), an :class:`ApiServer` serves on loopback over a :class:`ClusterInbox`,
and :class:`ApiReplies` brings the host's relayed events and committed reply back to the waiting request, all
through a real PostgreSQL.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import psycopg
import pytest

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentError, AgentMessage, AgentReply, TurnInput
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.api_replies import ApiReplies
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.cluster.replica.operator_access import ClusterSessionAdmin, cluster_operator
from hermes_actors.media import MediaStore
from hermes_actors.messages import OutboundMessage, decode_outbound, encode
from hermes_actors.store import Role
from hermes_actors.store.outbox_queue import Outbox
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.outbox_claims import OutboxClaims
from hermes_actors.store.pg.turn_relay import EVENTS_CHANNEL
from hermes_actors.store.records import OutboxRow
from hermes_actors.testing import poll_until
from hermes_actors.waiters import ReplyWaiters
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig
from platforms.api_server.sessions import COMPLETED_HEADER

pytestmark = pytest.mark.slow  # a shard host, PostgreSQL listeners and an HTTP server for a few seconds

SHARDS = 4
ADMIN = "hk-cluster-operator-key"


class StreamingAgent(EchoAgent):
    """Calls a tool, then answers ``"echo: <text>"`` in three deltas; the second waits until ``release`` is set
    (a test holds it to see the first delta reach the client while the turn still runs)."""

    runs_inline = False  # it waits

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.release.set()
        self.calls = 0
        self.fails = False  # fail after the first six characters, as a model whose stream broke

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.calls += 1
        reply = f"echo: {turn.user_text}"
        if turn.events is not None:
            turn.events.tool("lookup", "call_1", "running", '{"q": 1}')
            turn.events.tool("lookup", "call_1", "completed", "found")
            turn.events.text(reply[:3])
            self.release.wait(10)
            turn.events.text(reply[3:6])
            if self.fails:
                raise AgentError("the model's stream broke off")
            turn.events.text(reply[6:])
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=reply),), text=reply)


def _json(
    url: str, body: dict[str, Any] | None = None, *, method: str | None = None, key: str | None = None
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _commit_reply(pg: PostgresStore, chat_id: str, text: str, answers: str) -> None:
    """A reply committed as a turn would, with nobody waiting for it yet."""
    reply = OutboundMessage(platform="api_server", session_id="x", chat_id=chat_id, text=text, answers=(answers,))
    with pg.transaction():
        pg.outbox.add(
            session_id=None,
            platform="api_server",
            account_id="",
            chat_id=chat_id,
            thread_id=None,
            payload=encode(reply),
        )


@dataclass
class Replica:
    server: ApiServer
    inbox: ClusterInbox
    replies: ApiReplies

    @property
    def waiters(self) -> ReplyWaiters:
        (waiters,) = self.server.senders()
        assert isinstance(waiters, ReplyWaiters)
        return waiters

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.server.url + "/v1", api_key="unused", max_retries=0, timeout=20)

    def stop(self) -> None:
        self.server.stop()
        self.replies.close()
        self.inbox.close()


@dataclass
class Cluster:
    dsn: str
    pg: PostgresStore
    host: HostRuntime
    agent: StreamingAgent
    tmp: Path

    def replica(self, *, poll_s: float = 1.0, mark_every_s: float = 0.5, orphan_after_s: float = 120.0) -> Replica:
        ingress = ClusterIngress(self.pg, shards=SHARDS, poke=lambda shard: self.host.poke())
        operator = cluster_operator(self.pg, ADMIN, ClusterSessionAdmin(self.pg, timeout_s=10))
        inbox = ClusterInbox(ingress, MediaStore(self.tmp / "media"), operator=operator)
        server = ApiServer(ApiServerConfig(port=0))
        (waiters,) = server.senders()
        assert isinstance(waiters, ReplyWaiters)
        answering = ApiReplies(
            self.dsn,
            self.pg,
            waiters,
            inbox.watch,
            poll_s=poll_s,
            mark_every_s=mark_every_s,
            orphan_after_s=orphan_after_s,
        )
        answering.start()
        server.start(inbox)
        return Replica(server, inbox, answering)


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path) -> Iterator[Cluster]:
    agent = StreamingAgent()
    host = HostRuntime(
        HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, pull_interval_s=0.5),
        agent=agent,
    )
    host.start()
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        poll_until(lambda: len(host.fence.held()) == SHARDS, what="the host holding every shard")
        try:
            yield Cluster(postgres_dsn, pg, host, agent, tmp_path)
        finally:
            host.stop()


def test_a_completion_runs_in_the_shard_host_and_answers_the_waiting_request(cluster: Cluster) -> None:
    replica = cluster.replica()
    try:
        raw = replica.client().chat.completions.with_raw_response.create(
            model="hermes-agent", messages=[{"role": "user", "content": "hello"}]
        )
        completion = raw.parse()
        assert completion.choices[0].message.content == "echo: hello"
        session_id = raw.headers[SESSION_HEADER]
        stored = cluster.pg.load_transcript(session_id)
        assert [(m.role, m.content) for m in stored] == [("user", "hello"), ("assistant", "echo: hello")]
        poll_until(lambda: cluster.pg.outbox.backlog() == 0, what="the reply marked sent")
    finally:
        replica.stop()


def test_a_stream_delivers_the_hosts_deltas_while_the_turn_runs(cluster: Cluster) -> None:
    replica = cluster.replica()
    cluster.agent.release.clear()
    try:
        stream = replica.client().chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "streaming"}], stream=True
        )
        pieces: list[str] = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                if len(pieces) == 1:
                    assert pieces == ["ech"]  # the first delta came while the agent still waits: a live stream
                    cluster.agent.release.set()
        assert "".join(pieces) == "echo: streaming"
        assert len(pieces) >= 2  # the rest may come as one: the relay joins the deltas queued together
    finally:
        cluster.agent.release.set()
        replica.stop()


def _relayed_events(dsn: str, during: Callable[[], object]) -> list[str]:
    """The turn events the hosts relayed while ``during`` ran (and half a second after it returned)."""
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute(f"LISTEN {EVENTS_CHANNEL}")
        during()
        return [notice.payload for notice in listener.notifies(timeout=0.5)]


def test_a_completion_without_a_stream_is_relayed_nothing_while_its_turn_runs(cluster: Cluster) -> None:
    replica = cluster.replica()
    try:
        client = replica.client()
        answers: list[str | None] = []

        def complete() -> None:
            completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "quiet"}])
            answers.append(completion.choices[0].message.content)

        assert _relayed_events(cluster.dsn, complete) == []  # the agent streamed (it was watched): nothing was sent
        assert answers == ["echo: quiet"]
        assert cluster.agent.calls == 1

        def stream() -> None:
            chunks = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "loud"}], stream=True
            )
            answers.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))

        streamed = _relayed_events(cluster.dsn, stream)  # the same listener hears a streaming request's events
        assert answers[1] == "echo: loud"
        assert {json.loads(payload)["k"] for payload in streamed} == {"s", "x", "t"}
    finally:
        replica.stop()


def test_a_completion_without_a_stream_whose_agent_fails_answers_with_what_it_had_written(cluster: Cluster) -> None:
    replica = cluster.replica()
    cluster.agent.fails = True
    try:
        raw = replica.client().chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "broken"}]
        )
        assert raw.headers[COMPLETED_HEADER] == "false"
        (choice,) = raw.parse().choices
        assert (choice.message.content, choice.finish_reason) == ("echo: ", "error")  # from the reply, not a relay
        session_id = raw.headers[SESSION_HEADER]
        assert [(m.role, m.content) for m in cluster.pg.load_transcript(session_id)] == [("user", "broken")]
    finally:
        cluster.agent.fails = False
        replica.stop()


def test_a_completion_without_a_stream_whose_turn_another_request_stops_is_told_at_once(cluster: Cluster) -> None:
    replica = cluster.replica()
    cluster.agent.release.clear()
    try:
        client = replica.client()
        named = {SESSION_HEADER: "quietly-stopped"}
        failed: list[openai.APIStatusError] = []

        def wait_for_answer() -> None:
            with pytest.raises(openai.APIStatusError) as raised:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "stop me"}], extra_headers=named
                )
            failed.append(raised.value)

        waiting = threading.Thread(target=wait_for_answer)
        waiting.start()
        poll_until(lambda: cluster.agent.calls == 1, what="the turn running in the host, held by the agent")
        stop = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "/stop"}], extra_headers=named
        )
        assert stop.choices[0].message.content == "Stopped."
        waiting.join(5)  # relayed from the host: told at once, not after the request's timeout
        assert not waiting.is_alive()
        (error,) = failed
        assert error.code == "turn_stopped"
        session_id = error.response.headers[SESSION_HEADER]
        assert f"session {session_id}" in error.message  # the stop came with the session the turn ran in
    finally:
        cluster.agent.release.set()
        replica.stop()


def test_an_idempotent_retry_to_another_replica_is_answered_from_the_store(cluster: Cluster) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "once"}]}
        headers = {"Idempotency-Key": "retry-1"}
        one = first.client().chat.completions.create(**body, extra_headers=headers)  # type: ignore[call-overload]
        two = second.client().chat.completions.create(**body, extra_headers=headers)  # type: ignore[call-overload]
        assert one.choices[0].message.content == two.choices[0].message.content == "echo: once"
        assert cluster.agent.calls == 1
    finally:
        first.stop()
        second.stop()


def test_a_reply_goes_to_the_replica_whose_request_waits_and_an_orphan_is_settled(cluster: Cluster) -> None:
    waiting, other = cluster.replica(), cluster.replica(orphan_after_s=0.5)
    try:
        answer = waiting.client().chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "mine"}]
        )
        assert answer.choices[0].message.content == "echo: mine"
        assert other.waiters.waiting() == 0
        # A reply whose replica died: committed with nobody waiting anywhere; it is marked sent once old enough.
        _commit_reply(cluster.pg, "gone", "late", "gone-1")
        poll_until(lambda: cluster.pg.outbox.backlog() == 0, what="the orphaned reply settled")
    finally:
        waiting.stop()
        other.stop()


def test_readiness_and_metrics_read_the_cluster_store(cluster: Cluster) -> None:
    replica = cluster.replica()
    try:
        readiness = replica.inbox.readiness()
        assert readiness.ready, readiness.reasons()
        assert [p.name for p in readiness.platforms] == []  # this test started the server without the board
        body = replica.inbox.metrics().body.decode()
        assert "hermes_inbox_pending 0.0" in body
        replica.client().chat.completions.create(model="hermes-agent", messages=[{"role": "user", "content": "m"}])
        assert replica.inbox.vitals().inbox_pending == 0
    finally:
        replica.stop()


def test_a_reply_whose_notification_came_before_its_waiter_is_found_by_the_periodic_look(cluster: Cluster) -> None:
    replica = cluster.replica(poll_s=0.2)
    try:
        _commit_reply(cluster.pg, "c", "found", "missed-1")
        time.sleep(0.3)  # its notification came and went: nobody here waited for it then
        future = replica.waiters.expect("missed-1")
        assert future.result(timeout=5).text == "found"  # the look every poll_s found it in the outbox
        poll_until(lambda: not cluster.pg.outbox.unsent("api_server"), what="the reply marked sent")
    finally:
        replica.stop()


def _looks_in_the_outbox(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The platforms of every read of unsent replies from now on (a replica's look in the outbox), as they happen."""
    looks: list[str | None] = []
    unsent = Outbox.unsent

    def looked(outbox: Outbox, platform: str | None = None, *, limit: int = 1000) -> list[OutboxRow]:
        looks.append(platform)
        return unsent(outbox, platform, limit=limit)

    monkeypatch.setattr(Outbox, "unsent", looked)
    return looks


def test_a_reply_its_notification_brings_whole_is_handed_without_reading_the_outbox_and_a_large_one_is_read(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = _looks_in_the_outbox(monkeypatch)
    replica = cluster.replica(poll_s=600.0)  # it looks in the outbox on its first wake-up, then not for 600 s
    try:
        _commit_reply(cluster.pg, "c0", "nobody waits", "prime-1")
        poll_until(lambda: read, what="the replica's first look in the outbox")
        looks = len(read)
        small = replica.waiters.expect("told-1")
        _commit_reply(cluster.pg, "c1", "small", "told-1")
        assert small.result(timeout=5).text == "small"
        assert len(read) == looks  # it came with its notification
        large_text = "L" * 9000  # too large to ride along: the notice names the platform, and the outbox is read
        large = replica.waiters.expect("told-2")
        _commit_reply(cluster.pg, "c2", large_text, "told-2")
        assert large.result(timeout=5).text == large_text
        assert len(read) == looks + 1

        def answered() -> set[str]:
            return {a for row in cluster.pg.outbox.unsent("api_server") for a in decode_outbound(row.payload).answers}

        poll_until(lambda: answered() == {"prime-1"}, what="both replies marked sent")
    finally:
        replica.stop()


def test_replies_handed_by_their_notices_are_marked_sent_together_and_a_stop_writes_the_marks_held(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[list[int]] = []
    sent = OutboxClaims.sent

    def counted(claims: OutboxClaims, dispatcher: str | None, marks: Sequence[tuple[int, str | None]]) -> None:
        if marks:
            writes.append([outbox_id for outbox_id, _ in marks])
        sent(claims, dispatcher, marks)

    monkeypatch.setattr(OutboxClaims, "sent", counted)
    looks = _looks_in_the_outbox(monkeypatch)
    replica = cluster.replica(poll_s=600.0, mark_every_s=5.0)  # one look in the outbox at the start, then none
    try:
        client = replica.client()
        poll_until(lambda: looks, what="the replica's first look in the outbox")
        for n in range(4):
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"n{n}"}])
            assert answer.choices[0].message.content == f"echo: n{n}"  # handed at once: only the mark waits
        assert cluster.pg.outbox.backlog() == 4
        poll_until(lambda: cluster.pg.outbox.backlog() == 0, timeout=20, what="the four replies marked sent")
        assert [len(ids) for ids in writes] == [4]  # one statement for the four
        assert len(looks) == 1  # and no look in the outbox: the notices brought the replies
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "last"}])
    finally:
        replica.stop()
    assert cluster.pg.outbox.backlog() == 0  # the stop wrote the last reply's mark, due seconds later
    assert [len(ids) for ids in writes] == [4, 1]


def test_stored_responses_chain_across_replicas(cluster: Cluster) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        one = first.client().responses.create(model="hermes-agent", input="first question")
        assert one.output_text == "echo: first question"
        two = second.client().responses.create(
            model="hermes-agent", input="second question", previous_response_id=one.id
        )
        assert two.output_text == "echo: second question"
        assert second.client().responses.retrieve(one.id).output_text == "echo: first question"
        (session_id,) = {str(s) for (s,) in cluster.pg.database.execute("SELECT session_id FROM api_responses")}
        assert [m.content for m in cluster.pg.load_transcript(session_id)] == [
            "first question",
            "echo: first question",
            "second question",
            "echo: second question",
        ]
    finally:
        first.stop()
        second.stop()


def test_a_run_is_accepted_and_its_status_is_read_from_the_store_by_another_replica(cluster: Cluster) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        status, accepted = _json(first.server.url + "/v1/runs", {"input": "run me", "model": "hermes-agent"})
        assert status == 202, accepted
        run_id = accepted["run_id"]

        def final() -> dict[str, Any] | None:
            view = _json(f"{second.server.url}/v1/runs/{run_id}")[1]
            return view if view.get("status") == "completed" else None

        view = poll_until(final, what="the run completed, seen from the other replica")
        assert view["output"] == "echo: run me"
    finally:
        first.stop()
        second.stop()


def test_the_hosts_tool_calls_reach_the_stream_as_progress_events(cluster: Cluster) -> None:
    replica = cluster.replica()
    try:
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "tools"}], "stream": True}
        request = urllib.request.Request(
            replica.server.url + "/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "X-Hermes-Tool-Progress": "1"},  # the frames are asked for
        )
        with urllib.request.urlopen(request, timeout=20) as response:
            text = response.read().decode()
        progress = [
            json.loads(block.split("data: ", 1)[1])
            for block in text.split("\n\n")
            if block.startswith("event: hermes.tool.progress")
        ]
        assert [(p["tool"], p["toolCallId"], p["status"]) for p in progress] == [
            ("lookup", "call_1", "running"),
            ("lookup", "call_1", "completed"),
        ]
        assert text.rstrip().endswith("data: [DONE]")
    finally:
        replica.stop()


def test_a_client_that_leaves_mid_stream_stops_its_turn_in_the_host(cluster: Cluster) -> None:
    replica = cluster.replica()
    cluster.agent.release.clear()
    try:
        host, port = replica.server.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=20)
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "long story"}], "stream": True}
        connection.request(
            "POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        line = response.readline()
        while b'"content":"ech"' not in line:
            assert line, "the stream ended before its first words"
            line = response.readline()
        session_id = response.headers[SESSION_HEADER]
        connection.close()  # the client leaves after the first words: the replica sends /stop to the shard

        def stopped() -> bool:  # the turn's row and the /stop's are both handled
            query = "SELECT count(*) FROM inbox WHERE platform = 'api_server' AND state <> 'pending'"
            return int(cluster.pg.database.value(query)) == 2

        def rows() -> str:
            found = cluster.pg.database.execute("SELECT platform_message_id, state, session_id FROM inbox ORDER BY id")
            return f"the /stop was not handled by the host: inbox rows {found}"

        poll_until(stopped, what=rows)
        cluster.agent.release.set()  # the agent returns now; its answer is not stored
        time.sleep(0.5)
        assert [(m.role, m.content) for m in cluster.pg.load_transcript(session_id)] == [("user", "long story")]
    finally:
        cluster.agent.release.set()
        replica.stop()


def test_a_stream_whose_turn_another_request_stops_in_the_host_is_told_at_once(cluster: Cluster) -> None:
    replica = cluster.replica()
    cluster.agent.release.clear()
    try:
        client = replica.client()
        named = {SESSION_HEADER: "stoppable"}  # a conversation name: the new session is not stored before its turn
        stream = client.chat.completions.with_streaming_response.create(
            model="hermes-agent", messages=[{"role": "user", "content": "stop me"}], stream=True, extra_headers=named
        )
        with stream as raw:
            chunks = iter(raw.parse())
            first = next(c for c in chunks if c.choices and c.choices[0].delta.content)
            assert first.choices[0].delta.content == "ech"  # the turn runs in the host, held by the agent
            stop = client.chat.completions.create(
                model="hermes-agent",
                messages=[{"role": "user", "content": "/stop"}],
                extra_headers=named,
            )
            assert stop.choices[0].message.content == "Stopped."
            with pytest.raises(openai.APIError) as stopped:  # relayed from the host: no timeout in between
                for _ in chunks:
                    pass
        assert stopped.value.code == "turn_stopped"
    finally:
        cluster.agent.release.set()
        replica.stop()


def test_a_second_replica_continues_a_session_named_by_its_header(cluster: Cluster) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        raw = first.client().chat.completions.with_raw_response.create(
            model="hermes-agent", messages=[{"role": "user", "content": "remember me"}]
        )
        session_id = raw.headers[SESSION_HEADER]
        again = second.client().chat.completions.with_raw_response.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": "it is me"}],
            extra_headers={SESSION_HEADER: session_id},
        )
        assert again.headers[SESSION_HEADER] == session_id
        assert [m.content for m in cluster.pg.load_transcript(session_id)] == [
            "remember me",
            "echo: remember me",
            "it is me",
            "echo: it is me",
        ]
    finally:
        first.stop()
        second.stop()


def test_the_operator_api_changes_a_live_session_through_its_shard_host(cluster: Cluster) -> None:
    replica = cluster.replica()
    base = replica.server.url + "/api/sessions"
    try:
        status, created = _json(base, {"title": "Ops"}, key=ADMIN)
        assert status == 201, created
        session_id = created["id"]
        status, answer = _json(f"{base}/{session_id}/chat", {"message": "hello"}, key=ADMIN)
        assert (status, answer["reply"]) == (200, "echo: hello")  # the host runs it: its actor holds the session
        status, renamed = _json(f"{base}/{session_id}", {"title": "Ops desk"}, method="PATCH", key=ADMIN)
        assert (status, renamed["title"]) == (200, "Ops desk")
        status, answer = _json(f"{base}/{session_id}/chat", {"message": "/title"}, key=ADMIN)
        assert "Ops desk" in answer["reply"]  # the live actor took the new title, not only the store
        status, forked = _json(f"{base}/{session_id}/fork", {}, key=ADMIN)
        assert status == 201, forked
        assert (forked["parent_session_id"], forked["title"]) == (session_id, "Ops desk (2)")
        status, parent = _json(f"{base}/{session_id}", key=ADMIN)
        assert (parent["live"], parent["end_reason"]) == (False, "branched")
        status, listed = _json(base, key=ADMIN)
        assert forked["id"] in {row["id"] for row in listed["data"]}
        status, deleted = _json(f"{base}/{forked['id']}", method="DELETE", key=ADMIN)
        assert (status, deleted["deleted"]) == (200, True)
        assert cluster.pg.find_session(forked["id"]) is None
    finally:
        replica.stop()
