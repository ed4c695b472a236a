"""``sessions list`` at scale: one row per conversation (``Store.list_lineages``) against one row per segment.

Builds a store of ``--lineages`` conversations, each of 1 to ``--max-segments`` segments (compression children of
the one before), with a few messages per segment, then times, as medians of ``--repeats`` runs each: the default
page of 20 conversations, every conversation, a source-filtered page, and the segment listing it replaced
(``list_sessions``, 20 rows). Prints one ``name: value unit`` line per figure; bench/README.md explains them.
A plain script, not a test.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run from a checkout without installing: the repository root goes first, so the working tree is measured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_actors.store import EndReason, NewMessage, Role, Store

SOURCES = ("cli", "telegram", "slack", "discord")


def figure(name: str, value: float | int, unit: str = "", note: str = "") -> None:
    text = f"{value:.2f}" if isinstance(value, float) else str(value)
    print(f"{name}: {text}" + (f" {unit}" if unit else "") + (f" ({note})" if note else ""), flush=True)


def build(store: Store, lineages: int, max_segments: int, rng: random.Random) -> int:
    """Fill ``store``; return how many sessions it holds."""
    sessions = 0
    with store.transaction():
        for n in range(lineages):
            source = SOURCES[n % len(SOURCES)]
            parent: str | None = None
            for segment in range(rng.randint(1, max_segments)):
                title = f"conversation {n}" + (f" #{segment + 1}" if segment else "")
                record = store.create_session(source, title=title, parent_session_id=parent)
                store.append_messages(
                    record.id,
                    [
                        NewMessage(role=Role.USER, content=f"question {segment} of conversation {n}"),
                        NewMessage(role=Role.ASSISTANT, content=f"answer {segment}"),
                    ],
                )
                parent = record.id
                sessions += 1
                store.end_session(record.id, EndReason.COMPRESSION)
            assert parent is not None  # at least one segment
            store.reopen_session(parent)  # the tip is live
    return sessions


def median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lineages", type=int, default=4000, help="conversations in the store")
    parser.add_argument("--max-segments", type=int, default=5, help="most segments per conversation")
    parser.add_argument("--repeats", type=int, default=7, help="runs of each timing (the median is printed)")
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="hermes-listing-") as directory,
        Store.open(Path(directory) / "state.db") as store,
    ):
        sessions = build(store, args.lineages, args.max_segments, random.Random(args.seed))
        figure("sessions", sessions, note=f"in {args.lineages} conversations of 1 to {args.max_segments} segments")
        page = store.list_lineages(limit=20)
        if len(page.rows) != 20 or page.total != args.lineages:
            raise SystemExit(f"the listing is wrong: {len(page.rows)} rows of {page.total}, not 20 of {args.lineages}")
        timings: list[tuple[str, Callable[[], object], str]] = [
            ("lineage_page_ms", lambda: store.list_lineages(limit=20), "the default 'sessions list': 20 and the total"),
            ("lineage_all_ms", lambda: store.list_lineages(limit=None), f"all {args.lineages} conversations"),
            ("lineage_source_page_ms", lambda: store.list_lineages(source="telegram", limit=20), "one source"),
            ("segment_page_ms", lambda: store.list_sessions(limit=20), "list_sessions: 20 segments, as before"),
        ]
        for name, run, note in timings:
            figure(name, median_ms(run, args.repeats), "ms", note)
    figure("load_average_end", round(os.getloadavg()[0], 2))


if __name__ == "__main__":
    main()
