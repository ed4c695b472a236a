"""Crash-test harness for adapters: a worker process that accepts a message and is killed before it answers.

worker = AdapterWorker.start(db, "telegram", config, agent="hold")  # turns never finish
... deliver an update to the worker (push to its URL, or queue it on the fake server it polls) ...
wait_for_inbox(db, 1)                                            # accepted and committed
worker.kill()                                                    # SIGKILL: no cleanup at all
worker = AdapterWorker.start(db, "telegram", config, agent="echo")  # recovery replays the turn
... the fake server receives exactly one reply ...
worker.stop()
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec

from hermes_actors.store import Store
from hermes_actors.testing import poll_until

__all__ = ["AdapterWorker", "inbox_rows", "wait_for_inbox"]

_WORKER = Path(__file__).with_name("adapter_worker.py")


class AdapterWorker:
    """A running worker process and the banner lines its adapter printed."""

    def __init__(self, process: subprocess.Popen[str], describe: list[str]) -> None:
        self.process = process
        self.describe = describe

    @classmethod
    def start(
        cls, db: Path, platform: str, config: msgspec.Struct, *, agent: str = "echo", timeout: float = 30.0
    ) -> AdapterWorker:
        """Start a worker and wait for its READY line."""
        process = subprocess.Popen(
            [sys.executable, str(_WORKER), str(db), platform, msgspec.json.encode(config).decode(), agent],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if line.startswith("READY ") or not line:
                break
        if not line.startswith("READY "):
            process.kill()
            _, err = process.communicate(timeout=10)
            raise AssertionError(f"the {platform} worker did not start: {err}")
        return cls(process, list(json.loads(line.removeprefix("READY "))))

    def url(self) -> str:
        """The first ``http://127.0.0.1:PORT`` the adapter's banner names (for push platforms)."""
        for line in self.describe:
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            if found:
                return found[0]
        raise AssertionError(f"no URL in {self.describe}")

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up."""
        self.process.kill()
        self.process.communicate(timeout=30)

    def stop(self, timeout: float = 30.0) -> str:
        """SIGTERM and wait; return its stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=timeout)
        return err


def inbox_rows(db: Path) -> list[tuple[str, str]]:
    """(platform message id, state) of every inbox row."""
    if not db.exists():
        return []
    with Store.open(db, readonly=True) as store:
        rows = store._connection.execute("SELECT platform_message_id, state FROM inbox ORDER BY id").fetchall()
    return [(str(message_id), str(state)) for message_id, state in rows]


def wait_for_inbox(db: Path, count: int, timeout: float = 20.0) -> list[tuple[str, str]]:
    """Wait until ``count`` inbox rows are committed; return them."""
    poll_until(lambda: len(inbox_rows(db)) >= count, timeout, what=f"{count} inbox rows in {db}")
    return inbox_rows(db)
