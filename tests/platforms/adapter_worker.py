"""A gateway with one platform adapter in its own process, for crash tests (run as a script).

``python adapter_worker.py DB PLATFORM CONFIG_JSON AGENT`` builds the adapter from its config section through the
platform registry, opens a gateway on DB, starts the adapter and prints one line ``READY <json banner lines>``.
AGENT ``hold`` never answers (turns stay open until the process is killed); ``echo`` is the echo agent.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms import registry


class HoldingAgent(EchoAgent):
    """Blocks every turn until the process dies."""

    runs_inline = False

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        threading.Event().wait()
        raise AssertionError("unreachable")


def main(argv: Sequence[str]) -> int:
    db, platform, config_json, agent_mode = argv
    config = msgspec.json.decode(config_json.encode(), type=registry.config_type(platform))
    adapter = registry.build(platform, config, {})
    agent = HoldingAgent() if agent_mode == "hold" else EchoAgent()
    gateway = Gateway(
        db,
        config=RuntimeConfig(agent_timeout_s=3600, outbox_retry_base_s=0.05),
        agent=agent,
        senders=adapter.senders(),
        tick_interval_s=0.1,
    )
    adapter.start(GatewayInbox(gateway))
    print("READY " + json.dumps(adapter.describe()), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    adapter.stop()
    gateway.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
