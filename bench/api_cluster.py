"""The API's latency in cluster mode against one machine: first delta and whole answer of streaming requests.

Two runs of the same sequential workload (``--requests`` streaming chat completions, each a new conversation, the
echo agent), one after the other on this machine:

- **single**: an API server over one in-process gateway on a temporary SQLite file (what ``hermesd`` runs);
- **cluster**: an API server over a :class:`ClusterInbox` (what a ``hermesd --cluster`` replica runs) with its
  :class:`ApiReplies`, and one shard host in a process of its own (``python bench/api_cluster.py --serve-host DSN``:
  a :class:`HostRuntime` holding every shard, no Ray), both on a throw-away PostgreSQL (``tests/postgres.py``,
  Unix socket only). A request goes: inbox commit and ``NOTIFY`` → the host pulls and runs the turn → its events
  are relayed through ``NOTIFY hermes_turn`` → the reply's commit notifies ``hermes_outbox`` → the replica reads
  it from the outbox.

Each request is timed from sending to its first content delta and to ``[DONE]``; p50 and p99 of each, and the ratio
of the cluster's p50 to one machine's. One ``name: value unit (note)`` line per figure. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from report import figure_line

from hermes_actors.agents.base import EchoAgent
from platforms.api_server import ApiServer, ApiServerConfig
from tests.postgres import Cluster, find_bin_dir

SHARDS = 16


def serve_host(dsn: str) -> None:
    """The shard host process: hold every shard, run turns with the echo agent until stdin closes."""
    from hermes_actors.cluster.host.runtime import HostRuntime
    from hermes_actors.cluster.host.settings import HostSettings

    host = HostRuntime(
        HostSettings(name="bench-host", postgres_dsn=dsn, hosts=("bench-host",), shards=SHARDS),
        agent=EchoAgent(),
    )
    host.start()
    deadline = time.monotonic() + 30
    while len(host.fence.held()) < SHARDS:
        if time.monotonic() > deadline:
            sys.exit("the host did not take its shards within 30 s")
        time.sleep(0.05)
    print("ready", flush=True)
    sys.stdin.read()
    host.stop()


def one_request(port: int, text: str) -> tuple[float, float]:
    """A streaming request; seconds to its first content delta and to ``[DONE]``."""
    body = json.dumps({"model": "hermes-agent", "stream": True, "messages": [{"role": "user", "content": text}]})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.perf_counter()
    first = None
    try:
        connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"status {response.status}: {response.read()[:200]!r}")
        while True:
            line = response.readline()
            if not line:
                raise RuntimeError("the stream ended before [DONE]")
            if first is None and line.startswith(b"data: {") and b'"content":"' in line:
                first = time.perf_counter() - started
            if line.startswith(b"data: [DONE]"):
                break
    finally:
        connection.close()
    assert first is not None
    return first, time.perf_counter() - started


def run(port: int, requests: int, warmup: int) -> tuple[list[float], list[float]]:
    firsts: list[float] = []
    totals: list[float] = []
    for number in range(warmup + requests):
        first, total = one_request(port, f"question {uuid.uuid4().hex}")
        if number >= warmup:
            firsts.append(first)
            totals.append(total)
    return firsts, totals


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def single_machine() -> Iterator[int]:
    from hermes_actors.runtime.gateway import Gateway
    from hermes_actors.runtime.inbox_port import GatewayInbox

    with tempfile.TemporaryDirectory() as directory:
        server = ApiServer(ApiServerConfig(port=0), environ={})
        gateway = Gateway(Path(directory) / "state.db", agent=EchoAgent(), senders=server.senders())
        server.start(GatewayInbox(gateway))
        try:
            yield int(server.url.rsplit(":", 1)[1])
        finally:
            server.stop(10)
            gateway.stop(10)


@contextlib.contextmanager
def cluster_replica(dsn: str) -> Iterator[int]:
    from hermes_actors.cluster.replica.api_replies import ApiReplies
    from hermes_actors.cluster.replica.inbox import ClusterInbox
    from hermes_actors.cluster.replica.ingress import ClusterIngress
    from hermes_actors.media import MediaStore
    from hermes_actors.store.pg import PostgresStore
    from hermes_actors.waiters import ReplyWaiters

    host = subprocess.Popen(
        [sys.executable, __file__, "--serve-host", dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert host.stdout is not None
        if host.stdout.readline().strip() != "ready":
            raise RuntimeError("the shard host did not start")
        with PostgresStore.open(dsn) as pg, tempfile.TemporaryDirectory() as media:
            inbox = ClusterInbox(ClusterIngress(pg, shards=SHARDS), MediaStore(Path(media)))
            server = ApiServer(ApiServerConfig(port=0), environ={})
            (waiters,) = server.senders()
            assert isinstance(waiters, ReplyWaiters)
            replies = ApiReplies(dsn, pg, waiters, inbox.watch)
            replies.start()
            server.start(inbox)
            try:
                yield int(server.url.rsplit(":", 1)[1])
            finally:
                server.stop(10)
                replies.close()
                inbox.close()
    finally:
        if host.stdin is not None:
            host.stdin.close()
        try:
            host.wait(30)
        except subprocess.TimeoutExpired:
            host.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--serve-host", metavar="DSN", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_host:
        serve_host(args.serve_host)
        return
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed: apt-get install postgresql")
    print(figure_line("requests", args.requests, note="sequential, streaming, each a new conversation, echo agent"))
    with single_machine() as port:
        single = run(port, args.requests, args.warmup)
    cluster = Cluster(bin_dir)
    try:
        cluster.prepare_template()
        dsn = cluster.dsn(cluster.create_database())
        with cluster_replica(dsn) as port:
            spread = run(port, args.requests, args.warmup)
    finally:
        cluster.stop()
    for name, (firsts, totals) in (("single", single), ("cluster", spread)):
        print(figure_line(f"{name}_first_delta_p50_ms", statistics.median(firsts) * 1000, "ms"))
        print(figure_line(f"{name}_first_delta_p99_ms", quantile(firsts, 0.99) * 1000, "ms"))
        print(figure_line(f"{name}_done_p50_ms", statistics.median(totals) * 1000, "ms"))
        print(figure_line(f"{name}_done_p99_ms", quantile(totals, 0.99) * 1000, "ms"))
    ratio = statistics.median(spread[0]) / statistics.median(single[0])
    print(figure_line("cluster_over_single_first_delta_p50", ratio, "x"))


if __name__ == "__main__":
    main()
