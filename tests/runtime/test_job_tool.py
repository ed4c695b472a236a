"""The agent's ``schedule`` tool (``jobs.agent_tool``): offered by sessions that start with it on, frozen with their
tool list; its jobs belong to the asking principal and run in its chat; list and cancel see only that principal's
jobs; its limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from hermes_actors.agents.tools import find_tool
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.job_tool import SCHEDULE, owner_of, schedule_tools
from hermes_actors.testing import FakeClock
from tests.runtime.test_jobs import running

ANN = SessionSource(platform="fake", chat_type="dm", chat_id="chat-ann", user_id="ann")
BOB = SessionSource(platform="fake", chat_type="dm", chat_id="chat-bob", user_id="bob")


def _call(tool: Any, **arguments: object) -> dict[str, Any]:
    return dict(json.loads(tool.run(arguments)))


def _frozen_tool_names(tools: str | None) -> list[str]:
    assert tools is not None
    return [entry["function"]["name"] for entry in msgspec.json.decode(tools)]


def test_sessions_that_start_with_the_tool_on_freeze_it_with_their_tools(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        fake.push("before", chat_id="chat-old")
        fake.pop()
        assert gateway.wait_idle()
        old = gateway.session_for("agent:main:fake:dm:chat-old")
    with running(db_path, clock, jobs=JobsConfig(agent_tool=True)) as (gateway, fake):
        fake.push("after", chat_id="chat-new", message_id="m-after")  # a new platform's ids start again at m1
        fake.pop()
        fake.push("again", chat_id="chat-old", message_id="m-again")
        fake.pop()
        assert gateway.wait_idle()
        new = gateway.session_for("agent:main:fake:dm:chat-new")
        with gateway.read() as store:
            assert old is not None
            assert new is not None
            assert _frozen_tool_names(store.get_session(new).tools) == ["session_search", SCHEDULE]
            assert _frozen_tool_names(store.get_session(old).tools) == ["session_search"]  # its prefix stays


def test_a_principal_sees_and_cancels_only_its_own_jobs_which_run_in_its_chat(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock, jobs=JobsConfig(agent_tool=True)) as (gateway, fake):
        tools = schedule_tools(gateway.jobs)
        ann, bob = tools("s-ann", ANN)[0], tools("s-bob", BOB)[0]
        added = _call(ann, action="add", prompt="stretch", **{"in": "1m"})["added"]
        assert (added["prompt"], added["where"], added["state"], added["runs"]) == ("stretch", "chat", "active", 0)
        job = gateway.jobs.get(added["job_id"])
        assert (job.owner, job.chat, job.created_by) == (owner_of(ANN), "fake:chat-ann", "agent")
        assert owner_of(ANN) == "fake:ann"
        assert _call(bob, action="list") == {"jobs": []}
        refused = _call(bob, action="cancel", job_id=added["job_id"])
        assert refused == {"error": f"you have no job '{added['job_id']}'; action=list shows yours"}
        assert [j["job_id"] for j in _call(ann, action="list")["jobs"]] == [added["job_id"]]
        clock.advance(60)
        gateway.timers.poke()
        reply = fake.pop()
        assert (reply.text, reply.chat_id, reply.user_id) == ("echo: stretch", "chat-ann", "ann")
        again = _call(ann, action="add", prompt="drink", every="1h")["added"]
        assert _call(ann, action="cancel", job_id=again["job_id"]) == {"cancelled": again["job_id"]}
        assert [j.id for j in gateway.jobs.listed(owner=owner_of(ANN))] == [added["job_id"]]


def test_the_tool_keeps_to_its_limits_and_says_what_is_wrong(db_path: Path) -> None:
    clock = FakeClock()
    config = JobsConfig(agent_tool=True, agent_tool_max_jobs=2, agent_tool_min_interval_s=300)
    with running(db_path, clock, jobs=config) as (gateway, _):
        tool = find_tool(schedule_tools(gateway.jobs)("s-ann", ANN), SCHEDULE)
        assert tool is not None
        assert _call(tool, action="add", prompt="x", every="1m") == {
            "error": "a job may run at most every 300 s; choose a longer interval"
        }
        assert _call(tool, action="add", prompt="x", cron="* * * * *")["error"].startswith("a job may run at most")
        assert "added" in _call(tool, action="add", prompt="one", every="1h")
        assert "added" in _call(tool, action="add", prompt="two", at="23:59", where="this_session")
        assert _call(tool, action="add", prompt="three", every="1h") == {
            "error": "you have 2 jobs already; cancel one first"
        }
        assert _call(tool, action="add", every="1h") == {"error": "prompt: give the text that arrives at each time"}
        assert _call(tool, action="cancel") == {"error": "cancel takes job_id (from action=list)"}
        assert _call(tool, action="add", prompt="x", every="soon")["error"].startswith(
            "every: 'soon' is not a duration"
        )
        assert _call(tool, action="nap")["error"].startswith("bad arguments for schedule: ")
        listed = {j["prompt"]: j["where"] for j in _call(tool, action="list")["jobs"]}
        assert listed == {"one": "chat", "two": "this_session"}
