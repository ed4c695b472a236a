"""Store write throughput, on-disk size and full-text search latency on one synthetic chat corpus.

Prints one ``name: value unit`` line per figure, then a summary against the targets; bench/README.md explains
every line. A plain script, not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw
from corpus import (
    DEFAULT_SEED,
    Message,
    Session,
    arrival_order,
    batches,
    content_bytes,
    count_cjk_messages,
    generate_sessions,
    is_chinese,
    iter_messages,
    sample_queries,
)
from report import figure_line

from hermes_actors.store import NewMessage, Role, Store, Synchronous, migrate, open_connection

TARGET_BYTES_PER_CONTENT_BYTE = 2.5
REFERENCE_BYTES_PER_CONTENT_BYTE = 7.0
TARGET_TURN_BATCH_VS_CEILING = 0.7
QUERY_REPEATS = 3
SOURCES = ("telegram", "slack", "discord", "whatsapp", "cli", "api_server")
START_TIME = 1_796_000_000.0  # 2026-11-30 00:53 UTC, so created_at values look like real ones
SECONDS_PER_BATCH = 3.0

_INSERT_SESSION = "INSERT INTO sessions (id, source, started_at, last_active_at) VALUES (?, ?, ?, ?)"
# The same rows append_messages writes: a message names its session by sessions.ref, looked up by id.
_INSERT_MESSAGE = (
    "INSERT INTO messages (session_ref, role, content, created_at) "
    "VALUES ((SELECT ref FROM sessions WHERE id = ?), ?, ?, ?)"
)


def figure(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    """Print one figure as ``name: value unit (note)``."""
    print(figure_line(name, value, unit, note), flush=True)


@dataclass(frozen=True)
class Plan:
    """The corpus laid out for appending: sessions, and append batches in arrival order."""

    session_ids: list[str]
    sources: list[str]
    started_at: list[float]
    batches: list[tuple[int, list[Message], float]]  # (session index, messages, created_at) in arrival order
    content_bytes: int
    chinese_bytes: int  # of the Chinese messages
    sessions: list[Session]

    @property
    def messages(self) -> int:
        return sum(len(batch) for _, batch, _ in self.batches)

    def rows(self) -> Iterator[tuple[str, str, str, float]]:
        """Every message as a ``messages`` row (session_id, role, content, created_at), in arrival order."""
        for index, batch, at in self.batches:
            session_id = self.session_ids[index]
            for role, content in batch:
                yield session_id, role, content, at


def make_plan(n_messages: int, turn_size: int, concurrent: int, seed: int) -> Plan:
    started = time.perf_counter()
    sessions = generate_sessions(n_messages, seed=seed)
    figure("corpus_generate", time.perf_counter() - started, "s")
    per_session = batches(sessions, turn_size)
    order = arrival_order(per_session, concurrent=concurrent, seed=seed)
    plan_batches: list[tuple[int, list[Message], float]] = []
    started_at = [0.0] * len(sessions)
    seen = [False] * len(sessions)
    for step, (index, item) in enumerate(order):
        at = START_TIME + step * SECONDS_PER_BATCH
        if not seen[index]:
            seen[index] = True
            started_at[index] = at
        plan_batches.append((index, per_session[index][item], at))
    session_ids = [
        time.strftime("%Y%m%d_%H%M%S", time.gmtime(started_at[i])) + f"_{(i * 2654435761) % 2**32:08x}"
        for i in range(len(sessions))
    ]
    plan = Plan(
        session_ids=session_ids,
        sources=[SOURCES[i % len(SOURCES)] for i in range(len(sessions))],
        started_at=started_at,
        batches=plan_batches,
        content_bytes=content_bytes(sessions),
        chinese_bytes=sum(len(c.encode("utf-8")) for _, c in iter_messages(sessions) if is_chinese(c)),
        sessions=sessions,
    )
    figure("corpus_messages", plan.messages, "messages", f"{len(sessions)} sessions, {len(order)} append batches")
    figure("corpus_content", plan.content_bytes / 1e6, "MB", "UTF-8 bytes of message content")
    figure(
        "corpus_chinese_messages",
        count_cjk_messages(sessions),
        "messages",
        f"{plan.chinese_bytes / 1e6:.2f} MB of the content",
    )
    return plan


# -- the runs ----------------------------------------------------------------------------------------------------


@dataclass
class Elapsed:
    """Wall-clock and CPU seconds (this process, user + system) of one timed run."""

    wall: float = 0.0
    cpu: float = 0.0


def settle() -> None:
    """Before a timed run: write back what earlier runs left dirty, collect garbage and freeze what is left.

    Without this, the write-back of one run's database and collections over the corpus's objects land in the
    next run's timing.
    """
    os.sync()
    gc.collect()
    gc.freeze()


@contextmanager
def timed(*, settle_first: bool = True) -> Iterator[Elapsed]:
    """Settle (unless told not to), then measure the block's wall-clock and CPU time."""
    if settle_first:
        settle()
    elapsed = Elapsed()
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield elapsed
    finally:
        elapsed.wall = time.perf_counter() - wall
        elapsed.cpu = time.process_time() - cpu


def _create_sessions(store: Store, plan: Plan) -> None:
    with store.transaction():
        for session_id, source, at in zip(plan.session_ids, plan.sources, plan.started_at, strict=True):
            store.create_session(source, session_id=session_id, started_at=at)


def _new_messages(batch: Sequence[Message]) -> list[NewMessage]:
    return [NewMessage(role=Role(role), content=content) for role, content in batch]


def run_single(path: Path, plan: Plan, synchronous: str, limit: int) -> tuple[Elapsed, int]:
    """``append_messages`` with one message per call for the first ``limit`` messages, into a fresh database."""
    work: list[tuple[str, list[NewMessage], float]] = []
    for session_id, role, content, at in plan.rows():
        if len(work) == limit:
            break
        work.append((session_id, _new_messages([(role, content)]), at))
    with Store.open(path, synchronous=synchronous) as store:
        _create_sessions(store, plan)
        append = store.append_messages
        with timed() as elapsed:
            for session_id, messages, at in work:
                append(session_id, messages, at=at)
    return elapsed, len(work)


@dataclass
class Chunk:
    """One stretch of the corpus written both ways: the ceiling's transaction and the store's batches."""

    messages: int
    batches: int
    ceiling: Elapsed
    store: Elapsed


def run_paired(ceiling_db: apsw.Connection, store: Store, plan: Plan, tx_messages: int) -> list[Chunk]:
    """Write the whole corpus into the (empty) ceiling database and into the store, chunk by chunk.

    A chunk is the next batches in arrival order up to ``tx_messages`` messages: the ceiling inserts them with
    plain ``INSERT`` statements in one transaction, the store appends them one ``append_messages`` call per
    batch. The two alternate chunk by chunk (A B, B A, ...), so a slow spell of the machine slows both alike
    and the per-chunk ratios stay comparable; both databases still grow from empty to the whole corpus.
    """
    chunks: list[list[tuple[int, list[Message], float]]] = [[]]
    size = 0
    for item in plan.batches:
        if size >= tx_messages:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += len(item[1])
    with ceiling_db:
        ceiling_db.executemany(
            _INSERT_SESSION, zip(plan.session_ids, plan.sources, plan.started_at, plan.started_at, strict=True)
        )
    _create_sessions(store, plan)
    append = store.append_messages
    work = [
        (
            [(plan.session_ids[i], role, content, at) for i, batch, at in chunk for role, content in batch],
            [(plan.session_ids[i], _new_messages(batch), at) for i, batch, at in chunk],
        )
        for chunk in chunks
    ]
    settle()
    out: list[Chunk] = []
    for number, (rows, calls) in enumerate(work):
        ceiling, appended = Elapsed(), Elapsed()
        for step in (0, 1) if number % 2 == 0 else (1, 0):
            if step == 0:
                with timed(settle_first=False) as ceiling, ceiling_db:
                    ceiling_db.executemany(_INSERT_MESSAGE, rows)
            else:
                with timed(settle_first=False) as appended:
                    for session_id, messages, at in calls:
                        append(session_id, messages, at=at)
        out.append(Chunk(messages=len(rows), batches=len(calls), ceiling=ceiling, store=appended))
    return out


# -- size --------------------------------------------------------------------------------------------------------


def checkpointed_size(db: apsw.Connection, path: Path) -> int:
    """Fold the WAL into the database file and return the file's size."""
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    return path.stat().st_size


def _group(name: str, indexes: set[str]) -> str:
    if name.startswith("messages_fts_cjk"):
        return "messages_fts_cjk"
    if name.startswith("messages_fts"):
        return "messages_fts"
    if name in indexes:
        return "indexes"
    if name == "messages":
        return "messages"
    return "other"


def report_dbstat(db: apsw.Connection, content: int, chinese: int) -> None:
    """Print bytes per table/index group from the ``dbstat`` virtual table, when SQLite has it.

    ``content`` and ``chinese`` are the UTF-8 bytes of all message content and of the Chinese messages.
    """
    try:
        rows = [
            (str(name), int(size), int(unused))
            for name, size, unused in db.execute("SELECT name, sum(pgsize), sum(unused) FROM dbstat GROUP BY name")
        ]
    except apsw.SQLError as exc:
        figure("dbstat", "unavailable", note=str(exc))
        return
    indexes = {str(name) for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'index'")}
    groups: dict[str, list[int]] = {}
    for name, size, unused in rows:
        totals = groups.setdefault(_group(name, indexes), [0, 0])
        totals[0] += size
        totals[1] += unused
    page_size = int(db.execute("PRAGMA page_size").get)
    free = int(db.execute("PRAGMA freelist_count").get) * page_size
    groups["freelist"] = [free, free]
    for group in ("messages", "messages_fts", "messages_fts_cjk", "indexes", "other", "freelist"):
        size, unused = groups.get(group, [0, 0])
        note = f"{size / content:.3f} per content byte, {unused / max(size, 1):.0%} of it unused space"
        if group == "messages_fts_cjk" and chinese:
            note += f"; {size / chinese:.2f} per byte of Chinese content"
        figure(f"dbstat_{group}", size / 1e6, "MB", note)
    for name, size, _ in sorted(rows, key=lambda row: -row[1]):
        if name not in groups and size >= 0.005 * content:
            figure(f"dbstat_detail_{name}", size / 1e6, "MB", f"{size / content:.3f} per content byte")


# -- queries -----------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def run_queries(path: Path, queries: Sequence[tuple[str, str]], newest: int) -> tuple[int, int]:
    """Time ``fts_query(q, limit=10)`` on a read-only store; print per-kind figures; return (hits, errors).

    Then, for information, the first ``newest`` queries once each with ``order="newest"``.
    """
    seconds: dict[str, list[float]] = {}
    hits: dict[str, int] = {}
    errors = 0
    newest_seconds: dict[str, list[float]] = {}
    with Store.open(path, readonly=True) as reader:
        for _, query in queries:  # warm the page cache and the statement cache
            reader.fts_query(query, limit=10)
        for kind, query in queries:
            runs: list[float] = []
            for _ in range(QUERY_REPEATS):
                started = time.perf_counter()
                result = reader.fts_query(query, limit=10)
                runs.append(time.perf_counter() - started)
            seconds.setdefault(kind, []).append(statistics.median(runs))
            hits[kind] = hits.get(kind, 0) + (1 if result.hits else 0)
            if not result.ok:
                errors += 1
                figure("fts_error", repr(query), note=str(result.error))
        for kind, query in queries[:newest]:
            started = time.perf_counter()
            reader.fts_query(query, limit=10, order="newest")
            newest_seconds.setdefault(kind, []).append(time.perf_counter() - started)
    every = [s for kind in seconds for s in seconds[kind]]
    figure("fts_queries", len(every), "queries", f"limit=10, median of {QUERY_REPEATS} runs each, after a warm-up")
    figure("fts_median", statistics.median(every) * 1e3, "ms")
    figure("fts_p95", percentile(every, 0.95) * 1e3, "ms")
    figure("fts_hits", f"{sum(hits.values())}/{len(every)}", "queries with at least one hit")
    for kind, values in seconds.items():
        figure(f"fts_{kind}_median", statistics.median(values) * 1e3, "ms")
        figure(f"fts_{kind}_p95", percentile(values, 0.95) * 1e3, "ms")
        figure(f"fts_{kind}_hits", f"{hits[kind]}/{len(values)}", "queries")
    if newest_seconds:
        values = [s for kind in newest_seconds for s in newest_seconds[kind]]
        note = f"{len(values)} of the queries, once each, order='newest'"
        figure("fts_newest_median", statistics.median(values) * 1e3, "ms", note)
        figure("fts_newest_max", max(values) * 1e3, "ms", note)
        for kind, values in newest_seconds.items():
            figure(f"fts_newest_{kind}_median", statistics.median(values) * 1e3, "ms", f"{len(values)} queries")
    return sum(hits.values()), errors


# -- main --------------------------------------------------------------------------------------------------------


@contextmanager
def workdir(directory: str | None) -> Iterator[Path]:
    """A temporary directory removed afterwards, or ``directory`` (kept, with its old bench files replaced)."""
    if directory is None:
        path = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    yield path


def fresh(directory: Path, name: str) -> Path:
    """Return ``directory/name`` with any old database, WAL and shared-memory files removed."""
    path = directory / name
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=_positive, default=200_000, help="corpus size (default 200000)")
    parser.add_argument(
        "--synchronous",
        default=Synchronous.NORMAL.value,
        type=str.upper,
        choices=[s.value for s in Synchronous],
        help="PRAGMA synchronous for every writing connection (default NORMAL)",
    )
    parser.add_argument(
        "--turn-size",
        type=_non_negative,
        default=3,
        help="messages per append_messages call in append_turn_batch; 0 = the corpus's natural turns "
        "(user+assistant, sometimes +tool) (default 3)",
    )
    parser.add_argument("--queries", type=_non_negative, default=200, help="full-text queries (default 200)")
    parser.add_argument("--dir", help="write the databases here and keep them (default: a temporary directory)")
    parser.add_argument(
        "--single-tx-messages",
        type=_positive,
        default=20_000,
        help="messages appended one per transaction in append_single_tx (default 20000)",
    )
    parser.add_argument(
        "--ceiling-tx",
        type=_positive,
        default=10_000,
        help="messages per ceiling transaction, and per chunk of the interleaved runs (default 10000)",
    )
    parser.add_argument("--concurrent", type=_positive, default=64, help="sessions active at once (default 64)")
    parser.add_argument(
        "--newest-queries",
        type=_non_negative,
        default=14,
        help="queries also run once with order='newest', for information (default 14)",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"corpus seed (default {DEFAULT_SEED})")
    return parser.parse_args(argv)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def report_writes(chunks: Sequence[Chunk], turn_size: int, tx_messages: int) -> tuple[float, float]:
    """Print the ceiling and turn-batch figures; return (per-chunk median ratio, CPU-time ratio)."""
    messages = sum(c.messages for c in chunks)
    ceiling = Elapsed(sum(c.ceiling.wall for c in chunks), sum(c.ceiling.cpu for c in chunks))
    store = Elapsed(sum(c.store.wall for c in chunks), sum(c.store.cpu for c in chunks))
    figure(
        "ceiling",
        messages / ceiling.wall,
        "msgs/s",
        f"plain INSERT, one transaction per chunk of about {tx_messages} messages, {len(chunks)} chunks",
    )
    figure("ceiling_cpu", messages / ceiling.cpu, "msgs/CPU-s", "per second of the bench process's CPU time")
    label = "natural turn (2 or 3 messages)" if turn_size == 0 else f"{turn_size} messages"
    figure("append_turn_batch", messages / store.wall, "msgs/s", f"one append_messages call per {label}")
    figure("append_turn_batch_cpu", messages / store.cpu, "msgs/CPU-s")
    figure("append_turn_batch_turns", sum(c.batches for c in chunks) / store.wall, "turns/s", "calls per second")
    ratios = sorted(c.ceiling.wall / c.store.wall for c in chunks)
    median = statistics.median(ratios)
    spread = f"range {ratios[0]:.2f}-{ratios[-1]:.2f}"
    figure("turn_batch_vs_ceiling", f"{median:.3f}", note=f"median of {len(chunks)} per-chunk ratios; {spread}")
    figure("turn_batch_vs_ceiling_overall", f"{ceiling.wall / store.wall:.3f}", note="total time ratio")
    cpu_ratio = ceiling.cpu / store.cpu
    figure("turn_batch_vs_ceiling_cpu", f"{cpu_ratio:.3f}", note="ratio of CPU-time rates")
    first, last = chunks[0], chunks[-1]
    figure("ceiling_first_chunk", first.messages / first.ceiling.wall, "msgs/s", "into an empty database")
    figure("ceiling_last_chunk", last.messages / last.ceiling.wall, "msgs/s", "into the nearly full one")
    figure("append_turn_batch_first_chunk", first.messages / first.store.wall, "msgs/s")
    figure("append_turn_batch_last_chunk", last.messages / last.store.wall, "msgs/s")
    return median, cpu_ratio


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.perf_counter()
    figure("sqlite", apsw.sqlite_lib_version(), note=f"apsw {apsw.apsw_version()}, Python {sys.version.split()[0]}")
    figure("synchronous", args.synchronous)
    figure("load_average_start", _load(), note=f"1, 5, 15 min; {os.cpu_count()} CPUs")
    plan = make_plan(args.messages, args.turn_size, args.concurrent, args.seed)
    content = plan.content_bytes

    with workdir(args.dir) as directory:
        # One message per transaction, on a prefix of the corpus.
        single_path = fresh(directory, "single.db")
        single, count = run_single(single_path, plan, args.synchronous, args.single_tx_messages)
        note = f"first {count} messages, one per append_messages call"
        figure("append_single_tx", count / single.wall, "msgs/s", note)
        figure("append_single_tx_cpu", count / single.cpu, "msgs/CPU-s")
        if args.dir is None:
            fresh(directory, "single.db")

        # The raw APSW ceiling and turn-sized batches through the store, the whole corpus each, interleaved.
        # The store stays open afterwards, as the daemon's writer would, for the size and search figures.
        ceiling_path = fresh(directory, "ceiling.db")
        batch_path = fresh(directory, "store.db")
        ceiling_db = open_connection(ceiling_path, synchronous=args.synchronous)
        with Store.open(batch_path, synchronous=args.synchronous) as store:
            try:
                migrate(ceiling_db)
                chunks = run_paired(ceiling_db, store, plan, args.ceiling_tx)
                ceiling_ratio = checkpointed_size(ceiling_db, ceiling_path) / content
            finally:
                ceiling_db.close()
            if args.dir is None:
                fresh(directory, "ceiling.db")
            vs_ceiling, vs_ceiling_cpu = report_writes(chunks, args.turn_size, args.ceiling_tx)

            # Bytes on disk per byte of content.
            ratio = checkpointed_size(store._connection, batch_path) / content
            figure("bytes_per_content_byte", f"{ratio:.3f}", note=f"{batch_path.stat().st_size / 1e6:.1f} MB file")
            figure("ceiling_bytes_per_content_byte", f"{ceiling_ratio:.3f}")
            report_dbstat(store._connection, content, plan.chinese_bytes)

            # Full-text discovery through a read-only store.
            queries = sample_queries(plan.sessions, args.queries, seed=args.seed)
            hits, errors = run_queries(batch_path, queries, args.newest_queries) if queries else (0, 0)

    total = time.perf_counter() - began
    print("summary:", flush=True)
    _verdict(
        "bytes_per_content_byte",
        ratio,
        ratio <= TARGET_BYTES_PER_CONTENT_BYTE,
        f"<= {TARGET_BYTES_PER_CONTENT_BYTE}; the reference system stores {REFERENCE_BYTES_PER_CONTENT_BYTE}",
    )
    _verdict(
        "turn_batch_vs_ceiling",
        vs_ceiling,
        vs_ceiling >= TARGET_TURN_BATCH_VS_CEILING,
        f">= {TARGET_TURN_BATCH_VS_CEILING}",
    )
    figure("  turn_batch_vs_ceiling_cpu", f"{vs_ceiling_cpu:.3f}", note="for information")
    figure("  fts_hits", f"{hits}/{len(queries)}", "queries", f"{errors} refused")
    figure("  total_runtime", total, "s")
    figure("  load_average_end", _load(), note="another busy process on the machine lowers the wall-clock rates")
    return 0


def _verdict(name: str, value: float, met: bool, target: str) -> None:
    figure(f"  {name}", f"{value:.3f}", note=f"target {target}: {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    sys.exit(main())
