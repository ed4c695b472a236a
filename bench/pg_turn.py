"""What one fenced turn costs a shard host's store writer (and PostgreSQL), measured alone.

A throw-away PostgreSQL cluster on a Unix socket (``tests/postgres.py``), one process, no Ray, no other load. A
:class:`~hermes_actors.store.pg.writer.PgWriter` over a :class:`~hermes_actors.store.pg.PostgresStore` fenced by a
:class:`~hermes_actors.store.pg.shards.ShardFence` that holds every shard commits ``--n`` turns one at a time, each
as a shard host's turn commits it: the inbox row's completion, the user message and the echo reply with their search
columns, and the reply's outbox row, all under the session lease's fence (one statement), over ``--sessions``
sessions. The inbox rows are added before the clock starts. Each figure is the median over ``--rounds`` rounds:

- ``pg_turn_writer_us``: the writer thread's CPU per turn, its transactions' ``BEGIN`` and ``COMMIT`` included
  (``time.thread_time`` read by the writer before the first turn and after the last);
- ``pg_turn_caller_us``: the CPU per turn of the thread that submits the turns and waits for each;
- ``pg_turn_server_us``: the CPU per turn of every PostgreSQL process (``/proc``, clock ticks), the writer's backend
  nearly all of it;
- ``pg_turn_wall_us``: the wall-clock time per turn, one after another.

``HERMES_BENCH_CODE=DIR`` measures the package of the checkout at ``DIR``; alternate two trees by hand (old, new,
new, old, ...) to compare them on a machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("HERMES_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

from report import figure_line

from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import ShardFence
from hermes_actors.store.pg.writer import PgWriter
from hermes_actors.store.records import NewMessage, Role
from tests.postgres import bench_cluster

_SHARDS = 8
_OWNER = "bench-host"
_TTL_S = 600.0


def _server_cpu_s(postmaster: int) -> float:
    """User + system CPU seconds of the postmaster's children alive now."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class _Turns:
    """The store, the writer and the sessions the rounds run their turns on."""

    def __init__(self, dsn: str, sessions: int) -> None:
        self.store = PostgresStore.open(dsn, migrate_schema=False, pool_size=2)
        self.store.shards.ensure(_SHARDS)
        fence = ShardFence(_OWNER, _SHARDS)
        fence.grant(self.store.shards.acquire(_OWNER, list(range(_SHARDS)), _TTL_S), _TTL_S, asked_at=float("inf"))
        self.store.fence_shards(fence)
        self.sessions: list[tuple[str, int]] = []
        for n in range(sessions):
            record = self.store.create_session("telegram", session_id=f"bench-{n}")
            self.sessions.append((record.id, int(self.store.leases.grant(record.id, _OWNER, _TTL_S))))
        self.writer = PgWriter(self.store)
        self.added = 0

    def inbox_rows(self, n: int) -> list[int]:
        """``n`` pending inbox rows, one per turn to come."""
        rows = []
        for _ in range(n):
            self.added += 1
            key = f"key-{self.added % len(self.sessions)}"
            found = self.store.inbox.add(
                platform="telegram",
                account_id="",
                platform_message_id=f"m{self.added}",
                routing_key=key,
                payload=b"x" * 200,
            )
            assert found is not None
            rows.append(int(found))
        return rows

    def writer_cpu_s(self) -> float:
        """The writer thread's CPU seconds so far (read on it, after every write submitted before has committed)."""
        return float(self.writer.call(lambda store: time.thread_time()))

    def turn(self, k: int, inbox_id: int) -> None:
        """One fenced turn."""
        session_id, epoch = self.sessions[k % len(self.sessions)]
        text = f"hello number {k}, how are you today?"
        messages = [
            NewMessage(role=Role.USER, content=text, platform_message_id=f"m{inbox_id}"),
            NewMessage(role=Role.ASSISTANT, content=f"echo: {text}", input_tokens=9, output_tokens=9),
        ]

        def work(store: Any) -> None:
            writes = [
                store.inbox.completion([inbox_id], session_id=session_id),
                store.appending_messages(session_id, messages),
                store.outbox.adding(
                    session_id=session_id,
                    platform="telegram",
                    account_id="",
                    chat_id="chat",
                    thread_id=None,
                    payload=b"r" * 120,
                    attempts=1,
                ),
            ]
            store.leases.fence(session_id, _OWNER, epoch, _TTL_S, then=writes)

        self.writer.call(work)

    def close(self) -> None:
        self.writer.stop()
        self.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000, help="turns per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the medians are printed (default 5)")
    parser.add_argument("--sessions", type=int, default=200, help="sessions the turns go round (default 200)")
    args = parser.parse_args()
    cluster = bench_cluster()
    try:
        cluster.prepare_template()
        dsn = cluster.dsn(cluster.create_database())
        postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
        turns = _Turns(dsn, args.sessions)
        try:
            for k, inbox_id in enumerate(turns.inbox_rows(300)):  # warm: statements prepared, plans cached
                turns.turn(k, inbox_id)
            writer, caller, server, wall = [], [], [], []
            for _ in range(args.rounds):
                rows = turns.inbox_rows(args.n)
                writer_before = turns.writer_cpu_s()
                server_before, before, started = _server_cpu_s(postmaster), time.thread_time(), time.perf_counter()
                for k, inbox_id in enumerate(rows):
                    turns.turn(k, inbox_id)
                wall.append((time.perf_counter() - started) / args.n * 1e6)
                caller.append((time.thread_time() - before) / args.n * 1e6)
                server.append((_server_cpu_s(postmaster) - server_before) / args.n * 1e6)
                writer.append((turns.writer_cpu_s() - writer_before) / args.n * 1e6)
        finally:
            turns.close()
        note = f"median of {args.rounds} rounds of {args.n} turns"
        print(figure_line("pg_turn_writer_us", statistics.median(writer), "µs", note), flush=True)
        print(figure_line("pg_turn_caller_us", statistics.median(caller), "µs"), flush=True)
        print(figure_line("pg_turn_server_us", statistics.median(server), "µs"), flush=True)
        print(figure_line("pg_turn_wall_us", statistics.median(wall), "µs"), flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
