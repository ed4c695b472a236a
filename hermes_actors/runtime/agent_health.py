"""Whether the agent answers, as health checks report it: ``ok``, ``degraded`` (with the last error) or ``unknown``.

Two things move it. A turn's own agent call: one that failed (the agent raised or did not answer in time) marks the
agent ``degraded`` with its error, one that answered marks it ``ok``. And a probe (:func:`~hermes_actors.agents.base.
probe_call`, for the OpenAI agent ``GET {base_url}/models``), run by :meth:`AgentHealth.check` when the last one is
older than ``interval_s``: at most one at a time and one per interval, however often health is asked, and a health
check waits for it at most ``timeout_s``. An agent without a probe is judged by its turns alone.

With ``fail_readiness`` a degraded agent fails readiness (``/health/ready`` answers 503), for operators who want a
load balancer to send requests elsewhere; by default it only informs. Each change of state is logged once.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import Rule, check_section
from hermes_actors.errors import ConfigError

__all__ = ["AgentCondition", "AgentHealth", "AgentProbeConfig", "AgentState"]

_log = logging.getLogger(__name__)


class AgentState(enum.StrEnum):
    """Where the agent stands."""

    OK = "ok"  # its last call or probe answered
    DEGRADED = "degraded"  # its last call or probe failed: ``last_error`` says how
    UNKNOWN = "unknown"  # nothing has been asked of it yet (no probe, no turn)


_Interval = Annotated[float, Rule(Meta(ge=1), "must be at least 1 second (a probe per health check is waste)")]


class AgentProbeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``agent.probe``: how often health checks may probe the agent (``interval_s``), how long a probe may take
    (``timeout_s``), whether probing is on (``enabled``), and whether a degraded agent fails readiness
    (``fail_readiness``; off by default)."""

    enabled: bool = True
    interval_s: _Interval = 30.0
    timeout_s: float = 5.0
    fail_readiness: bool = False

    def __post_init__(self) -> None:
        check_section(self, "agent.probe")
        if self.timeout_s <= 0 or self.timeout_s > self.interval_s:
            raise ConfigError("agent.probe.timeout_s", "must be positive and at most agent.probe.interval_s")


class AgentCondition(msgspec.Struct, frozen=True, kw_only=True):
    """The agent's state, the last error (``None`` while ok), since when (epoch seconds) it has held, and when it
    was last probed (``None``: never)."""

    state: AgentState
    last_error: str | None = None
    since: float | None = None
    probed_at: float | None = None


class AgentHealth:
    """The agent's state, fed by its calls (:meth:`called`) and refreshed by ``probe`` (:meth:`check`). Thread-safe.

    ``probe(timeout_s)`` raises when the agent does not answer; ``None`` means the agent has none. ``clock`` is
    monotonic (rate limiting), ``wall`` the epoch time reported."""

    def __init__(
        self,
        probe: Callable[[float], None] | None,
        config: AgentProbeConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.config = config or AgentProbeConfig()
        self._probe = probe if self.config.enabled else None
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._condition = AgentCondition(state=AgentState.UNKNOWN)
        self._last_probe: float | None = None  # monotonic start of the last probe
        self._running: threading.Event | None = None  # set when the probe in flight ends

    @property
    def fails_readiness(self) -> bool:
        """Whether the agent's state counts against readiness now (``fail_readiness`` and degraded)."""
        return self.config.fail_readiness and self._condition.state is AgentState.DEGRADED

    def condition(self) -> AgentCondition:
        """The state now, without probing."""
        return self._condition

    def called(self, error: str | None) -> None:
        """An agent call ended: ``error`` says how it failed, ``None`` that it answered."""
        if error is None and self._condition.state is AgentState.OK:
            return  # ok and answering: nothing changes (every turn ends here)
        self._settle(error, probed=False)

    def check(self) -> AgentCondition:
        """The state, after a probe when the last one is ``interval_s`` old (waiting for it up to ``timeout_s``;
        a slower probe finishes in the background and a later check reports it)."""
        with self._lock:
            done = self._running
            now = self._clock()
            due = self._last_probe is None or now - self._last_probe >= self.config.interval_s
            if self._probe is not None and done is None and due:
                done = self._running = threading.Event()
                self._last_probe = now
                threading.Thread(
                    target=self._run_probe, args=(self._probe, done), name="hermes-agent-probe", daemon=True
                ).start()
        if done is not None:
            done.wait(self.config.timeout_s)
        return self._condition

    def _run_probe(self, probe: Callable[[float], None], done: threading.Event) -> None:
        try:
            probe(self.config.timeout_s)
        except Exception as exc:  # any failure to answer is what the probe reports
            self._settle(str(exc) or type(exc).__name__, probed=True)
        else:
            self._settle(None, probed=True)
        finally:
            with self._lock:
                self._running = None
            done.set()

    def _settle(self, error: str | None, *, probed: bool) -> None:
        state = AgentState.OK if error is None else AgentState.DEGRADED
        now = self._wall()
        with self._lock:
            before = self._condition
            since = before.since if before.state is state and before.since is not None else now
            self._condition = AgentCondition(
                state=state,
                last_error=error,
                since=since,
                probed_at=now if probed else before.probed_at,
            )
        if state is before.state:
            return
        if state is AgentState.DEGRADED:
            _log.warning("agent degraded: %s", error)
        elif before.state is AgentState.DEGRADED:
            _log.info("agent recovered after %.0f s degraded", now - (before.since or now))
