"""Routes.check: a shard host's cached route yields to the stored one unless this supervisor is ahead of the store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.live import LiveSession
from hermes_actors.runtime.protocol import Deliver, Delivery
from hermes_actors.runtime.routes import Routes
from hermes_actors.store import EndReason, Store, StoreInterface
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

KEY = "agent:main:fake:dm:c"


@pytest.fixture
def parts(db_path: Path) -> Iterator[tuple[Routes, dict[str, LiveSession], StoreWriter]]:
    writer = StoreWriter(Store.open(db_path))
    readers = ReaderPool(db_path)
    live: dict[str, LiveSession] = {}
    try:
        writer.call(lambda store: [store.create_session("fake", session_id=s) for s in ("old", "new")])
        yield Routes(readers, writer, live), live, writer
    finally:
        readers.close()
        writer.stop()


def _deliver(stored: str | None, *, check: bool = True) -> Deliver:
    source = SessionSource(platform="fake", chat_type="dm", chat_id="c", user_id="u")
    delivery = Delivery(inbox_id=1, message=InboundMessage(source=source, text="hi", message_id="m1"))
    return Deliver(routing_key=KEY, delivery=delivery, check_route=check, stored_route=stored)


def test_a_cached_route_the_store_no_longer_has_is_read_again(
    parts: tuple[Routes, dict[str, LiveSession], StoreWriter],
) -> None:
    routes, _, writer = parts
    routes.store(KEY, "old").result(10)
    writer.call(lambda store: store.set_route(KEY, "new"))  # another host re-pointed the key
    routes.check(_deliver("old"))  # what the store said is what the cache says: kept
    assert routes.cached(KEY) == "old"
    routes.check(_deliver("new", check=False))  # a single machine's message: nothing checked
    assert routes.cached(KEY) == "old"
    routes.check(_deliver("new"))
    assert routes.cached(KEY) is None
    assert routes.existing(KEY) == "new"


def test_a_route_write_of_its_own_in_flight_or_a_session_at_work_here_keeps_the_cache(
    parts: tuple[Routes, dict[str, LiveSession], StoreWriter],
) -> None:
    routes, live, writer = parts
    routes.store(KEY, "old").result(10)
    gate, entered = threading.Event(), threading.Event()

    def busy(store: StoreInterface) -> None:  # the writer is busy: the next write waits
        entered.set()
        gate.wait(10)

    writer.submit(busy)
    assert entered.wait(10)
    written = routes.store(KEY, "new")
    routes.check(_deliver("old"))  # the store is behind this supervisor's own write
    assert routes.cached(KEY) == "new"
    gate.set()
    written.result(10)
    live["new"] = LiveSession(create_with=None)
    live["new"].busy = True
    routes.check(_deliver("other"))  # its turn runs here (it may re-point the key itself)
    assert routes.cached(KEY) == "new"
    live["new"].busy = False
    routes.check(_deliver(None))  # unbound elsewhere
    assert routes.cached(KEY) is None


def test_a_stored_route_to_a_session_ended_elsewhere_is_not_trusted_while_its_actor_here_stops(
    parts: tuple[Routes, dict[str, LiveSession], StoreWriter],
) -> None:
    """Another process ended the session; this supervisor retired it (its cached keys dropped) and its actor is still
    stopping when the chat's next line comes. The stored route still leads to it: the line must start a new session,
    not reach the ended one again (seen as a flaky test_chat_ended: 'your next line starts a new conversation')."""
    routes, live, writer = parts
    routes.store(KEY, "old").result(10)
    writer.call(lambda store: store.end_session("old", EndReason.USER_EXIT))
    routes.forget("old")
    state = live["old"] = LiveSession(create_with=None)
    state.ref = cast(Any, object())  # an actor: only whether there is one is read
    state.stopping = True
    assert routes.existing(KEY) is None
    state.stopping = False  # an actor at work here vouches for its session without a read
    assert routes.existing(KEY) == "old"
