"""What one PostgreSQL statement and one notification cost the client (and the server), by the way they are sent.

A throw-away PostgreSQL cluster on a Unix socket (``tests/postgres.py``), one process, no other load: each figure is
the median over ``--rounds`` rounds of ``--n`` operations of the thread's CPU (``time.thread_time``) and the backend's
(``/proc/<pid>/stat``) per operation. The ways compared:

- a one-row ``SELECT`` through this tree's :class:`~hermes_actors.store.pg.db.Database` (pool, spare connections,
  psycopg's prepared statement), through a plain psycopg cursor, and through libpq alone (``exec_prepared``);
- a transaction of five ``INSERT ... RETURNING``: one statement each, the five pipelined (psycopg's pipeline mode),
  and the five as ``WITH`` queries of one statement (figures per slot of six: the five and the ``COMMIT``);
- a notification read with psycopg's ``notifies()`` (twice per wake-up, as the listeners did) and with
  :func:`~hermes_actors.store.pg.notices.wait_notices`.

``HERMES_BENCH_CODE=DIR`` measures the package of the checkout at ``DIR``. bench/README.md tells what the figures
meant for the cluster's cost per message (issue 37 item 4).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("HERMES_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

import psycopg
from report import figure_line

from hermes_actors.store.pg.db import Database
from tests.postgres import bench_cluster


def _backend_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(n: int, rounds: int, backend: int, run: Callable[[], None]) -> tuple[float, float]:
    """Median client and server CPU (µs) per operation of ``run`` (which does ``n`` of them)."""
    client, server = [], []
    for _ in range(rounds):
        before_server, before = _backend_cpu_s(backend), time.thread_time()
        run()
        client.append((time.thread_time() - before) / n * 1e6)
        server.append((_backend_cpu_s(backend) - before_server) / n * 1e6)
    return statistics.median(client), statistics.median(server)


def _statements(dsn: str, n: int, rounds: int) -> list[str]:
    lines: list[str] = []
    database = Database(dsn, pool_size=1)
    plain = psycopg.connect(dsn, autocommit=True, prepare_threshold=5)
    try:
        cursor = plain.cursor()
        plain.pgconn.prepare(b"one", b"SELECT $1::int", None)
        plain.execute("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, v text)")
        backend = int(database.execute("SELECT pg_backend_pid()")[0][0])

        def through_database() -> None:
            for i in range(n):
                database.execute("SELECT %s::int", (i,))

        def through_cursor() -> None:
            for i in range(n):
                cursor.execute(b"SELECT %s::int", (i,))
                cursor.fetchall()

        def through_libpq() -> None:
            for i in range(n):
                plain.pgconn.exec_prepared(b"one", [str(i).encode()]).get_value(0, 0)

        insert = b"INSERT INTO bench_rows (v) VALUES (%s) RETURNING id"

        def one_by_one() -> None:
            for _ in range(n // 6):
                with plain.transaction():
                    for _ in range(5):
                        cursor.execute(insert, ("x",), prepare=True)
                        cursor.fetchone()

        def pipelined() -> None:
            for _ in range(n // 6):
                with plain.transaction(), plain.pipeline():
                    sent = [plain.execute(insert, ("x",), prepare=True) for _ in range(5)]
                    for each in sent:
                        each.fetchone()

        slots = (b"i%d AS (INSERT INTO bench_rows (v) VALUES (%%s) RETURNING id)" % k for k in range(5))
        fused = b"WITH " + b", ".join(slots) + b" SELECT * FROM i0, i1, i2, i3, i4"

        def as_one() -> None:
            for _ in range(n // 6):
                cursor.execute(fused, ("x",) * 5, prepare=True)
                cursor.fetchone()

        backend_plain = plain.info.backend_pid
        for name, run, pid in (
            ("pg_client_statement_database_us", through_database, backend),
            ("pg_client_statement_cursor_us", through_cursor, backend_plain),
            ("pg_client_statement_libpq_us", through_libpq, backend_plain),
            ("pg_client_insert_one_by_one_us", one_by_one, backend_plain),
            ("pg_client_insert_pipelined_us", pipelined, backend_plain),
            ("pg_client_insert_one_statement_us", as_one, backend_plain),
        ):
            client, server = _measure(n, rounds, pid, run)
            lines.append(figure_line(name, client, "µs client", f"server {server:.1f} µs"))
    finally:
        plain.close()
        database.close()
    return lines


def _notices(dsn: str, n: int, rounds: int) -> list[str]:
    wait_notices: Callable[[psycopg.Connection[Any], float], list[tuple[str, str]]] | None
    try:
        from hermes_actors.store.pg.notices import wait_notices
    except ImportError:  # a tree from before it (HERMES_BENCH_CODE)
        wait_notices = None

    def through_psycopg(listener: psycopg.Connection[Any], got: list[str]) -> None:
        while len(got) < n:
            got.extend(note.payload for note in listener.notifies(timeout=1.0, stop_after=1))
            got.extend(note.payload for note in listener.notifies(timeout=0.0))

    def through_libpq(listener: psycopg.Connection[Any], got: list[str]) -> None:
        while len(got) < n:
            assert wait_notices is not None
            got.extend(payload for _, payload in wait_notices(listener, 1.0))

    lines: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as sender:
        ways = [("pg_client_notice_psycopg_us", through_psycopg)]
        if wait_notices is not None:
            ways.append(("pg_client_notice_libpq_us", through_libpq))
        for name, read in ways:
            spent = [_listened(dsn, sender, read, n) for _ in range(rounds)]
            lines.append(figure_line(name, statistics.median(spent), "µs client", f"median of {rounds} rounds"))
    return lines


def _listened(
    dsn: str,
    sender: psycopg.Connection[Any],
    read: Callable[[psycopg.Connection[Any], list[str]], None],
    n: int,
) -> float:
    """Client CPU (µs) per notification for ``read`` on a fresh listener while ``sender`` notifies ``n`` times."""
    cpu: list[float] = []
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN bench")
        got: list[str] = []

        def listen() -> None:
            started = time.thread_time()
            read(listener, got)
            cpu.append(time.thread_time() - started)

        thread = threading.Thread(target=listen)
        thread.start()
        for i in range(n):  # one at a time, as a turn's commit sends them
            sender.execute("SELECT pg_notify('bench', %s)", (str(i),), prepare=True)
            time.sleep(0.0005)
        thread.join(timeout=60)
    return cpu[0] / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="operations per round (default 3000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; the medians are printed (default 5)")
    args = parser.parse_args()
    cluster = bench_cluster()
    try:
        dsn = cluster.dsn()
        for line in [*_statements(dsn, args.n, args.rounds), *_notices(dsn, min(args.n, 2000), args.rounds)]:
            print(line, flush=True)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
