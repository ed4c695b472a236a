"""A rare two-character CJK term on both stores: the PostgreSQL bigram index against the SQLite word index.

Generates ``--rows`` messages of Chinese text (from a pool of common characters) with some English words, plants
a two-character term whose characters are common but whose pair occurs only in ``--planted`` messages, loads the
same messages into a SQLite store and into a PostgreSQL store on a throw-away cluster (as the tests start one:
``tests/postgres.py``), and times the term on each: ``fts_query`` newest first, ``fts_query`` by relevance and a
``session_search`` discovery, each the median of ``--runs`` runs after one warm-up. Also prints the PostgreSQL
index sizes. One ``name: value unit`` line per figure; bench/README.md has the figures. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from report import figure_line

from hermes_actors.search import session_search
from hermes_actors.store import NewMessage, Role, Store, StoreInterface
from tests.postgres import Cluster, find_bin_dir

POOL = (
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后"
    "小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长"
)
RARE = POOL[5] + POOL[7]  # 人在: both characters common, the pair planted only
WORDS = ["deploy", "docker", "image", "error", "python", "server", "config", "update"]
MESSAGES_PER_SESSION = 50
BATCH = 1000


def generate(rows: int, planted: int, seed: int) -> list[str]:
    """``rows`` message texts; the rare pair occurs in exactly ``planted`` of them, spread evenly."""
    rng = random.Random(seed)
    texts = []
    for _ in range(rows):
        text = "".join(rng.choice(POOL) for _ in range(rng.randint(20, 80)))
        if rng.random() < 0.3:
            text += " " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
        texts.append(text.replace(RARE, POOL[5] + POOL[8]))
    for index in range(planted):
        at = (index * rows) // planted + rows // (2 * planted)
        texts[at] = texts[at][:10] + RARE + texts[at][10:]
    return texts


def load(store: StoreInterface, texts: list[str]) -> float:
    """Append ``texts`` in sessions of :data:`MESSAGES_PER_SESSION`; seconds taken."""
    started = time.perf_counter()
    for start in range(0, len(texts), MESSAGES_PER_SESSION):
        session = store.create_session("bench")
        chunk = texts[start : start + MESSAGES_PER_SESSION]
        store.append_messages(session.id, [NewMessage(role=Role.USER, content=t) for t in chunk])
    return time.perf_counter() - started


def median_ms(run: Callable[[], object], runs: int) -> float:
    run()  # warm-up: caches, the first connection of the pool
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(name: str, store: StoreInterface, runs: int, planted: int) -> None:
    newest = store.fts_query(RARE, order="newest", limit=20)
    assert newest.ok, (name, newest.error)
    assert len(newest.hits) == min(planted, 20), (name, len(newest.hits))
    print(figure_line(f"{name}_fts_newest_ms", median_ms(lambda: store.fts_query(RARE, order="newest"), runs), "ms"))
    print(figure_line(f"{name}_fts_relevance_ms", median_ms(lambda: store.fts_query(RARE), runs), "ms"))
    print(figure_line(f"{name}_discovery_ms", median_ms(lambda: session_search(store, query=RARE), runs), "ms"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--planted", type=int, default=5)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL is not installed: apt-get install postgresql")
    from hermes_actors.store.pg import PostgresStore

    texts = generate(args.rows, args.planted, args.seed)
    print(figure_line("rows", args.rows), flush=True)
    with tempfile.TemporaryDirectory() as directory, Store.open(Path(directory) / "bench.db") as sqlite:
        print(figure_line("sqlite_load_s", load(sqlite, texts), "s"), flush=True)
        sqlite.kv.set_meta("bench", "checkpoint")
        sqlite._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        print(figure_line("sqlite_file_mb", (Path(directory) / "bench.db").stat().st_size / 1e6, "MB"))
        measure("sqlite", sqlite, args.runs, args.planted)
        cluster = Cluster(bin_dir)
        try:
            cluster.admin("CREATE DATABASE bench")
            with PostgresStore.open(cluster.dsn("bench")) as pg:
                print(figure_line("pg_load_s", load(pg, texts), "s"), flush=True)
                pg.database.execute("VACUUM ANALYZE messages")
                measure("pg", pg, args.runs, args.planted)
                total = int(pg.database.value("SELECT pg_total_relation_size('messages')"))
                print(figure_line("pg_messages_with_indexes_mb", total / 1e6, "MB"))
                for index in ("messages_cjk", "messages_words", "messages_pkey", "messages_session"):
                    size = int(pg.database.value("SELECT pg_relation_size(%s::regclass)", (index,)))
                    print(figure_line(f"pg_{index}_mb", size / 1e6, "MB"))
                plan = pg.database.execute(
                    "EXPLAIN SELECT id FROM messages WHERE cjk @@ %s::tsquery AND strpos(content, %s) > 0 "
                    "ORDER BY id DESC LIMIT 20",
                    (f"'{RARE}'", RARE),
                )
                uses = "messages_cjk" in " ".join(str(row[0]) for row in plan)
                print(figure_line("pg_plan_uses_messages_cjk", str(uses).lower()))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
