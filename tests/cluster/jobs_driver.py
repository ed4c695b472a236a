"""The Ray side of the cluster's scheduled-turn test, run as ``python -m tests.cluster.jobs_driver DSN`` inside a
network namespace of its own (``tests/cluster/raylab.py``).

Two shard hosts on a local Ray fire jobs by scanning their shards. One-shot jobs fall due every half second from
2 s on, beside an interval job every second; at 3.5 s the host holding most of them is killed with -9 (Ray restarts
its worker; its shards go to the other host after their term and the grace period, or back to it). Once every
one-shot job is done and nothing is pending, it prints one JSON line: each job's runs, skips and state, the inbox
rows of its runs, and how many user messages and replies each prompt has in the transcripts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from typing import Any

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_AUTH_MODE"] = "disabled"  # nothing outside this network namespace can reach it; no token in $HOME

import ray

from hermes_actors.cluster.host.ray_host import ensure_hosts
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.job_runs import ShardRuns
from hermes_actors.job_port import JobSpec
from hermes_actors.routing import KeyPolicy
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_book import NoHooks, StoreJobs
from hermes_actors.runtime.store_access import DirectAccess
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import shard_of
from tests.cluster.ray_driver import _start_ray, _wait

HOSTS = ("j0", "j1")
SHARDS = 16
ONCE = 12  # one-shot jobs, due 2 s, 2.5 s, ... 7.5 s from the start
KILL_AT_S = 3.5


def _settings(dsn: str, name: str) -> HostSettings:
    return HostSettings(
        name=name,
        postgres_dsn=dsn,
        hosts=HOSTS,
        shards=SHARDS,
        lease_ttl_s=3.0,
        grace_s=1.0,
        pull_interval_s=0.25,
        job_scan_s=0.25,
    )


def _facts(pg: PostgresStore) -> dict[str, Any]:
    runs: dict[str, list[str]] = {}
    for message_id, state in pg.database.execute("SELECT platform_message_id, state FROM inbox ORDER BY id"):
        if str(message_id).startswith("job-"):
            runs.setdefault(str(message_id).split("-")[1], []).append(str(state))
    said: dict[str, dict[str, int]] = {"user": {}, "assistant": {}}
    for role, content in pg.database.execute("SELECT role, content FROM messages WHERE role IN ('user', 'assistant')"):
        counts = said[str(role)]
        counts[str(content)] = counts.get(str(content), 0) + 1
    jobs = {
        row.id: {"prompt": row.prompt, "runs": row.runs, "skipped": row.skipped, "state": row.state.value}
        for row in pg.jobs.listed(limit=1000)
    }
    pending = int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'"))
    return {"jobs": jobs, "runs": runs, "said": said, "pending": pending}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    args = parser.parse_args()
    _start_ray(tempfile.mkdtemp(prefix="hermes-ray-"))
    handles = ensure_hosts([_settings(args.dsn, name) for name in HOSTS])
    pids = {name: ray.get(handle.pid.remote(), timeout=60) for name, handle in handles.items()}
    events: list[str] = []
    with PostgresStore.open(args.dsn, migrate_schema=False) as pg:
        _wait(lambda: all(ray.get(h.status.remote()).shards for h in handles.values()), 30, "both hosts holding shards")
        book = StoreJobs(
            DirectAccess(pg), hooks=NoHooks(), queue=ShardRuns(pg, SHARDS), policy=KeyPolicy(), events=Events()
        )
        started = time.monotonic()
        once = [
            book.add(JobSpec(prompt=f"once {n}", in_=f"{2 + n * 0.5}s", chat=f"fake:chat-{n}")).id for n in range(ONCE)
        ]
        ticker = book.add(JobSpec(prompt="tick", every="1s", chat="fake:ticker")).id
        held = {name: set(ray.get(h.status.remote()).shards) for name, h in handles.items()}
        victim = max(HOSTS, key=lambda name: sum(shard_of(job, SHARDS) in held[name] for job in once))
        time.sleep(max(0.0, started + KILL_AT_S - time.monotonic()))
        os.kill(pids[victim], signal.SIGKILL)
        events.append(f"{time.monotonic() - started:.1f}s kill -9 {victim} (pid {pids[victim]})")

        def settled() -> bool:
            facts = _facts(pg)
            return facts["pending"] == 0 and all(facts["jobs"][job]["state"] == "done" for job in once)

        _wait(settled, 60, "every one-shot job run and answered")
        events.append(f"{time.monotonic() - started:.1f}s one-shot jobs done")
        book.pause(ticker)
        _wait(lambda: _facts(pg)["pending"] == 0, 30, "the ticker's last run answered")
        restarted = ray.get(handles[victim].pid.remote(), timeout=60) != pids[victim]
        facts = _facts(pg)
    for handle in handles.values():
        ray.kill(handle)
    ray.shutdown()
    print(json.dumps({**facts, "once": once, "ticker": ticker, "events": events, "restarted": restarted}))


if __name__ == "__main__":
    main()
