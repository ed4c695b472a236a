"""``hermesd``'s body: one gateway, its entry points and the control socket, under a pid lock, driven by signals.

Start: take ``$HERMES_HOME/hermesd.pid`` with an exclusive ``flock`` (a crashed daemon's lock dies with it, so a
stale file never blocks a start; a live one refuses the second daemon by pid), build the agent and the adapters
from the settings, open the gateway (which recovers unanswered messages and unsent replies), start the adapters
and the control socket, print the banner. SIGTERM/SIGINT: stop the entry points, let queued turns finish up to
``daemon.drain_timeout_s``, commit and exit 0; what did not finish stays in the inbox and runs at the next start.
SIGHUP: re-read ``config.yaml``; reset and busy policies and entry points change in place, sessions, actors and
queued messages stay; a bad file is logged and the running configuration kept.

Before anything runs, the home is checked: a full or read-only disk, a read-only ``state.db`` or home directory
refuse the start with :class:`HomeUnusableError` (one line naming the file and the fix; ``hermesd`` exits 2), and a
home other users can open gets one warning. The state files are made 0600 and a new home 0700 whatever the umask.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

import msgspec

from hermes_actors.cpu_affinity import placement
from hermes_actors.daemon.admin import SessionAdministration
from hermes_actors.daemon.admin_key import AdminKey, admin_key
from hermes_actors.daemon.agent_bindings import roster_text
from hermes_actors.daemon.banner import banner
from hermes_actors.daemon.config_file import Settings, load_settings
from hermes_actors.daemon.control import Bind, Chat, ControlServer, Emit, JobsRequest, SessionAdmin, Status, StatusReply
from hermes_actors.daemon.home import check_home, database_path, make_home, socket_path, start_refusal
from hermes_actors.daemon.job_requests import apply_jobs_request
from hermes_actors.daemon.notify import Notifier
from hermes_actors.daemon.pid_lock import PidLock
from hermes_actors.daemon.startup import build_adapters, prepare_start
from hermes_actors.daemon.terminal import TerminalChannel
from hermes_actors.errors import ConfigError, HermesError
from hermes_actors.lifecycle.schedule import zone_named
from hermes_actors.ports import Adapter
from hermes_actors.runtime.futex import futex_slots_for, size_futex_hash
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import Store  # Store: to open the home's SQLite file by its path
from platforms import registry

__all__ = ["Daemon"]

_log = logging.getLogger("hermesd")


class Daemon:
    """The running daemon on one home directory."""

    def __init__(
        self,
        home: Path,
        config_path: Path,
        settings: Settings,
        *,
        environ: Mapping[str, str] | None = None,
        out: IO[str] | None = None,
    ) -> None:
        self.home = home
        self.config_path = config_path
        self.settings = settings
        self._environ = dict(os.environ if environ is None else environ)
        self._out = out
        self._lock = PidLock(home)
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._adapters: dict[str, Adapter] = {}  # their states are on the gateway's board (gateway.platforms)
        self._terminal = TerminalChannel()
        self._gateway: Gateway | None = None
        self._control: ControlServer | None = None
        self._listener: registry.SharedListener | None = None
        self._started_at = time.time()
        self._agent_name = roster_text(settings.agent, settings.agents)
        self.admin_key: AdminKey | None = None  # read (or generated) at start

    # -- start and stop ------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Check the home, take the pid lock and start everything; raise :class:`HermesError` (and undo) if
        something cannot: :class:`HomeUnusableError` for a full or read-only disk or state file."""
        try:
            make_home(self.home)
            self._warn_if_open()
            check_home(self.home)
            self._lock.acquire()
        except OSError as exc:
            raise start_refusal(exc, self.home) or exc from None
        try:
            self._check_store()
            self._start()
        except BaseException as exc:
            refusal = start_refusal(exc, self.home)
            try:
                self.shutdown(drain_timeout=0)
            except Exception as stopping:
                if refusal is None:
                    raise
                _log.error("not everything stopped cleanly after the refused start: %s", stopping)
            if refusal is not None:
                raise refusal from exc
            raise

    def _warn_if_open(self) -> None:
        """One warning when other users may open the home: every transcript is inside it."""
        found = self.home.stat()
        if found.st_mode & 0o077:
            _log.warning(
                "the home is open to other users (mode %04o), who can reach every transcript in it; make it private "
                "with chmod 700 %s",
                stat.S_IMODE(found.st_mode),
                self.home,
            )

    def _check_store(self) -> None:
        """Open (creating or migrating) the database and probe a write, so a read-only one refuses the start."""
        with Store.open(database_path(self.home)) as store:
            store.check_writable()

    def _start(self) -> None:
        settings = self.settings
        runtime = settings.runtime
        # One thread per live session, plus the agent pool and the rest: size the futex hash for them.
        slots = futex_slots_for(runtime.max_live_actors + runtime.max_concurrent_agent_calls + 64)
        if size_futex_hash(slots):
            _log.info("futex hash: %d private slots for up to %d live sessions", slots, runtime.max_live_actors)
        if (placed := placement()) is not None:
            _log.info("%s", placed)
        plan = prepare_start(settings, home=self.home, environ=self._environ)
        self.admin_key = admin_key(self.home, settings, self._environ)
        _log.info("operator API key: %s", self.admin_key.describe())
        adapters = plan.adapters
        senders = [sender for adapter in adapters.values() for sender in adapter.senders()]
        self._gateway = Gateway(
            database_path(self.home),
            config=runtime,
            agents=plan.agents,
            senders=[*senders, self._terminal.waiters, plan.events],
            events=settings.events,
            busy=settings.busy,
            reset=settings.session_reset,
            tz=zone_named(settings.daemon.timezone, None),
            jobs=settings.jobs,
            sessions=settings.sessions,
            media=settings.media,
            agent_probe=settings.agent.probe,
        )
        self._terminal.attach(self._gateway)
        if self._gateway.pruned is not None:
            _log.info("auto-prune: %d ended sessions removed", self._gateway.pruned.sessions_deleted)
        for name, adapter in adapters.items():
            # A port in use is fatal at start: the operator asked for that port.
            adapter.start(self._inbox(self._gateway))
            self._adapters[name] = adapter
            self._gateway.platforms.started(name, adapter)
        if plan.listener is not None:
            self._listener = plan.listener
            plan.listener.start()
            _log.info("%s", "; ".join(plan.listener.describe()))
        for name, adapter in self._adapters.items():
            _log.info("%s started: %s", name, "; ".join(adapter.describe()))
        for name in (n for n, section in settings.platforms.items() if not registry.enabled(section)):
            self._gateway.platforms.disabled(name)
        self._control = ControlServer(socket_path(self.home, settings), self._handle)
        self._control.start()
        _log.info("control socket at %s", self._control.path)

    def _inbox(self, gateway: Gateway) -> GatewayInbox:
        """The inbox port an entry point is started with, its operator opened by the admin key."""
        return GatewayInbox(gateway, admin_key=self.admin_key.key if self.admin_key is not None else None)

    def shutdown(self, drain_timeout: float | None = None) -> None:
        """Stop entry points, drain turns up to the bound (one for both: turns run while entry points drain), stop the
        gateway, release the lock. Idempotent."""
        bound = self.settings.daemon.drain_timeout_s if drain_timeout is None else drain_timeout
        deadline = time.monotonic() + bound
        try:
            self._stop_entry_points(bound)
            self._stop_gateway(max(deadline - time.monotonic(), 0.0))
        finally:
            self._lock.release()  # even when a stop failed: the next start must not find the home held

    def _stop_entry_points(self, bound: float) -> None:
        """Stop the shared listener and every adapter; one that fails to stop is logged, the rest still stop."""
        if self._listener is not None:
            try:
                self._listener.stop(timeout=min(bound, 10.0) or 1.0)
            except Exception:
                _log.exception("the shared listener did not stop cleanly")
            self._listener = None
        for name, adapter in list(self._adapters.items()):
            try:
                adapter.stop(timeout=min(bound, 10.0) or 1.0)
            except Exception:
                _log.exception("%s did not stop cleanly", name)
        self._adapters.clear()

    def _stop_gateway(self, bound: float) -> None:
        if self._control is not None:
            self._control.stop()
            self._control = None
        if self._gateway is not None:
            started = time.monotonic()
            self._gateway.stop(timeout=bound)
            _log.info("gateway stopped after %.1f s of draining", time.monotonic() - started)
            self._gateway = None

    # -- the main loop -------------------------------------------------------------------------------------------

    def run(self) -> int:
        """Start, print the banner, serve until SIGTERM/SIGINT (reloading on SIGHUP), shut down; return 0. Under
        systemd (``$NOTIFY_SOCKET``) it says READY=1 once serving, WATCHDOG=1 while healthy, STOPPING=1 at SIGTERM."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        notifier = Notifier(self._environ)
        try:
            self.start()
            self._print(self.banner())
            notifier.ready(f"serving {', '.join(self._adapters) or 'no entry points'} on {self.home}")
            interval = notifier.watchdog_interval_s
            beat = time.monotonic()
            while not self._stop.is_set():
                if interval is not None and time.monotonic() >= beat:
                    beat = time.monotonic() + interval
                    if self._healthy():  # a stuck supervisor misses its beats, and systemd restarts hermesd
                        notifier.watchdog()
                self._reload.wait(0.5 if interval is None else min(0.5, interval))
                if self._reload.is_set() and not self._stop.is_set():
                    self._reload.clear()
                    self.reload()
                    notifier.reloading(f"configuration reloaded; serving {', '.join(self._adapters) or 'nothing'}")
            _log.info("stopping: draining turns for up to %.0f s", self.settings.daemon.drain_timeout_s)
            notifier.stopping(f"draining turns for up to {self.settings.daemon.drain_timeout_s:.0f} s")
            self.shutdown()
            _log.info("stopped")
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _healthy(self) -> bool:
        """Whether the gateway's supervisor answers a statistics request (within its ask timeout)."""
        gateway = self._gateway
        if gateway is None:
            return False
        try:
            gateway.statistics()
        except Exception as exc:
            _log.warning("the supervisor did not answer (%s); the systemd watchdog is not fed", exc)
            return False
        return True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._reload.set()
        else:
            self._stop.set()
            self._reload.set()  # wake the loop

    def request_stop(self) -> None:
        """Ask :meth:`run` to shut down (as SIGTERM does)."""
        self._stop.set()
        self._reload.set()

    def reload(self) -> None:
        """Re-read the configuration file and apply what can change while running."""
        try:
            fresh = load_settings(self.config_path)
        except ConfigError as exc:
            _log.error("reload refused, keeping the running configuration: %s", exc)
            return
        gateway = self._gateway
        assert gateway is not None
        if fresh.session_reset != self.settings.session_reset:
            armed = gateway.reconfigure_resets(fresh.session_reset)
            _log.info("reset policies reloaded: %d sessions have a reset deadline", armed)
        if fresh.busy != self.settings.busy:  # from the next message on; queued ones stay queued
            gateway.reconfigure_busy(fresh.busy)
            _log.info("busy policies reloaded")
        if fresh.platforms != self.settings.platforms and self._listener is not None:
            _log.warning("platforms changed; with daemon.http_port set, that takes effect when hermesd restarts")
            fresh = msgspec.structs.replace(fresh, platforms=self.settings.platforms)
        elif fresh.platforms != self.settings.platforms:
            self._reload_adapters(fresh.platforms)
        for section in ("agent", "agents", "bindings", "runtime", "sessions", "daemon", "events", "jobs"):
            if getattr(fresh, section) != getattr(self.settings, section):
                _log.warning("config section %r changed; it takes effect when hermesd restarts", section)
        self.settings = msgspec.structs.replace(
            self.settings, session_reset=fresh.session_reset, busy=fresh.busy, platforms=fresh.platforms
        )
        _log.info("configuration reloaded from %s", self.config_path)

    def _reload_adapters(self, platforms: Mapping[str, Any]) -> None:
        gateway = self._gateway
        assert gateway is not None
        old, limits = self.settings.platforms, self.settings.daemon.http_limits
        for name in sorted({*platforms, *old}):
            if platforms.get(name) == old.get(name):
                continue
            current = self._adapters.pop(name, None)
            if current is not None:
                current.stop()
                _log.info("%s stopped for reload", name)
            board = gateway.platforms
            if name not in platforms:
                board.forget(name)
            elif not registry.enabled(platforms[name]):
                board.disabled(name)
            try:
                fresh = build_adapters({name: platforms[name]} if name in platforms else {}, self._environ, limits)
            except ConfigError as exc:
                board.failed(name, str(exc))
                _log.error("%s not restarted: %s", name, exc)
                continue
            for adapter in fresh.values():
                for sender in adapter.senders():
                    gateway.replace_sender(sender)
                try:
                    adapter.start(self._inbox(gateway))
                except HermesError as exc:
                    board.failed(name, str(exc))
                    _log.error("%s not restarted: %s", name, exc)
                    continue
                board.started(name, adapter)
                self._adapters[name] = adapter
                _log.info("%s restarted: %s", name, "; ".join(adapter.describe()))

    # -- control requests ----------------------------------------------------------------------------------------

    def _handle(self, request: Status | Chat | Bind | SessionAdmin | JobsRequest, emit: Emit) -> msgspec.Struct:
        match request:
            case Status():
                return self.status()
            case Chat():
                return self._terminal.chat(request, emit if request.stream else None)
            case Bind():
                return self._terminal.bind(request)
            case SessionAdmin():
                assert self._gateway is not None
                return SessionAdministration(self._gateway).handle(request)
            case JobsRequest():
                assert self._gateway is not None
                return apply_jobs_request(self._gateway.jobs, request)

    def status(self) -> StatusReply:
        """The daemon's state for ``hermesctl status``: what ``/health/ready`` and ``/metrics`` say, too."""
        gateway = self._gateway
        assert gateway is not None
        stats = gateway.statistics()
        inbox, outbox = gateway.backlog()
        ready = gateway.readiness()
        return StatusReply(
            pid=os.getpid(),
            home=str(self.home),
            database=str(database_path(self.home)),
            started_at=self._started_at,
            agent=self._agent_name,
            live_actors=stats.live_actors,
            running_turns=stats.running,
            queued_messages=stats.queued_messages,
            inbox_depth=inbox,
            outbox_backlog=outbox,
            platforms=ready.platforms,
            ready=ready,
            vitals=gateway.vitals(),
        )

    # -- output --------------------------------------------------------------------------------------------------

    def adapters(self) -> Sequence[Adapter]:
        """The running entry points."""
        return list(self._adapters.values())

    def banner(self) -> str:
        """Where everything is and how to talk to it."""
        return banner(
            home=self.home,
            config_path=self.config_path,
            agent=self._agent_name,
            entry_points=[
                *(self._listener.describe() if self._listener is not None else []),
                *(line for adapter in self._adapters.values() for line in adapter.describe()),
            ],
            control_socket=socket_path(self.home, self.settings),
            operator_api="api_server" in self._adapters,
        )

    def _print(self, text: str) -> None:
        if self._out is not None:
            self._out.write(text + "\n")
            self._out.flush()
