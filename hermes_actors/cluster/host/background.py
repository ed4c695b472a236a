"""Background processes in cluster mode: what a shard host's agent reports, kept in the store for every host.

On one machine the reset scheduler asks the agent, when a reset is due, since when the session's background process
runs (:func:`~hermes_actors.lifecycle.policy.bg_process_blocks_reset`). In a cluster the process runs in the agent
of the host that ran the session's turns, and the reset may be found due by another host: the shard moved (its
home host came back, or a host's term ran out) while the process goes on where it started. So each host records the
processes its own agent reports in ``background_processes`` (:class:`~hermes_actors.store.pg.reset_scan.ResetScan`):
after each turn of a session (when its process starts or is gone) and when a scan asks about a session whose reset
is due; it deletes the record when its agent reports the process ended. The scan of whichever host holds the shard
reads those records beside its own agent's answer.

A record outlives a host that dies with its process: the reset then waits until the record is older than
``bg_process_max_age_hours``, as it would for a process that never ends. A reset held off is checked at every scan.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from hermes_actors.agents.base import background_end_hook, background_probe
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["BackgroundWatch"]

_log = logging.getLogger(__name__)


class BackgroundWatch:
    """The background processes of one host's agent, recorded as ``reporter``; see the module docstring."""

    def __init__(
        self,
        store: PostgresStore,
        agent: object,
        reporter: str,
        *,
        on_ended: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._probe = background_probe(agent)
        self._reporter = reporter
        self._on_ended = on_ended
        self._lock = threading.Lock()
        self._recorded: dict[str, float] = {}  # session id -> started_at this host recorded
        hook = background_end_hook(agent)
        if hook is not None:
            hook(self.ended)

    def _local(self, session_id: str) -> float | None:
        if self._probe is None:
            return None
        try:
            return self._probe(session_id)
        except Exception:
            _log.exception("the agent's background_started_at(%s) failed; taken as no process", session_id)
            return None

    def observe(self, session_id: str) -> float | None:
        """Record (or forget) the process the agent reports for ``session_id`` now; when it started."""
        started = self._local(session_id)
        with self._lock:
            recorded = self._recorded.get(session_id)
            if started == recorded:
                return started
            if started is None:
                del self._recorded[session_id]
            else:
                self._recorded[session_id] = started
        if started is None:
            self._store.reset_scan.release(session_id, self._reporter)
        else:
            self._store.reset_scan.hold(session_id, started, self._reporter)
        return started

    def forget(self, session_id: str) -> None:
        """The session ended: drop this host's record of its process."""
        with self._lock:
            recorded = self._recorded.pop(session_id, None)
        if recorded is not None:
            self._store.reset_scan.release(session_id, self._reporter)

    def started_at(self, session_ids: Sequence[str]) -> dict[str, float]:
        """Since when each of ``session_ids`` that has a background process has had it: this host's agent's answer,
        else another host's record (a record of this host that its agent no longer confirms is deleted)."""
        found: dict[str, float] = {}
        for session_id in session_ids:
            started = self.observe(session_id)
            if started is not None:
                found[session_id] = started
        others = [session_id for session_id in session_ids if session_id not in found]
        for session_id, hold in self._store.reset_scan.holds(others).items():
            if hold.reporter == self._reporter:
                self._store.reset_scan.release(session_id, self._reporter)  # its end was not reported to us
            else:
                found[session_id] = hold.started_at
        return found

    def ended(self, session_id: str) -> None:
        """The agent reports that the process of ``session_id`` ended (any thread): forget it, then ``on_ended``."""
        with self._lock:
            self._recorded.pop(session_id, None)
        try:
            self._store.reset_scan.release(session_id, self._reporter)
        except Exception:
            _log.exception("forgetting the background process of %s failed; the next scan asks again", session_id)
        if self._on_ended is not None:
            self._on_ended(session_id)
