"""session_search latency on a large synthetic store: discovery by query kind and term frequency, and scroll.

Builds (or reuses, when ``--db`` already holds a database built with the same options) a store of
``--messages`` messages from ``bench/corpus.py`` with compression chains, titles, rare planted terms and one very
common term, then times ``hermes_actors.search.session_search`` on a read-only connection; first, the title
points of ``bench/search_titles.py`` (discovery's title pass at 46,000 and 300,000 sessions). Prints one
``name: value unit`` line per figure and a summary against the targets; bench/README.md explains every line. A
plain script, not a test: pytest does not collect it. ``HERMES_BENCH_CODE=DIR`` measures the package of the
checkout at ``DIR``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import random
import statistics
import string
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Run from a checkout without installing: the repository root goes first, so the working tree is measured (or the
# checkout HERMES_BENCH_CODE names).
sys.path.insert(0, os.environ.get("HERMES_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

from corpus import DEFAULT_SEED, Session, generate_sessions, is_chinese, iter_messages, sample_queries
from report import figure_line
from search_titles import measure_titles

from hermes_actors.search import SearchResult, Sort, session_search
from hermes_actors.store import EndReason, NewMessage, Role, Store

TARGET_DISCOVERY_MEDIAN_MS = 20.0
TARGET_DISCOVERY_P95_MS = 50.0
TARGET_SCROLL_MS = 2.0
BUILD_VERSION = "2"  # bump when the database layout below changes, so cached databases are rebuilt
META_KEY = "bench.search"
SOURCES = ("telegram", "slack", "discord", "whatsapp", "cli", "api_server")
START_TIME = 1_780_000_000.0  # 2026-05-28: sessions follow each other from here
SESSION_SPACING_S = 120.0
MESSAGE_SPACING_S = 20.0
SESSIONS_PER_TRANSACTION = 2000

COMMON_WORD = "hermes"  # planted in about 10% of all messages (English ones)
COMMON_PHRASE = "hermes recall"  # half of those plantings are this phrase
COMMON_CJK = "会话记录"  # planted in about 40% of the Chinese messages: 10% of all messages
COMMON_SHARE = 0.10
CHINESE_SHARE = 0.25
RARE_WORDS = 120  # planted English words, each in 1-20 messages
RARE_CJK_WORDS = 120  # planted four-character Chinese words of characters the corpus never uses
RARE_MAX_COPIES = 20
CHAIN_SHARE = 0.03  # sessions that start a compression chain
TITLE_SHARE = 0.04  # sessions with a title (chains title every link)
RARE_CJK_FIRST = 0x8000  # rare characters are taken from here up, skipping any the corpus uses


def figure(name: str, value: float | int | str, unit: str = "", note: str = "") -> None:
    """Print one figure as ``name: value unit (note)``."""
    print(figure_line(name, value, unit, note), flush=True)


# -- building the database ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planted:
    """What the build planted, kept in the database's meta table so a reused database can be queried alike."""

    rare_words: list[str]
    rare_cjk: list[str]
    chains: int
    titled: int

    def encode(self) -> str:
        return json.dumps(
            {"rare_words": self.rare_words, "rare_cjk": self.rare_cjk, "chains": self.chains, "titled": self.titled}
        )

    @staticmethod
    def decode(text: str) -> Planted:
        data = json.loads(text)
        return Planted(
            rare_words=list(data["rare_words"]),
            rare_cjk=list(data["rare_cjk"]),
            chains=int(data["chains"]),
            titled=int(data["titled"]),
        )


def _signature(messages: int, seed: int) -> str:
    return json.dumps({"version": BUILD_VERSION, "messages": messages, "seed": seed})


def _rare_words(rng: random.Random, count: int) -> list[str]:
    """Made-up words no corpus word starts like (``vq`` + six letters), so a five-letter prefix finds one."""
    words: set[str] = set()
    while len(words) < count:
        words.add("vq" + "".join(rng.choices(string.ascii_lowercase, k=6)))
    return sorted(words)


def _rare_cjk(count: int, used: set[str]) -> list[str]:
    """Four-character words of distinct characters the corpus never uses."""
    unused = (chr(c) for c in range(RARE_CJK_FIRST, 0xA000) if chr(c) not in used)
    return ["".join(next(unused) for _ in range(4)) for _ in range(count)]


def _plant_word(rng: random.Random, content: str, word: str) -> str:
    """Put ``word`` between two words (English) or two characters (Chinese) of ``content``."""
    if is_chinese(content):
        at = rng.randrange(len(content) + 1)
        return content[:at] + word + content[at:]
    spaces = [i for i, c in enumerate(content) if c == " "]
    if not spaces:
        return f"{content} {word}"
    at = rng.choice(spaces)
    return f"{content[:at]} {word}{content[at:]}"


def plant(sessions: list[Session], rng: random.Random) -> tuple[list[str], list[str]]:
    """Plant the common terms and the rare ones into the corpus, in place; return the rare words planted."""
    english_share = COMMON_SHARE / (1 - CHINESE_SHARE)
    chinese_share = COMMON_SHARE / CHINESE_SHARE
    english: list[tuple[int, int, int]] = []
    chinese: list[tuple[int, int, int]] = []
    for s, session in enumerate(sessions):
        for t, turn in enumerate(session):
            for m, (role, content) in enumerate(turn):
                chosen = is_chinese(content)
                (chinese if chosen else english).append((s, t, m))
                if rng.random() < (chinese_share if chosen else english_share):
                    term = COMMON_CJK if chosen else COMMON_PHRASE if rng.random() < 0.5 else COMMON_WORD
                    turn[m] = (role, _plant_word(rng, content, term))
    used: set[str] = set()
    for s, t, m in chinese:
        used.update(sessions[s][t][m][1])
    rare_words = _rare_words(rng, RARE_WORDS)
    rare_cjk = _rare_cjk(RARE_CJK_WORDS, used)
    for words, places in ((rare_words, english), (rare_cjk, chinese)):
        if not places:
            continue
        for word in words:
            for s, t, m in rng.sample(places, min(len(places), rng.randint(1, RARE_MAX_COPIES))):
                role, content = sessions[s][t][m]
                sessions[s][t][m] = (role, _plant_word(rng, content, word))
    return rare_words, rare_cjk


def _session_id(index: int, started_at: float) -> str:
    return time.strftime("%Y%m%d_%H%M%S", time.gmtime(started_at)) + f"_{(index * 2654435761) % 2**32:08x}"


def _title_words(rng: random.Random) -> str:
    topics = ("deploy", "docker", "python", "billing", "travel", "recipes", "garden", "sqlite", "gateway", "notes")
    return f"{rng.choice(topics)} {rng.choice(topics)} {rng.randrange(10**6)}"


@dataclass
class Layout:
    """Per session: id, source, start time, parent (a compression chain) and title."""

    ids: list[str]
    sources: list[str]
    started: list[float]
    parents: list[str | None]
    titles: list[str | None]
    chains: int


def layout(sessions: Sequence[Session], rng: random.Random) -> Layout:
    """Lay sessions out in time; link runs of 2-5 consecutive sessions into compression chains; title some."""
    count = len(sessions)
    started = [START_TIME + i * SESSION_SPACING_S for i in range(count)]
    ids = [_session_id(i, started[i]) for i in range(count)]
    parents: list[str | None] = [None] * count
    titles: list[str | None] = [None] * count
    chains = 0
    index = 0
    while index < count:
        if rng.random() < CHAIN_SHARE:
            length = min(rng.randint(2, 5), count - index)
            base = _title_words(rng)
            for k in range(length):
                titles[index + k] = base if k == 0 else f"{base} #{k + 1}"
                if k:
                    parents[index + k] = ids[index + k - 1]
            chains += 1
            index += length
            continue
        if rng.random() < TITLE_SHARE:
            titles[index] = _title_words(rng)
        index += 1
    return Layout(
        ids=ids,
        sources=[SOURCES[i % len(SOURCES)] for i in range(count)],
        started=started,
        parents=parents,
        titles=titles,
        chains=chains,
    )


def build(path: Path, messages: int, seed: int) -> Planted:
    """Write the bench database at ``path`` (any old one is removed first); return what was planted."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sessions = generate_sessions(messages, seed=seed)
    rng = random.Random(seed ^ 0x5EA2C4)
    rare_words, rare_cjk = plant(sessions, rng)
    plan = layout(sessions, rng)
    figure("build_corpus", time.perf_counter() - started, "s", f"{len(sessions)} sessions, {plan.chains} chains")
    titled = sum(t is not None for t in plan.titles)
    seen_titles: set[str] = set()
    with Store.open(path, synchronous="OFF") as store:
        for first in range(0, len(sessions), SESSIONS_PER_TRANSACTION):
            with store.transaction():
                for index in range(first, min(first + SESSIONS_PER_TRANSACTION, len(sessions))):
                    _write_session(store, plan, index, sessions[index], seen_titles)
            done = min(first + SESSIONS_PER_TRANSACTION, len(sessions))
            if done % (SESSIONS_PER_TRANSACTION * 10) == 0 or done == len(sessions):
                print(f"  built {done}/{len(sessions)} sessions, {time.perf_counter() - started:.0f} s", flush=True)
        planted = Planted(rare_words=rare_words, rare_cjk=rare_cjk, chains=plan.chains, titled=titled)
        store.kv.set_meta(META_KEY, _signature(messages, seed))
        store.kv.set_meta(META_KEY + ".planted", planted.encode())
        store._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store._connection.execute("PRAGMA optimize")
    figure("build_total", time.perf_counter() - started, "s", f"{os.path.getsize(path) / 1e6:.0f} MB database")
    return planted


def _write_session(store: Store, plan: Layout, index: int, session: Session, seen_titles: set[str]) -> None:
    title = plan.titles[index]
    if title is not None and title in seen_titles:
        title = None
    if title is not None:
        seen_titles.add(title)
    at = plan.started[index]
    store.create_session(
        plan.sources[index],
        session_id=plan.ids[index],
        title=title,
        parent_session_id=plan.parents[index],
        started_at=at,
    )
    batch = [
        NewMessage(role=Role(role), content=content, created_at=at + k * MESSAGE_SPACING_S)
        for k, (role, content) in enumerate(iter_messages([session]))
    ]
    store.append_messages(plan.ids[index], batch, at=at + len(batch) * MESSAGE_SPACING_S)
    is_parent = index + 1 < len(plan.parents) and plan.parents[index + 1] == plan.ids[index]
    if is_parent:
        store.end_session(plan.ids[index], EndReason.COMPRESSION, at=at + len(batch) * MESSAGE_SPACING_S)
    elif index < len(plan.ids) - 500:  # the newest sessions stay live
        store.end_session(plan.ids[index], EndReason.IDLE, at=at + len(batch) * MESSAGE_SPACING_S + 1)


def open_or_build(path: Path, messages: int, seed: int) -> Planted:
    """Reuse ``path`` when it was built with the same options; build it otherwise."""
    if path.exists():
        with Store.open(path, readonly=True) as store:
            try:
                signature = store.kv.get_meta(META_KEY)
                planted = store.kv.get_meta(META_KEY + ".planted")
            except Exception:  # not a bench database (no meta table): rebuild it
                signature = planted = None
        if signature == _signature(messages, seed) and planted is not None:
            figure("build", "reused", note=str(path))
            Store.open(path).close()  # migrated to this checkout's schema, as hermesd would
            return Planted.decode(planted)
    return build(path, messages, seed)


# -- the query set -----------------------------------------------------------------------------------------------

RARE_PER_KIND = 5  # as many as common queries per kind, so the overall figures weigh both alike
_W, _P, _C = COMMON_WORD, COMMON_PHRASE, COMMON_CJK
COMMON_QUERIES: dict[str, list[str]] = {
    "en_word": [_W, _W.title(), _W.upper(), "recall", "Recall"],
    "en_and": [f"{_W} AND the", _P, f"{_W} AND redis", "recall AND the", f"{_W} AND of"],
    "en_or": [f"{_W} OR nginx", "recall OR redis", f"{_W} OR recall", f"{_W} OR the", "recall OR nginx"],
    "en_not": [f"{_W} NOT recall", f"{_W} NOT the", "recall NOT redis", f"{_W} NOT nginx", f"recall NOT {_W}"],
    "en_phrase": [f'"{_P}"', f'"{_P}" the', f'"{_P}" OR nginx', f'"{_P.upper()}"', f'"{_P}" NOT redis'],
    "en_prefix": [_W[:4] + "*", "reca*", f"{_W} rec*", f"{_W} recal*", _W[:4].title() + "*"],
    "zh_1": [_C[0], _C[1], _C[2], _C[3], f"{_C[0]} {_C[3]}"],
    "zh_2": [_C[:2], _C[1:3], _C[2:], f"{_C[:2]} {_C[2:]}", f"{_C[2:]} {_C[:2]}"],
    "zh_4": [_C, _C[1:], _C[:3], f"{_C} {_C[:3]}", f"{_C} {_C[1:]}"],
}
KINDS = list(COMMON_QUERIES)


def _next_word(store: Store, word: str) -> str | None:
    """The word after ``word`` in a message holding it, for a rare two-word phrase."""
    result = store.fts_query(word, limit=5)
    for hit in result.hits:
        content = str(store._connection.execute("SELECT content FROM messages WHERE id = ?", (hit.message_id,)).get)
        words = [w.strip(".,?!:—") for w in content.split()]
        for first, second in itertools.pairwise(words):
            if first == word and second.isalpha():
                return second
    return None


def rare_queries(store: Store, planted: Planted, rng: random.Random) -> dict[str, list[str]]:
    """Queries whose terms match at most a few dozen messages: planted words and characters."""
    words = rng.sample(planted.rare_words, 2 * RARE_PER_KIND)
    cjk = rng.sample(planted.rare_cjk, RARE_PER_KIND)
    phrases = [f'"{w} {n}"' for w in words if (n := _next_word(store, w)) is not None][:RARE_PER_KIND]
    return {
        "en_word": words[:RARE_PER_KIND],
        "en_and": [f"{w} AND the" for w in words[:RARE_PER_KIND]],
        "en_or": [f"{a} OR {b}" for a, b in zip(words[:RARE_PER_KIND], words[RARE_PER_KIND:], strict=True)],
        "en_not": [f"{w} NOT docker" for w in words[:RARE_PER_KIND]],
        "en_phrase": phrases,
        "en_prefix": [w[:5] + "*" for w in words[:RARE_PER_KIND]],
        "zh_1": [w[0] for w in cjk],
        "zh_2": [w[:2] for w in cjk],
        "zh_4": cjk,
    }


def typical_queries(messages: int, seed: int) -> dict[str, list[str]]:
    """For information: queries drawn from a small corpus of the same generator (store.py's query kinds)."""
    sample = sample_queries(generate_sessions(min(messages, 20_000), seed=seed), 70, seed=seed)
    out: dict[str, list[str]] = {}
    for kind, query in sample:
        out.setdefault(kind, []).append(query)
    return out


# -- measuring ---------------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def time_call(call: Callable[[], SearchResult], repeats: int) -> tuple[float, float, SearchResult]:
    """The median wall-clock and CPU seconds of ``repeats`` calls (after an untimed one), and the last result."""
    wall: list[float] = []
    cpu: list[float] = []
    result = call()
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = call()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu), result


@dataclass
class Tally:
    """Latencies (seconds) and outcomes of one group of queries."""

    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    with_hits: int = 0
    errors: int = 0


def run_discovery(
    store: Store, groups: dict[tuple[str, str], list[str]], repeats: int, sort: Sort = "relevance"
) -> dict[tuple[str, str], Tally]:
    """Time each query ``repeats`` times (after one untimed run); keep the median per query."""
    tallies: dict[tuple[str, str], Tally] = {}
    for key, queries in groups.items():
        tally = tallies.setdefault(key, Tally())
        for query in queries:
            seconds, cpu, result = time_call(functools.partial(session_search, store, query=query, sort=sort), repeats)
            tally.seconds.append(seconds)
            tally.cpu.append(cpu)
            tally.with_hits += bool(result.hits)
            if result.error is not None:
                tally.errors += 1
                figure("discovery_error", repr(query), note=result.error)
    return tallies


def report_tallies(prefix: str, tallies: dict[tuple[str, str], Tally]) -> tuple[list[float], list[float]]:
    """One line per group (wall-clock median, with p95 and the CPU median in the note); all wall and CPU times."""
    every: list[float] = []
    every_cpu: list[float] = []
    for (kind, frequency), tally in tallies.items():
        if not tally.seconds:
            continue
        every += tally.seconds
        every_cpu += tally.cpu
        figure(
            f"{prefix}_{kind}_{frequency}",
            statistics.median(tally.seconds) * 1e3,
            "ms",
            f"p95 {percentile(tally.seconds, 0.95) * 1e3:.2f} ms, CPU {statistics.median(tally.cpu) * 1e3:.2f} ms, "
            f"{len(tally.seconds)} queries, {tally.with_hits} with hits"
            + (f", {tally.errors} refused" if tally.errors else ""),
        )
    return every, every_cpu


def report_spread(name: str, wall: Sequence[float], cpu: Sequence[float], note: str = "") -> None:
    """``name_median``, ``name_p95`` (wall clock) and ``name_cpu_median``, ``name_cpu_p95`` (CPU time)."""
    figure(f"{name}_median", statistics.median(wall) * 1e3, "ms", note or f"{len(wall)} queries")
    figure(f"{name}_p95", percentile(wall, 0.95) * 1e3, "ms")
    figure(f"{name}_cpu_median", statistics.median(cpu) * 1e3, "ms", "CPU time of this process")
    figure(f"{name}_cpu_p95", percentile(cpu, 0.95) * 1e3, "ms")


def run_scroll(store: Store, count: int, repeats: int, rng: random.Random) -> tuple[list[float], list[float]]:
    """Scroll around ``count`` random messages and read their sessions; the median seconds of each."""
    top = int(store._connection.execute("SELECT max(id) FROM messages").get or 0)
    scrolls: list[float] = []
    reads: list[float] = []
    for _ in range(count):
        row = store._connection.execute(
            "SELECT m.id, s.id FROM messages AS m JOIN sessions AS s ON s.ref = m.session_ref WHERE m.id >= ? LIMIT 1",
            (rng.randint(1, top),),
        ).fetchone()
        if row is None:
            continue
        mid, sid = int(row[0]), str(row[1])
        scroll = functools.partial(session_search, store, session_id=sid, around_message_id=mid)
        seconds, _, result = time_call(scroll, repeats)
        assert result.ok, result.error
        scrolls.append(seconds)
        reads.append(time_call(functools.partial(session_search, store, session_id=sid), repeats)[0])
    return scrolls, reads


def describe(store: Store, planted: Planted) -> None:
    """The ``db_*`` lines: what the store holds."""
    db = store._connection
    messages = int(db.execute("SELECT count(*) FROM messages").get or 0)
    sessions = int(db.execute("SELECT count(*) FROM sessions").get or 0)
    figure("db_messages", messages, "messages", f"{sessions} sessions, {planted.chains} compression chains")
    figure("db_titled_sessions", planted.titled, "sessions")
    count = int(db.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (COMMON_WORD,)).get or 0)
    figure("db_common_term_share", 100.0 * count / max(1, messages), "%", f"messages holding {COMMON_WORD!r}")
    cjk = int(db.execute("SELECT count(*) FROM messages_fts_cjk_docsize").get or 0)
    figure("db_chinese_share", 100.0 * cjk / max(1, messages), "%", "messages in the trigram index")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    path = Path(args.db or f"/tmp/hermes-bench-search-{args.messages}.db")
    figure("load_average_start", " ".join(f"{x:.2f}" for x in os.getloadavg()), note="1, 5, 15 min")
    title_points = [
        (count, measure_titles(count, args.seed, args.repeats, figure, _write_session, layout))
        for count in args.title_sessions
        if args.only != "corpus"
    ]
    if args.only == "titles":
        _summary(started, title_points, None)
        return 0
    planted = open_or_build(path, args.messages, args.seed)
    rng = random.Random(args.seed ^ 0x5E4C)
    with Store.open(path, readonly=True) as store:
        describe(store, planted)
        groups: dict[tuple[str, str], list[str]] = {}
        rare = rare_queries(store, planted, rng)
        for kind in KINDS:
            groups[(kind, "rare")] = rare[kind]
            groups[(kind, "common")] = COMMON_QUERIES[kind]
        titles = {("title", "common"): ["billing", "garden", "sqlite*"]}
        run_discovery(store, groups, 1)  # warm the page cache
        tallies = run_discovery(store, groups, args.repeats)
        every, every_cpu = report_tallies("discovery", tallies)
        for frequency in ("rare", "common"):
            chosen = [t for (_, f), t in tallies.items() if f == frequency]
            report_spread(
                f"discovery_{frequency}", [x for t in chosen for x in t.seconds], [x for t in chosen for x in t.cpu]
            )
        note = f"{len(every)} queries, relevance, limit 3, median of {args.repeats} runs each"
        report_spread("discovery", every, every_cpu, note)
        figure("discovery_max", max(every) * 1e3, "ms")
        report_tallies("discovery", run_discovery(store, titles, args.repeats))
        newest = run_discovery(store, groups, args.repeats, sort="newest").values()
        report_spread(
            "discovery_newest",
            [x for t in newest for x in t.seconds],
            [x for t in newest for x in t.cpu],
            "the same queries, sort=newest",
        )
        typical = {(k, "typical"): q for k, q in typical_queries(args.messages, args.seed).items()}
        usual, usual_cpu = report_tallies("discovery", run_discovery(store, typical, args.repeats))
        report_spread("discovery_typical", usual, usual_cpu)
        scrolls, reads = run_scroll(store, args.scrolls, args.repeats, rng)
        figure("scroll_median", statistics.median(scrolls) * 1e3, "ms", f"{len(scrolls)} random messages, window 5")
        figure("scroll_p95", percentile(scrolls, 0.95) * 1e3, "ms")
        figure("read_median", statistics.median(reads) * 1e3, "ms", "the sessions of those messages")
        figure("read_p95", percentile(reads, 0.95) * 1e3, "ms")
    _summary(
        started,
        title_points,
        (
            ("discovery_median", statistics.median(every) * 1e3, TARGET_DISCOVERY_MEDIAN_MS),
            ("discovery_p95", percentile(every, 0.95) * 1e3, TARGET_DISCOVERY_P95_MS),
            ("discovery_cpu_median", statistics.median(every_cpu) * 1e3, TARGET_DISCOVERY_MEDIAN_MS),
            ("discovery_cpu_p95", percentile(every_cpu, 0.95) * 1e3, TARGET_DISCOVERY_P95_MS),
            ("scroll_median", statistics.median(scrolls) * 1e3, TARGET_SCROLL_MS),
        ),
    )
    return 0


def _summary(
    started: float, titles: list[tuple[int, float]], targets: Sequence[tuple[str, float, float]] | None
) -> None:
    """The ``summary:`` lines: each target met or MISSED, the runtime and the load."""
    print("summary:")
    title_targets = [(f"titles_{count}_discovery_p95", p95, TARGET_DISCOVERY_P95_MS) for count, p95 in titles]
    for name, value, target in [*(targets or ()), *title_targets]:
        print(f"  {name}: {value:.3g} ms (target <= {target:g}: {'met' if value <= target else 'MISSED'})")
    print(f"  total_runtime: {time.perf_counter() - started:.0f} s")
    print(f"  load_average_end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _counts(text: str) -> list[int]:
    return [_positive(part) for part in text.split(",") if part.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=_positive, default=1_000_000, help="corpus size (default 1000000)")
    parser.add_argument("--db", help="the database to build or reuse (default /tmp/hermes-bench-search-<messages>.db)")
    parser.add_argument("--repeats", type=_positive, default=5, help="timed runs per query (default 5)")
    parser.add_argument("--scrolls", type=_positive, default=200, help="random scroll anchors (default 200)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"corpus seed (default {DEFAULT_SEED})")
    parser.add_argument(
        "--title-sessions",
        type=_counts,
        default=[46_000, 300_000],
        help="session counts of the title points, comma-separated; empty for none (default 46000,300000)",
    )
    parser.add_argument(
        "--only",
        choices=("corpus", "titles"),
        help="measure only the big store (corpus) or only the title points (titles); default both",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
