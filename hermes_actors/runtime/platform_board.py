"""Where each configured entry point stands: the one record ``hermesctl status`` and ``/health/ready`` both read.

The daemon writes it as it starts, reloads and stops adapters (:meth:`PlatformBoard.started`, :meth:`failed`,
:meth:`disabled`, :meth:`forget`); a running adapter that implements
:class:`~hermes_actors.ports.ConnectionReporter` is asked at each read whether its connection is up, so a dropped
websocket shows as ``disconnected`` with its last error while the adapter keeps trying.
"""

from __future__ import annotations

import logging
import threading

from hermes_actors.ports import Adapter, ConnectionReporter, PlatformHealth, PlatformStatus

__all__ = ["PlatformBoard"]

_log = logging.getLogger(__name__)


class PlatformBoard:
    """Each configured entry point's state, by name (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Adapter] = {}
        self._failed: dict[str, str] = {}
        self._disabled: set[str] = set()

    def started(self, name: str, adapter: Adapter) -> None:
        """``adapter`` serves ``name`` now."""
        with self._lock:
            self._forget(name)
            self._running[name] = adapter

    def failed(self, name: str, error: str) -> None:
        """``name``'s section could not be built or started, because of ``error``."""
        with self._lock:
            self._forget(name)
            self._failed[name] = error

    def disabled(self, name: str) -> None:
        """``name``'s section says ``enabled: false``."""
        with self._lock:
            self._forget(name)
            self._disabled.add(name)

    def forget(self, name: str) -> None:
        """``name`` is no longer configured (or stopped for good)."""
        with self._lock:
            self._forget(name)

    def _forget(self, name: str) -> None:
        self._running.pop(name, None)
        self._failed.pop(name, None)
        self._disabled.discard(name)

    def names(self) -> list[str]:
        """The entry points running now."""
        with self._lock:
            return sorted(self._running)

    def states(self) -> list[PlatformHealth]:
        """Every entry point: the running ones (asked about their connection), then the failed, then the disabled."""
        with self._lock:
            running = list(self._running.items())
            failed = list(self._failed.items())
            disabled = sorted(self._disabled)
        found = [_running(name, adapter) for name, adapter in running]
        found += [PlatformHealth(name=n, state=PlatformStatus.FAILED, detail=[e], last_error=e) for n, e in failed]
        found += [PlatformHealth(name=name, state=PlatformStatus.DISABLED) for name in disabled]
        return found


def _running(name: str, adapter: Adapter) -> PlatformHealth:
    try:
        detail = adapter.describe()
        problem = adapter.connection_problem() if isinstance(adapter, ConnectionReporter) else None
    except Exception as exc:  # an adapter's bug: report it rather than fail the status or health check
        _log.exception("%s: its state could not be read", name)
        return PlatformHealth(name=name, state=PlatformStatus.FAILED, last_error=f"its state could not be read: {exc}")
    if problem is not None:
        return PlatformHealth(name=name, state=PlatformStatus.DISCONNECTED, detail=detail, last_error=problem)
    return PlatformHealth(name=name, state=PlatformStatus.RUNNING, detail=detail)
