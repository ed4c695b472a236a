"""The agent pool: an executor of at most N threads whose shutdown can give up the calls running on it."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError

import pytest

from hermes_actors.runtime.agent_pool import AgentPool

WAIT_S = 10.0


def test_calls_give_back_their_results_and_exceptions() -> None:
    pool = AgentPool(2)
    try:
        assert pool.submit(lambda a, b: a + b, 2, b=3).result(WAIT_S) == 5
        failing = pool.submit(int, "not a number")
        with pytest.raises(ValueError, match="not a number"):
            failing.result(WAIT_S)
    finally:
        pool.shutdown()
    assert pool.running() == 0


def test_no_more_than_its_threads_run_at_once_and_the_rest_wait_in_order() -> None:
    pool = AgentPool(2)
    gate = threading.Event()
    entered = threading.Semaphore(0)
    lock = threading.Lock()
    running: list[int] = []
    most = [0]

    def call(n: int) -> int:
        with lock:
            running.append(n)
            most[0] = max(most[0], len(running))
        entered.release()
        gate.wait(WAIT_S)
        with lock:
            running.remove(n)
        return n

    try:
        futures = [pool.submit(call, n) for n in range(5)]
        assert entered.acquire(timeout=WAIT_S)
        assert entered.acquire(timeout=WAIT_S)
        with lock:
            assert sorted(running) == [0, 1]  # the first two; the others wait for a thread
        assert pool.running() == 5
        gate.set()
        assert [f.result(WAIT_S) for f in futures] == [0, 1, 2, 3, 4]
    finally:
        pool.shutdown()
    assert most[0] == 2
    assert len(pool._threads) == 2
    assert pool.running() == 0


def test_a_shutdown_that_cancels_gives_up_running_and_queued_calls_at_once_and_drops_their_late_results() -> None:
    pool = AgentPool(1)
    began = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def held(name: str) -> str:
        ran.append(name)
        began.set()
        release.wait(WAIT_S)
        return name

    running = pool.submit(held, "running")
    assert began.wait(WAIT_S)
    queued = pool.submit(held, "queued")
    pool.shutdown(wait=False, cancel_futures=True)
    assert running.cancelled()  # at once: nobody waits for the model
    assert queued.cancelled()
    with pytest.raises(CancelledError):
        running.result(0)
    (thread,) = pool._threads
    assert thread.daemon  # the process's exit does not wait for the call either
    release.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert ran == ["running"]  # the queued call never ran
    assert running.cancelled()  # its late result went nowhere
    assert pool.running() == 0


def test_a_shutdown_leaves_a_finished_call_its_result() -> None:
    pool = AgentPool(1)
    done = pool.submit(str, "answered")
    assert done.result(WAIT_S) == "answered"
    pool.shutdown(wait=True, cancel_futures=True)
    assert not done.cancelled()
    assert done.result(0) == "answered"


def test_a_pool_that_shut_down_refuses_calls_as_executors_do() -> None:
    pool = AgentPool(1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="the agent pool has shut down"):
        pool.submit(str, "late")


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread, not 0"):
        AgentPool(0)
