"""A long-poll or socket account as a cluster-wide singleton: run by whichever replica holds
``adapter:<platform>:<account>``.

A Telegram bot polled twice loses updates to the other poller (409), a Discord or QQ gateway session opened twice
delivers every event twice: such an account must run in one process of the cluster. Every ``hermesd --cluster``
replica keeps a :class:`LeasedAdapter` per such account of its enabled sections (the section cut down to that
account, :class:`~hermes_actors.section_parts.SectionParts`); each competes for the account's role lease, so two bots
of one section may run in two replicas. The holder builds the adapter, starts it on a
:meth:`~hermes_actors.cluster.replica.inbox.ClusterInbox.guarded` inbox and offers its senders to the replica's
dispatcher, which sends the account's replies under the same term; it renews the term every third of ``ttl_s`` and
stops the adapter (senders withdrawn first) when a renewal fails or the local deadline passes, and at shutdown, where
it also releases the role so another replica takes over at once. Each term gets a freshly built adapter.

Between the loss of a term and the stop, the adapter may still poll: its commits are refused, because its inbox
runs :meth:`RoleTerm.check` first in the transaction of every commit (a batch's rows and its poll cursor, a
message), so the cursor never moves under a replica that lost the role and the new holder polls from the committed
cursor.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.roles import RoleTerm
from hermes_actors.ports import Adapter, ReplySender
from hermes_actors.runtime.platform_board import PlatformBoard

__all__ = ["LeasedAdapter"]

_log = logging.getLogger(__name__)

Senders = Callable[["LeasedAdapter", Sequence[ReplySender] | None], None]  # senders offered (None: withdrawn)


def _no_senders(leased: LeasedAdapter, senders: Sequence[ReplySender] | None) -> None:
    """Offer the senders to nobody."""


class LeasedAdapter:
    """The adapter of ``platform``'s ``account`` (``build()`` makes one) run while ``term`` is held; :meth:`start`
    its heartbeat."""

    def __init__(
        self,
        platform: str,
        account: str,
        build: Callable[[], Adapter],
        term: RoleTerm,
        *,
        inbox: ClusterInbox,
        senders: Senders = _no_senders,
        board: PlatformBoard | None = None,
    ) -> None:
        self.platform = platform
        self.account = account
        self.term = term
        self._build = build
        self._inbox = inbox.guarded(term.check)
        self._senders = senders
        self._board = board
        self._adapter: Adapter | None = None
        self._lock = threading.Lock()  # one tick or close at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        """``<platform>:<account>``: how the replica's health and ``/health/ready`` name it while it runs here."""
        return f"{self.platform}:{self.account}"

    @property
    def inbox(self) -> ClusterInbox:
        """The inbox its adapter is started on: every commit checks the term first."""
        return self._inbox

    @property
    def running(self) -> bool:
        """Whether this replica runs the adapter now."""
        return self._adapter is not None

    def tick(self) -> bool:
        """Renew or take the role; start the adapter when it was just taken, stop it when it was lost. Whether the
        adapter runs here afterwards."""
        with self._lock:
            if self._stop.is_set():
                return False
            held = self.term.keep()
            if held and self._adapter is None:
                self._start()
            elif not held and self._adapter is not None:
                _log.warning("%s: the adapter of %s stops here (its role was lost)", self.term.holder, self.term.role)
                self._halt()
            return self._adapter is not None

    def _start(self) -> None:
        try:
            adapter = self._build()
            adapter.start(self._inbox)
        except Exception:
            _log.exception(
                "%s: the adapter of %s could not start; the role is released", self.term.holder, self.term.role
            )
            self.term.release()
            return
        self._adapter = adapter
        self._senders(self, list(adapter.senders()))
        if self._board is not None:
            self._board.started(self.name, adapter)
        _log.info("%s: runs the adapter of %s at epoch %s", self.term.holder, self.term.role, self.term.epoch())

    def _halt(self) -> None:
        adapter, self._adapter = self._adapter, None
        if adapter is None:
            return
        if self._board is not None:
            self._board.forget(self.name)
        self._senders(self, None)
        try:
            adapter.stop()
        except Exception:
            _log.exception("%s: stopping the adapter of %s failed", self.term.holder, self.term.role)

    def start(self) -> None:
        """Tick now and every third of the term, on a thread of its own, until :meth:`close`."""
        self._thread = threading.Thread(target=self._run, name=f"role-{self.term.role}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                _log.exception("%s: keeping %s failed; trying again", self.term.holder, self.term.role)
            self._stop.wait(self.term.ttl_s / 3)

    def close(self) -> None:
        """Stop the heartbeat and the adapter, then release the role (another replica may take it at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            self._halt()
            self.term.release()
