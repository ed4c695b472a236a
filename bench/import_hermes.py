"""Import rate of ``hermesctl import-hermes``: a synthetic reference-system state.db into a fresh store.

Builds (or reuses, with ``--source``) a schema-22 reference database of ``--messages`` messages from
``bench/corpus.py`` (a quarter Chinese), laid out as the reference system writes it: both inline FTS tables and
their triggers, compression chains with lineage titles, a few rows compacted away, one routing entry per
conversation. Then imports it ``--runs`` times, each into a fresh store, through the same call the command makes
(``import_hermes``), and prints one ``name: value unit`` line per figure (bench/README.md, "import"). A plain
script, not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import apsw

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus import DEFAULT_SEED, Session, content_bytes, count_cjk_messages, generate_sessions, iter_messages
from report import figure_line

from hermes_actors.importer import DEFAULT_BATCH_MESSAGES, ImportReport, import_hermes
from hermes_actors.store import Store
from tests.importer.hermes_v22 import DDL

START_TIME = 1_780_000_000.0  # 2026-05-28: sessions follow each other from here
SESSION_SPACING_S = 120.0
MESSAGE_SPACING_S = 20.0
CHAIN_EVERY = 30  # every 30th session starts a compression chain of CHAIN_LENGTH sessions with lineage titles
CHAIN_LENGTH = 3
COMPACTED_EVERY = 50  # in every 50th session the first two messages were compacted away
SESSIONS_PER_TRANSACTION = 500
CEILING_ROWS_PER_TRANSACTION = 10_000


def figure(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    print(figure_line(name, value, unit, note), flush=True)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _session_rows(number: int, turns: Session, chained: bool) -> tuple[tuple[object, ...], list[tuple[object, ...]]]:
    session_id = f"20260528_{number // 10000:02d}{number % 10000:04d}_{number:08x}"
    started = START_TIME + number * SESSION_SPACING_S
    messages = [message for turn in turns for message in turn]
    compacted = 2 if number % COMPACTED_EVERY == 0 else 0  # the first rows, compacted away
    rows: list[tuple[object, ...]] = [
        (session_id, role, content, started + (i + 1) * MESSAGE_SPACING_S, int(i >= compacted), int(i < compacted))
        for i, (role, content) in enumerate(messages)
    ]
    parent = f"20260528_{(number - 1) // 10000:02d}{(number - 1) % 10000:04d}_{number - 1:08x}" if chained else None
    ended = started + (len(messages) + 1) * MESSAGE_SPACING_S
    chat = str(10_000 + number)
    session = (
        session_id,
        "telegram",
        chat,
        f"agent:main:telegram:dm:{chat}",
        chat,
        "dm",
        json.dumps({"platform": "telegram", "chat_id": chat, "chat_type": "dm", "user_id": chat}),
        "hermes-4",
        "You are Hermes.",
        parent,
        started,
        ended,
        "compression",  # rewritten for the last session of each chain below
    )
    return session, rows


def build_source(path: Path, sessions: list[Session]) -> int:
    """Write the reference database; return how many routing entries it has."""
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    with db:
        db.execute(DDL)
        db.execute("INSERT INTO schema_version (version) VALUES (22)")
    routes = 0
    for first in range(0, len(sessions), SESSIONS_PER_TRANSACTION):
        with db:
            for number in range(first, min(first + SESSIONS_PER_TRANSACTION, len(sessions))):
                link = number % CHAIN_EVERY  # its place in a chain, when below CHAIN_LENGTH
                chained = 0 < link < CHAIN_LENGTH
                continues = link < CHAIN_LENGTH - 1 and number + 1 < len(sessions)
                session, rows = _session_rows(number, sessions[number], chained)
                db.execute(
                    "INSERT INTO sessions (id, source, user_id, session_key, chat_id, chat_type, origin_json, model, "
                    "system_prompt, parent_session_id, started_at, ended_at, end_reason, title) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *session[:11],
                        session[11] if continues else None,
                        session[12] if continues else None,
                        (f"conversation {number - link}" + (f" #{link + 1}" if link else ""))
                        if link < CHAIN_LENGTH
                        else None,
                    ),
                )
                db.executemany(
                    "INSERT INTO messages (session_id, role, content, timestamp, active, compacted) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )
                if not continues:  # a chain's key reaches its tip
                    db.execute(
                        "INSERT INTO gateway_routing (session_key, entry_json, updated_at) VALUES (?, ?, ?)",
                        (session[3], json.dumps({"session_id": session[0], "platform": "telegram"}), session[10]),
                    )
                    routes += 1
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return routes


def run_import(source: Path, folder: Path, run: int, *, dry_run: bool, batch: int) -> tuple[float, float, ImportReport]:
    """Import into a fresh store; return wall seconds, CPU seconds and the report."""
    target = folder / f"import-{run}.db"
    with Store.open(target) as store:
        started, cpu = time.perf_counter(), cpu_seconds()
        report = import_hermes(source, store, dry_run=dry_run, batch_messages=batch)
        elapsed, used = time.perf_counter() - started, cpu_seconds() - cpu
    if dry_run:
        target.unlink()
    return elapsed, used, report


def run_ceiling(source: Path, folder: Path) -> float:
    """Messages/s of plain INSERTs of the same rows (triggers and FTS included) into a fresh store: what the store
    takes at best, measured beside the import so the machine's state is the same for both."""
    db = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    rows = db.execute(
        "SELECT session_id, role, content, timestamp FROM messages WHERE active = 1 OR compacted = 1 ORDER BY id"
    ).fetchall()
    db.close()
    with Store.open(folder / "ceiling.db") as store:
        conn = store._connection
        with store.transaction():
            for session_id in dict.fromkeys(str(row[0]) for row in rows):
                conn.execute(
                    "INSERT INTO sessions (id, source, started_at, last_active_at) VALUES (?, 'telegram', 0, 0)",
                    (session_id,),
                )
        refs = {str(sid): int(ref) for sid, ref in conn.execute("SELECT id, ref FROM sessions")}
        values = [(refs[str(sid)], role, content, at) for sid, role, content, at in rows]
        started = time.perf_counter()
        for first in range(0, len(values), CEILING_ROWS_PER_TRANSACTION):
            with store.transaction():
                conn.executemany(
                    "INSERT INTO messages (session_ref, role, content, created_at) VALUES (?, ?, ?, ?)",
                    values[first : first + CEILING_ROWS_PER_TRANSACTION],
                )
        elapsed = time.perf_counter() - started
    (folder / "ceiling.db").unlink()
    return len(values) / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    figure("load_average_start", " ".join(f"{x:.2f}" for x in os.getloadavg()), note=f"{os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="hermes-bench-import-", dir=args.dir) as scratch:
        folder = Path(scratch)
        source = Path(args.source) if args.source else folder / "reference.db"
        if not source.exists():
            started = time.perf_counter()
            sessions = generate_sessions(args.messages, seed=args.seed)
            messages = sum(1 for _ in iter_messages(sessions))
            routes = build_source(source, sessions)
            figure(
                "source_build",
                time.perf_counter() - started,
                "s",
                f"{messages} messages ({count_cjk_messages(sessions)} Chinese, "
                f"{content_bytes(sessions) / 1e6:.1f} MB), {len(sessions)} sessions, {routes} routes",
            )
        figure("source_size", source.stat().st_size / 1e6, "MB", "the reference database, both FTS tables included")
        runs: list[tuple[float, float, ImportReport]] = []
        for run in range(args.runs):
            runs.append(run_import(source, folder, run, dry_run=False, batch=args.batch_messages))
            elapsed, used, report = runs[-1]
            rows = report.messages_imported + report.compacted_imported
            figure(f"import_run_{run + 1}", rows / elapsed, "messages/s", f"{elapsed:.1f} s wall, {used:.1f} s CPU")
        rates = [(r.messages_imported + r.compacted_imported) / elapsed for elapsed, _, r in runs]
        cpu_rates = [(r.messages_imported + r.compacted_imported) / used for _, used, r in runs]
        report = runs[-1][2]
        figure(
            "import",
            statistics.median(rates),
            "messages/s",
            f"median of {len(rates)} runs, range {min(rates):.0f}-{max(rates):.0f}; "
            f"{report.messages_imported} live + {report.compacted_imported} compacted rows, "
            f"{report.sessions_imported} sessions, {report.routes_migrated} routes",
        )
        figure("import_cpu", statistics.median(cpu_rates), "messages/s", "per second of the process's CPU time")
        ceiling = run_ceiling(source, folder)
        figure("ceiling", ceiling, "messages/s", f"plain INSERTs in {CEILING_ROWS_PER_TRANSACTION}-row transactions")
        figure("import_vs_ceiling", statistics.median(rates) / ceiling)
        with Store.open(folder / "import-0.db") as store:
            started = time.perf_counter()
            again = import_hermes(source, store)
            figure(
                "import_again",
                time.perf_counter() - started,
                "s",
                f"a second run into the first store: {again.sessions_unchanged} sessions unchanged, "
                f"{again.messages_imported} messages imported",
            )
            store._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = (folder / "import-0.db").stat().st_size
        figure("store_size", size / 1e6, "MB", f"{size / source.stat().st_size:.2f} of the reference database")
        elapsed, _, preview = run_import(source, folder, args.runs, dry_run=True, batch=args.batch_messages)
        figure(
            "dry_run", preview.messages_imported / elapsed, "messages/s", f"{elapsed:.1f} s: reading and deciding only"
        )
    figure("total_runtime", time.perf_counter() - began, "s")
    figure("load_average_end", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=_positive, default=200_000, help="corpus size (default 200000)")
    parser.add_argument("--runs", type=_positive, default=3, help="timed imports, each into a fresh store (default 3)")
    parser.add_argument(
        "--batch-messages",
        type=_positive,
        default=DEFAULT_BATCH_MESSAGES,
        help=f"source rows per transaction (default {DEFAULT_BATCH_MESSAGES})",
    )
    parser.add_argument("--source", help="a reference database to import instead of building one (kept)")
    parser.add_argument("--dir", help="where the scratch directory goes (default: the system's temporary directory)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"corpus seed (default {DEFAULT_SEED})")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
