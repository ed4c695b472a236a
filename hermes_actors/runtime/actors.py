"""The base classes of the runtime's pykka actors: a thread per actor (:class:`RuntimeActor`), or a thread borrowed
from a pool while the actor has messages (:class:`PooledActor`).

pykka's ``ThreadingActor`` gives every actor a ``queue.Queue``, which is written in Python: each ``put`` and
``get`` takes a ``threading.Condition`` and a blocked ``get`` allocates a waiter lock. An actor's inbox needs
only ``put``, ``get`` and ``empty`` (pykka's ``ActorInbox`` protocol), which ``queue.SimpleQueue`` provides in C,
unbounded and FIFO, as the Python queue was. pykka documents ``_create_actor_inbox`` as the method an actor type
overrides to choose its inbox; pyproject.toml keeps pykka below 5 for it. Alternating runs of
``bench/throughput.py --only aggregate`` against the stock inbox gave 3,002/3,407/3,065 turns/s against
2,474/2,245/2,404, and 304–344 µs of CPU per turn against 423–465 (bench/README.md).

An actor that waits for messages almost all its life (a session's) need not keep a thread blocked on its inbox:
~24 KiB of RSS each (the top pages of its stack and the deeper ones a turn touched once, its thread state, the
``threading.Thread`` and its ``Event``), and a ``clone``, an 8 MiB stack mapping and a wait for the new thread to
run to start one. A :class:`PooledActor` keeps only its :class:`Mailbox`: a message put into an idle mailbox hands
the actor to an :class:`ActorPool` worker, which runs it (``on_start`` first, once) until its mailbox is empty and
goes back to the pool. The actor is otherwise pykka's: ``tell``, ``ask`` and ``stop``, one message at a time in
order, ``on_failure``, and messages queued at its stop answered with ``ActorDeadError``. It runs in a
``contextvars.Context`` of its own, as it did in a thread of its own (a session's log fields are bound in it).
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import pykka

if TYPE_CHECKING:
    from pykka._actor import ActorInbox
    from pykka._envelope import Envelope

__all__ = ["IDLE_TIMEOUT_S", "SPARE_PER", "ActorPool", "Mailbox", "PooledActor", "RuntimeActor", "StopFlag"]

IDLE_TIMEOUT_S = 30.0  # a pool worker that had nothing to run for this long ends
SPARE_PER = 8  # a pool that grows keeps a spare worker started ahead for every SPARE_PER it has

_log = logging.getLogger(__name__)


class RuntimeActor(pykka.ThreadingActor):
    """A ``pykka.ThreadingActor`` whose inbox is a ``queue.SimpleQueue``."""

    @staticmethod
    def _create_actor_inbox() -> ActorInbox:
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        return inbox


class ActorPool:
    """Daemon threads named ``<name>-N`` that run what :meth:`run` is given, one job each at a time.

    A job never waits for a busy worker: when none is idle, a new one is started for it (an actor blocked in a long
    turn holds up no other). The pool's own thread ``<name>-starter`` starts them, so :meth:`run` never waits for a
    thread to start (the supervisor calls it), and it keeps spare workers started ahead while it grows (one for
    every :data:`SPARE_PER` workers, at least one), so a job seldom waits for one to start. A worker idle for
    ``idle_timeout_s`` ends, unless it is needed for a job queued meanwhile.
    """

    __slots__ = ("_idle", "_jobs", "_lock", "_name", "_numbers", "_spares_asked", "_starts", "_timeout", "_workers")

    def __init__(self, name: str, *, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self._name = name
        self._timeout = idle_timeout_s
        self._numbers = itertools.count()
        self._forget_workers()
        os.register_at_fork(after_in_child=self._forget_workers)

    def _forget_workers(self) -> None:
        """Start without workers (at first, and in a forked child: the parent's threads are not there)."""
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0  # workers waiting for a job, less the jobs queued for them (and for workers starting)
        self._starts: queue.SimpleQueue[bool] | None = None  # the starter's requests (True: a spare), once it runs
        self._spares_asked = 0  # spares asked of the starter and not running yet
        self._workers = 0  # workers running

    def run(self, job: Callable[[], None]) -> None:
        """Run ``job`` on an idle worker, or on a new one when none is idle; ``job`` must not raise."""
        with self._lock:
            start = self._idle <= 0
            if not start:
                self._idle -= 1
            starts, first = self._starts, start and self._starts is None
            if first:
                starts = self._starts = queue.SimpleQueue()
        self._jobs.put(job)
        if not start:
            return
        assert starts is not None
        if first:  # the starter itself, once: this call waits for it
            name = f"{self._name}-starter"
            threading.Thread(target=self._start_workers, args=(starts,), name=name, daemon=True).start()
        starts.put(False)

    def _start_workers(self, starts: queue.SimpleQueue[bool]) -> None:
        """The starter: a worker for each request (a thread's start waits until it runs: not on the caller)."""
        while True:
            spare = starts.get()
            name = f"{self._name}-{next(self._numbers)}"
            try:
                threading.Thread(target=self._work, args=(spare,), name=name, daemon=True).start()
            except RuntimeError:  # no thread to be had now: a job waits for a worker to come free
                _log.exception("the %s pool could not start a worker", self._name)
                with self._lock:
                    if spare:
                        self._spares_asked -= 1
                    else:
                        self._idle -= 1  # its job waits, as a queued one: below zero, jobs wait for a worker

    def _work(self, spare: bool) -> None:
        get, timeout = self._jobs.get, self._timeout
        with self._lock:
            self._workers += 1
            if spare:  # started ahead of any job: an idle worker from now on
                self._spares_asked -= 1
                self._idle += 1
        while True:
            try:
                job: Callable[[], None] | None = get(timeout=timeout)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # another worker waits for each job queued: this one may go
                        self._idle -= 1
                        self._workers -= 1
                        return
                continue  # a job was queued for this worker as it timed out
            with self._lock:  # fewer idle workers than spares wanted: start some before a job needs them
                ask = max(1, self._workers // SPARE_PER) - max(0, self._idle) - self._spares_asked
                if ask > 0:
                    self._spares_asked += ask
                starts = self._starts
            if starts is not None:
                for _ in range(ask):
                    starts.put(True)
            try:
                assert job is not None
                job()
            except BaseException:
                _log.exception("a job of the %s pool raised", self._name)
            job = None  # an idle worker keeps nothing alive
            with self._lock:
                self._idle += 1


class _Drained(Exception):
    """Raised by :meth:`Mailbox.get` when it is empty: the worker gives the actor back to the pool."""


class Mailbox:
    """A :class:`PooledActor`'s inbox (pykka's ``ActorInbox``): a ``queue.SimpleQueue``, and whether the actor is
    handed to a worker of ``pool``. Only that worker takes messages out, without waiting."""

    __slots__ = ("_closed", "_lock", "_messages", "_pool", "_run", "_scheduled")

    def __init__(self, pool: ActorPool) -> None:
        self._messages: queue.SimpleQueue[Envelope[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._scheduled = False
        self._closed = False
        self._pool = pool
        self._run: Callable[[], None] | None = None  # runs the actor; holds it alive while it may get messages

    def attach(self, run: Callable[[], None]) -> None:
        """Hand ``run`` to the pool whenever a message comes to an idle mailbox."""
        self._run = run

    def start(self) -> None:
        """Run the actor once now (its ``on_start``), messages or not."""
        with self._lock:
            self._scheduled = True
            run = self._run
        if run is not None:
            self._pool.run(run)

    def put(self, envelope: Envelope[Any], /) -> None:
        """Queue ``envelope``; run the actor if it is idle. After the actor stopped, an ask fails at once."""
        with self._lock:
            if self._closed:
                _refuse(envelope)
                return
            self._messages.put(envelope)
            if self._scheduled:
                return
            self._scheduled = True
            run = self._run
        if run is not None:
            self._pool.run(run)

    def get(self) -> Envelope[Any]:
        """The next message; raises ``_Drained`` when there is none (the worker lets the actor go)."""
        try:
            return self._messages.get_nowait()
        except queue.Empty:
            raise _Drained from None

    def empty(self) -> bool:
        """Whether no message is queued."""
        return self._messages.empty()

    def release(self) -> bool:
        """The worker found the mailbox empty: ``True`` if it still is (the actor is idle from now on), ``False``
        when a message came meanwhile (the same worker runs the actor again)."""
        with self._lock:
            if not self._messages.empty():
                return False
            self._scheduled = False
            return True

    def close(self) -> None:
        """The actor stopped and answered what was queued: later asks fail at once, and the actor may be freed."""
        with self._lock:
            self._closed = True
            self._run = None
        while not self._messages.empty():  # put between the actor's teardown and this close
            _refuse(self._messages.get_nowait())


def _refuse(envelope: Envelope[Any]) -> None:
    """Answer a message that came to a stopped actor: an ask fails with ``ActorDeadError``, a tell is dropped."""
    if envelope.reply_to is not None:
        envelope.reply_to.set_exception(
            exc_info=(pykka.ActorDeadError, pykka.ActorDeadError("the actor stopped before it"), None)
        )


class StopFlag(threading.Event):
    """A pooled actor's ``actor_stopped``: a flag that becomes a ``threading.Event`` only once someone waits on it.

    pykka and the runtime only set it and read it, and the ``Condition`` of an ``Event`` (its lock, its bound
    methods and its waiters' deque) is ~1.2 KiB per live actor.
    """

    _guard = threading.Lock()  # orders set() against a first wait() (one for every flag: both are rare)

    def __init__(self) -> None:  # no Condition: see the class docstring
        self._flag = False
        self._waited: threading.Event | None = None

    def set(self) -> None:
        with StopFlag._guard:
            self._flag = True
            waited = self._waited
        if waited is not None:
            waited.set()

    def clear(self) -> None:
        with StopFlag._guard:
            self._flag = False
            if self._waited is not None:
                self._waited.clear()

    def wait(self, timeout: float | None = None) -> bool:
        with StopFlag._guard:
            if self._flag:
                return True
            if self._waited is None:
                self._waited = threading.Event()
            waited = self._waited
        return waited.wait(timeout)


# Actor URNs in UUID form: a random prefix drawn once and a counter (no random draw, a system call, per actor).
_URN_PREFIX = uuid.uuid4().urn[:-12]
_urn_numbers = itertools.count(1)


class PooledActor(pykka.ThreadingActor):
    """A pykka actor that holds a thread of ``pool`` only while it has messages (see the module docstring).

    A subclass sets ``pool``, shared by its actors; ``on_start``, ``on_receive``, ``on_stop`` and ``on_failure``
    run on a worker of it, one at a time for each actor.
    """

    pool: ClassVar[ActorPool]

    def __init__(self) -> None:
        # What pykka's Actor.__init__ sets (pyproject.toml keeps pykka below 5), with a StopFlag for its Event and
        # a URN without a random draw.
        self.actor_urn = f"{_URN_PREFIX}{next(_urn_numbers) % 2**48:012x}"
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = StopFlag()
        self._actor_ref = pykka.ActorRef(self)
        self._context = contextvars.Context()
        self._begun = False
        self._mailbox.attach(self._run_queued)

    @classmethod
    def _create_actor_inbox(cls) -> ActorInbox:
        return Mailbox(cls.pool)

    @property
    def _mailbox(self) -> Mailbox:
        inbox = self.actor_inbox
        assert isinstance(inbox, Mailbox)
        return inbox

    def _start_actor_loop(self) -> None:
        self._mailbox.start()

    def _run_queued(self) -> None:
        """The pool's job: run the actor until its mailbox is empty (or it stopped)."""
        mailbox = self._mailbox
        while True:
            if self._context.run(self._run_messages):
                mailbox.close()
                return
            if mailbox.release():
                return

    def _run_messages(self) -> bool:
        """Run ``on_start`` the first time, then the queued messages; ``True`` once the actor has stopped."""
        try:
            if not self._begun:
                self._begun = True
                self._actor_loop_setup()
            self._actor_loop_running()  # pykka's loop: returns once stopped, ends early here when drained
        except _Drained:
            return False
        self._actor_loop_teardown()
        return True
