"""The shard hosts' agent in the cluster's jobs and approvals test (``tests/cluster/jobs_driver.py``): the echo agent
with a ``deploy`` tool that needs approval and writes each run to a ledger file, one line per run with the
process that ran it, so the test counts the runs of every host incarnation, a killed one's too.

Built in each Ray worker by :func:`ledger_agent` (pickled by reference: this module is imported there)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hermes_actors.agents.approvals import ApprovalSettings, require_approvals
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import Tool, offer_tools
from hermes_actors.messages import ToolServerHealth

__all__ = ["LedgerTools", "ledger_agent", "ledger_runs"]


class LedgerTools:
    """A tool source with one tool, ``deploy``, that needs approval and appends ``env pid`` to ``path``."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._tool = Tool(
            name="deploy",
            description="Deploy the service.",
            parameters={"type": "object"},
            handler=self._run,
            needs_approval=True,
        )

    def _run(self, arguments: dict[str, Any]) -> str:
        with open(self._path, "a", encoding="utf-8") as ledger:
            ledger.write(f"{arguments.get('env')} {os.getpid()}\n")
        return json.dumps({"deployed": arguments.get("env")})

    def fresh(self) -> tuple[Tool, ...]:
        return (self._tool,)

    def current(self) -> tuple[Tool, ...]:
        return (self._tool,)

    def health(self) -> list[ToolServerHealth]:
        return []


def ledger_agent(path: str, timeout_s: float) -> EchoAgent:
    """The echo agent offering :class:`LedgerTools` (``path``), its requests waiting ``timeout_s`` for an answer."""
    agent = EchoAgent()
    offer_tools(agent, LedgerTools(path))
    require_approvals(agent, ApprovalSettings(timeout_s=timeout_s))
    return agent


def ledger_runs(path: str) -> dict[str, list[int]]:
    """The runs the ledger at ``path`` holds: env -> the pids of the processes that ran it."""
    runs: dict[str, list[int]] = {}
    if not Path(path).exists():
        return runs
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        env, pid = line.rsplit(" ", 1)
        runs.setdefault(env, []).append(int(pid))
    return runs
