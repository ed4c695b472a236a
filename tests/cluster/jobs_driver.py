"""The Ray side of the cluster's scheduled-turn and approval test, run as ``python -m tests.cluster.jobs_driver DSN``
inside a network namespace of its own (``tests/cluster/raylab.py``).

Two shard hosts on a local Ray fire jobs by scanning their shards. One-shot jobs fall due every half second from
2 s on, beside an interval job every second; at 3.5 s the host holding most of them is killed with -9 (Ray restarts
its worker; its shards go to the other host after their term and the grace period, or back to it). Before the kill,
two chats of that host's shards ask for a ``deploy`` that needs approval (``tests/cluster/ledger_agent.py``) and
their turns pause: once Ray has restarted the host and the first chat's shard has a new term, that chat's user
approves through the ingress; nobody answers the second, whose deadline (``APPROVAL_TIMEOUT_S``) passes after the
failover. Once every one-shot job is done, both requests are resumed and nothing is pending, it prints one JSON
line: each job's runs, skips and state, the inbox rows of its runs, how many user messages and replies each prompt
has in the transcripts, and each request's state, denials, replies and the processes that ran its call.
"""

from __future__ import annotations

import argparse
import functools
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
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.job_port import JobSpec
from hermes_actors.lifecycle.approvals import TIMEOUT_PREFIX
from hermes_actors.messages import decode_outbound
from hermes_actors.routing import KeyPolicy, SessionSource, build_session_key
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.job_book import NoHooks, StoreJobs
from hermes_actors.runtime.store_access import DirectAccess
from hermes_actors.store.pg import PostgresStore
from hermes_actors.store.pg.shards import shard_of
from hermes_actors.testing import FakePlatform
from tests.cluster.ledger_agent import ledger_agent, ledger_runs
from tests.cluster.ray_driver import _start_ray, _wait

HOSTS = ("j0", "j1")
SHARDS = 16
ONCE = 12  # one-shot jobs, due 2 s, 2.5 s, ... 7.5 s from the start
KILL_AT_S = 3.5
APPROVAL_TIMEOUT_S = 15.0  # past the failover (the terms' 3 s and the grace period after the kill)


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


def _chat_in(shards: set[int], tag: str) -> str:
    """A chat id of the fake platform whose sessions' shard is one of ``shards``."""
    for n in range(10_000):
        chat_id = f"{tag}-{n}"
        key = build_session_key(SessionSource(platform="fake", chat_id=chat_id, user_id="u"), KeyPolicy())
        if shard_of(key, SHARDS) in shards:
            return chat_id
    raise SystemExit(f"no chat id lands in shards {sorted(shards)}")


def _approval(pg: PostgresStore, message_id: str, chat_id: str, ledger: str) -> dict[str, Any]:
    """What became of the request the turn of ``message_id`` (in ``chat_id``) asked."""
    rows = pg.approvals.of_message(message_id)
    if len(rows) != 1:
        return {"requests": len(rows)}
    (row,) = rows
    denials = pg.database.value(
        "SELECT count(*) FROM inbox WHERE platform_message_id = %s", (f"{TIMEOUT_PREFIX}{row.id}",)
    )
    replies = pg.database.execute("SELECT payload FROM outbox WHERE chat_id = %s ORDER BY id", (chat_id,))
    return {
        "requests": 1,
        "id": row.id,
        "state": row.state.value,
        "decided_by": row.decided_by,
        "resumed": row.resumed_at is not None,
        "denials": int(denials),
        "replies": [decode_outbound(bytes(payload)).text for (payload,) in replies],
        "ran_in": ledger_runs(ledger).get(chat_id, []),
    }


def _pid(handle: Any) -> int | None:
    """The pid of a host's worker, or ``None`` while Ray has not restarted it yet."""
    try:
        return int(ray.get(handle.pid.remote(), timeout=60))
    except ray.exceptions.RayError:
        return None


def _new_term(pg: PostgresStore, shard: int, epoch: int) -> bool:
    """Whether ``shard`` is held under a term newer than ``epoch``."""
    return any(
        lease.shard == shard and lease.epoch > epoch and lease.holder and lease.remaining_s > 0
        for lease in pg.shards.leases()
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    args = parser.parse_args()
    _start_ray(tempfile.mkdtemp(prefix="hermes-ray-"))
    ledger = os.path.join(tempfile.mkdtemp(prefix="hermes-ledger-"), "deploys")
    factory = functools.partial(ledger_agent, ledger, APPROVAL_TIMEOUT_S)
    handles = ensure_hosts([_settings(args.dsn, name) for name in HOSTS], agent_factory=factory)
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
        terms = {name: dict(ray.get(h.status.remote()).shards) for name, h in handles.items()}
        held = {name: set(shards) for name, shards in terms.items()}
        victim = max(HOSTS, key=lambda name: sum(shard_of(job, SHARDS) in held[name] for job in once))
        # Two turns paused on the victim: one approved after the failover, one nobody answers.
        ingress, chat = ClusterIngress(pg, shards=SHARDS), FakePlatform("fake")
        asked = {"approved": _chat_in(held[victim], "approved"), "unanswered": _chat_in(held[victim], "unanswered")}
        for name, chat_id in asked.items():
            text = f'tool deploy {{"env": "{chat_id}"}}'
            ingress.accept(chat.message(text, chat_id=chat_id, user_id="u", message_id=f"ask-{name}"))
        _wait(lambda: len(pg.approvals.pending()) == 2, 20, "both turns paused on their requests")
        events.append(f"{time.monotonic() - started:.1f}s two requests pending on {victim}")
        shard = shard_of(pg.approvals.of_message("ask-approved")[0].session_id, SHARDS)
        epoch = terms[victim][shard]
        time.sleep(max(0.0, started + KILL_AT_S - time.monotonic()))
        os.kill(pids[victim], signal.SIGKILL)
        events.append(f"{time.monotonic() - started:.1f}s kill -9 {victim} (pid {pids[victim]})")
        _wait(lambda: _pid(handles[victim]) not in (None, pids[victim]), 60, "the killed host restarted")
        _wait(lambda: _new_term(pg, shard, epoch), 60, f"shard {shard} held under a new term")
        request = pg.approvals.of_message("ask-approved")[0]
        ingress.accept(chat.message(f"/approve {request.id}", chat_id=asked["approved"], user_id="u"))
        events.append(f"{time.monotonic() - started:.1f}s /approve {request.id} (shard {shard} moved)")

        def settled() -> bool:
            facts = _facts(pg)
            return facts["pending"] == 0 and all(facts["jobs"][job]["state"] == "done" for job in once)

        _wait(settled, 60, "every one-shot job run and answered")
        events.append(f"{time.monotonic() - started:.1f}s one-shot jobs done")
        book.pause(ticker)

        def resumed() -> bool:
            rows = [pg.approvals.of_message(f"ask-{name}")[0] for name in asked]
            return all(row.resumed_at is not None for row in rows) and _facts(pg)["pending"] == 0

        _wait(resumed, APPROVAL_TIMEOUT_S + 60, "both requests resumed and the ticker's last run answered")
        events.append(f"{time.monotonic() - started:.1f}s both requests resumed")
        restarted = _pid(handles[victim]) not in (None, pids[victim])
        facts = _facts(pg)
        approvals = {name: _approval(pg, f"ask-{name}", chat_id, ledger) for name, chat_id in asked.items()}
    for handle in handles.values():
        ray.kill(handle)
    ray.shutdown()
    report = {"once": once, "ticker": ticker, "events": events, "restarted": restarted, "killed": pids[victim]}
    print(json.dumps({**facts, **report, "approvals": approvals}))


if __name__ == "__main__":
    main()
