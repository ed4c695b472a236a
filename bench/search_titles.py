"""bench/search.py's title points: discovery's title pass at a given number of sessions (46,000 and 300,000 by
default), on stores of many sessions with one short message each.

Discovery reads the titled sessions matching a query's words first (``SearchReads.titled_sessions``), in activity
order, before it looks at messages; before schema version 14 that read walked every session. These stores keep
the sessions of the big store (sources, start times, compression chains, the same share of titles from
``search.layout``) but give each session one message (a corpus user message, cycled), so 300,000 sessions build
in about a minute. Each store is built once per session count and schema version and reused
(``/tmp/hermes-bench-titles-<sessions>-v<version>.db``), so two checkouts of different schemas each measure
their own.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from corpus import Session, generate_sessions

from hermes_actors.search import session_search
from hermes_actors.store import SCHEMA_VERSION, SessionFilter, Store
from hermes_actors.store.search_query import SearchQuery

__all__ = ["QUERIES", "measure_titles"]

# A word in no title (the whole walk, as for every query whose words are in no title: most of them), a word of
# most messages and of no title, words of many titles (the walk stops at the third match), a prefix, two words, a
# negation and a phrase.
QUERIES = ("zzyzx", "the", "billing", "sqlite*", "deploy docker", "travel NOT garden", '"python recipes"')
CORPUS_MESSAGES = 20_000  # the messages the sessions' single messages are cycled from
SIGNATURE_KEY = "bench.search.titles"
LIMIT = 3  # session_search's default limit


def _path(sessions: int) -> Path:
    return Path(f"/tmp/hermes-bench-titles-{sessions}-v{SCHEMA_VERSION}.db")


def _one_message_sessions(count: int, seed: int) -> list[Session]:
    """``count`` sessions of one user message each, drawn in turn from a small corpus of the same generator."""
    corpus = [session[0][0] for session in generate_sessions(CORPUS_MESSAGES, seed=seed)]
    return [[[corpus[i % len(corpus)]]] for i in range(count)]


def build_titles(sessions: int, seed: int, write: Callable[..., None], layout: Callable[..., object]) -> Path:
    """Build (or reuse) the store of ``sessions`` sessions; its path. ``write`` and ``layout`` are bench/search.py's
    ``_write_session`` and ``layout``, so these sessions are laid out and written as the big store's are."""
    path = _path(sessions)
    signature = f"{sessions}:{seed}"
    if path.exists():
        with Store.open(path, readonly=True) as store:
            found = store.kv.get_meta(SIGNATURE_KEY)
        if found == signature:
            return path
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    started = time.perf_counter()
    corpus = _one_message_sessions(sessions, seed)
    plan = layout(corpus, random.Random(seed ^ 0x7173))
    seen: set[str] = set()
    with Store.open(path, synchronous="OFF") as store:
        for first in range(0, sessions, 5000):
            with store.transaction():
                for index in range(first, min(first + 5000, sessions)):
                    write(store, plan, index, corpus[index], seen)
        store.kv.set_meta(SIGNATURE_KEY, signature)
        store._connection.execute("PRAGMA optimize")
    print(f"  built {path} in {time.perf_counter() - started:.0f} s", flush=True)
    return path


def _percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (as bench/search.py's)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _timed(call: Callable[[], object], repeats: int) -> tuple[float, float]:
    """The median wall-clock and CPU seconds of ``repeats`` calls, after an untimed one."""
    call()
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu)


def _report(name: str, timed: list[tuple[float, float]], note: str, figure: Callable[..., None]) -> float:
    """``name_median`` and ``name_p95`` (wall clock; CPU time in the notes); the p95 in milliseconds."""
    wall, cpu = [w for w, _ in timed], [c for _, c in timed]
    median, p95 = statistics.median(wall) * 1e3, _percentile(wall, 0.95) * 1e3
    figure(f"{name}_median", median, "ms", f"{note}; CPU {statistics.median(cpu) * 1e3:.3g} ms")
    figure(f"{name}_p95", p95, "ms", f"CPU {_percentile(cpu, 0.95) * 1e3:.3g} ms")
    return p95


def _title_pass(store: Store, query: SearchQuery) -> int:
    """Read the title statement as discovery does at its default limit: until three titles match, or to its end
    (the whole walk when fewer match)."""
    rows = store.search_reads().titled_sessions(query, oldest_first=False, scope=SessionFilter())
    return sum(1 for _ in itertools.islice(rows, LIMIT))


def measure_titles(
    sessions: int,
    seed: int,
    repeats: int,
    figure: Callable[..., None],
    write: Callable[..., None],
    layout: Callable[..., object],
) -> float:
    """Print the ``titles_<sessions>_*`` lines; return the discovery p95 in milliseconds."""
    started = time.perf_counter()
    path = build_titles(sessions, seed, write, layout)
    built = time.perf_counter() - started
    with Store.open(path, readonly=True) as store:
        db = store._connection
        titled = int(db.execute("SELECT count(*) FROM sessions WHERE title IS NOT NULL").get or 0)
        has_index = bool(db.execute("SELECT 1 FROM sqlite_schema WHERE name = 'sessions_titled'").fetchall())
        figure(
            f"titles_{sessions}_db",
            sessions,
            "sessions",
            f"{titled} titled, schema {SCHEMA_VERSION}, sessions_titled index {'present' if has_index else 'absent'}, "
            f"ready in {built:.0f} s",
        )
        passes: list[tuple[float, float]] = []
        searches: list[tuple[float, float]] = []
        reads = store.search_reads()
        for text in QUERIES:
            query = reads.parse_query(text)
            assert isinstance(query, SearchQuery), text
            passes.append(_timed(functools.partial(_title_pass, store, query), repeats))
            searches.append(_timed(functools.partial(session_search, store, query=text), repeats))
    note = f"{len(QUERIES)} queries, median of {repeats} runs each"
    _report(f"titles_{sessions}_pass", passes, f"the title statement, {note}", figure)
    return _report(f"titles_{sessions}_discovery", searches, f"session_search, {note}", figure)
