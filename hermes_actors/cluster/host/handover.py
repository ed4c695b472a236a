"""Which pending inbox rows a shard host hands to its supervisor: each once per term, in id order per pull.

A row reaches the host's puller two ways (:class:`~hermes_actors.store.pg.shard_queue.Notices`):

- whole, with its ``NOTIFY``: :meth:`Handover.hand` passes it on without reading it back;
- by a pull (:meth:`Handover.pull`): on a notification without a row (a row too large to ride with it, a moved row,
  a control row), a poke, a new term, and every ``pull_interval_s`` whatever happened.

Both record what they handed over (:attr:`Handover.dispatched`), so the supervisor gets a row once.

A session's turn looks a replayed delivery up before its agent runs (another turn may have answered it since), one
statement a message. A row this host hands over for the first time needs no look: it is pending, since only the
shard's holder answers a row and it was pending under the term this host holds now (a pull read it so, or it was
added while this host held that term: its notification says under which epoch), and no turn of this host has had
it. Any other row goes as replayed and is looked up: handed over before (a new term, a row lost on the way, one
notified again after it was answered), or older than what this host remembers (:data:`_REMEMBERED`). A pull forgets
the rows no longer pending, and the puller drops the rows notified before a pull began: that pull read them. A row
notified whole is handed at once only while no older one can be waiting unread: not after the listener connected
again (it missed what was notified meanwhile: the host pulls first), nor while a pull finds more pending rows than
it reads (:attr:`Handover.backlog`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from hermes_actors.cluster.host.admin import ShardAdmin
from hermes_actors.cluster.host.keeper import ShardKeeper
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.host.timers import ShardTimers
from hermes_actors.cluster.turn_relay import EventRelay
from hermes_actors.messages import decode_inbound
from hermes_actors.runtime.assembly import Runtime
from hermes_actors.runtime.protocol import Deliver, Delivery
from hermes_actors.store.pg.shard_queue import ShardRow
from hermes_actors.store.pg.shards import ShardFence, shard_for_key, shard_of
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.records import InboxKind, InboxRow

__all__ = ["PULL_LIMIT", "Handover"]

_log = logging.getLogger(__name__)
PULL_LIMIT = 2000  # pending rows a pull reads
_SETTLE_S = 5.0  # a row handed over this long ago, in a supervisor holding nothing, was lost on the way
_REMEMBERED = 50_000  # ids of rows handed over kept in memory; an id at or below the oldest forgotten counts as handed


class Handover:
    """The rows one host handed to its supervisor and still pending, and the hand-over itself."""

    def __init__(
        self,
        settings: HostSettings,
        store: PostgresStore,
        fence: ShardFence,
        keeper: ShardKeeper,
        runtime: Runtime,
        *,
        timers: ShardTimers,
        admin: ShardAdmin,
        relay: EventRelay,
        settle: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._store = store
        self._fence = fence
        self._keeper = keeper
        self._runtime = runtime
        self._timers = timers
        self._admin = admin
        self._relay = relay
        self._settle = settle  # returns once what the supervisor submitted so far has committed
        self.lock = threading.Lock()
        self.dispatched: dict[int, tuple[int, float]] = {}  # inbox id -> (shard, monotonic time handed over)
        self._waiting: set[int] = set()  # reset rows left pending: held off by a background process, or settled
        self._relayed: dict[int, str] = {}  # inbox id -> message id, watched by the relay while pending
        self._handed: deque[tuple[int, float]] = deque(maxlen=20_000)  # (inbox id, when handed over), the latest
        self.pulls = self.rows_read = 0
        self.rows_notified = 0  # rows handed over as their notification brought them (no pull)
        self.backlog = False  # the last pull read as many rows as it may: older rows wait, so every row is pulled
        self._ever: set[int] = set()  # every row handed over by this host (the latest _REMEMBERED of them)
        self._ever_order: deque[int] = deque()
        self._floor = 0  # the highest id forgotten from _ever: an id up to it may have been handed over

    def forget(self, shards: set[int]) -> None:
        """New terms of ``shards``: the rows handed over under an earlier term are handed over again."""
        with self.lock:
            for inbox_id in [i for i, (s, _) in self.dispatched.items() if s in shards]:
                del self.dispatched[inbox_id]

    def pull(self, *, recheck: bool = True) -> int:
        """Hand the pending rows of the shards held (and not leaving) to the supervisor, each once; how many.

        Rows handed over already are looked at again only with ``recheck`` (the periodic pull, not a wake-up per
        message): a reset row settled since, or a row whose key now leads to a session of another shard (a
        ``/resume`` after it was handed over: its turn is refused here, and the row moves to that shard)."""
        terms = self._fence.held()
        shards = set(terms) - self._keeper.leaving()
        with self.lock:
            handed_over = set() if recheck else set(self.dispatched) | self._waiting
        # One statement: every pending id, and only the rows not handed over yet whole (with their key's route),
        # unless rechecking. A row handed over after ``handed_over`` was taken is read whole and skipped below.
        ids, rows = self._store.shard_queue.pull(sorted(shards), known=handed_over, limit=PULL_LIMIT)
        self.backlog = len(ids) >= PULL_LIMIT
        with self.lock:
            pending = set(ids)
            for inbox_id in [i for i in self.dispatched if i not in pending]:
                del self.dispatched[inbox_id]
            for inbox_id in [i for i in self._relayed if i not in pending]:
                self._runtime.services.watch.unwatch(self._relayed.pop(inbox_id))
            self._waiting &= pending
        self.pulls += 1
        self.rows_read += len(rows)
        after = self._fence.held()  # a shard whose term changed during the read: its rows are looked up again
        return self._hand(rows, terms, lambda shard, _: after.get(shard) == terms[shard])

    def hand(self, rows: list[ShardRow], epochs: dict[int, int]) -> int:
        """Hand over rows their notifications brought whole, of the shards held (and not leaving), each once; how
        many. The listener (or the puller, when the listener leaves them to it) calls it only for rows notified since
        the last pull began (older ones that pull read).
        ``epochs``: the epoch of each row's shard's holder when the row was added (:attr:`Notices.epochs`)."""
        leaving = self._keeper.leaving()
        # The terms of these rows' shards only (a message's row is one shard): every held term is not copied.
        terms = {shard: epoch for shard in {row[0] for row in rows} if (epoch := self._fence.epoch(shard)) is not None}
        held = [row for row in rows if row[0] in terms and row[0] not in leaving]
        self.rows_notified += len(held)
        return self._hand(held, terms, lambda shard, inbox_id: epochs.get(inbox_id) == terms[shard])

    def _first_time(self, inbox_id: int) -> bool:
        """Whether this host never handed ``inbox_id`` over before (as far as it remembers); it has now. Under
        :attr:`lock`."""
        if inbox_id <= self._floor or inbox_id in self._ever:
            return False
        self._ever.add(inbox_id)
        self._ever_order.append(inbox_id)
        if len(self._ever_order) > _REMEMBERED:
            forgotten = self._ever_order.popleft()
            self._ever.discard(forgotten)
            self._floor = max(self._floor, forgotten)
        return True

    def _hand(self, rows: list[ShardRow], terms: dict[int, int], pending: Callable[[int, int], bool]) -> int:
        """Hand ``rows`` to the supervisor under ``terms``; ``pending(shard, inbox_id)``: whether the row is known
        to have been pending under its shard's term in ``terms`` (a fresh delivery if handed for the first time)."""
        handed = 0
        for shard, row, route in rows:
            if row.kind is InboxKind.TIMER:
                handed += self._reset(row)
                continue
            if row.kind is InboxKind.ADMIN:  # an operator's rename, end or delete (hermesctl sessions --dsn)
                handed += self._admin.submit(row)
                continue
            target = shard_for_key(route, row.routing_key, self._settings.shards)
            if target != shard:  # its key leads to a session of another shard now (a /resume, say)
                self._store.shard_queue.reshard(row.id, target)
                continue
            term = terms.get(shard, 0)
            with self.lock:
                if row.id in self.dispatched:
                    continue
                self.dispatched[row.id] = (shard, time.monotonic())
                fresh = self._first_time(row.id) and pending(shard, row.id)
            message = decode_inbound(row.payload)
            # A row known to be pending goes as a fresh delivery: its turn does not look it up again (see above).
            delivery = Delivery(inbox_id=row.id, message=message, replayed=not fresh, term=term)
            if row.platform in self._settings.relay_platforms:
                self._watch_for_relay(row.id, delivery.message.message_id, live=message.streams is not False)
            # The supervisor checks its cached route against the stored one: another host may have moved the key
            # (a /resume, /new or reset while it held the shard).
            deliver = Deliver(routing_key=row.routing_key, delivery=delivery, check_route=True, stored_route=route)
            self._runtime.supervisor.tell(deliver)
            self._handed.append((row.id, time.time()))
            handed += 1
        return handed

    def lost_again(self) -> bool:
        """Forget the rows the supervisor lost on the way (an actor that died holding a turn, a delivery it failed
        to route while the store was away), so the next pull hands them over again; whether there were any.

        Lost means handed over, still pending, and no longer held by the supervisor. That is known only while the
        supervisor holds nothing (no turn running or queued): every row handed to it before it answered has then
        finished, and once what it submitted has committed (the writer's next commit), a row still pending was not
        answered."""
        asked = time.monotonic()
        with self.lock:
            if not any(at < asked - _SETTLE_S for _, at in self.dispatched.values()):
                return False
        held = self._runtime.supervisor.statistics()
        if held.running or held.queued_messages:
            return False
        self._settle()
        pending = set(self._store.shard_queue.pending_ids(sorted(self._fence.held()), limit=PULL_LIMIT))
        with self.lock:
            lost = sorted(i for i, (_, at) in self.dispatched.items() if at < asked and i in pending)
            for inbox_id in lost:
                del self.dispatched[inbox_id]
        if lost:
            _log.warning(
                "%s: rows %s were lost on the way to their sessions; handing them over again",
                self._settings.name,
                lost[:20],
            )
        return bool(lost)

    def _watch_for_relay(self, inbox_id: int, message_id: str, *, live: bool) -> None:
        """Relay the turn of ``message_id`` to the replica whose client waits on it (an API request): as it runs
        when the client reads it so (``live``), else only its stop."""
        with self.lock:
            self._relayed[inbox_id] = message_id
        events = self._relay.events(message_id) if live else self._relay.stops(message_id)
        self._runtime.services.watch.watch(message_id, events)

    def _reset(self, row: InboxRow) -> int:
        """A reset row: settle it, or hand its end to the supervisor once; how many were handed."""
        end = self._timers.take(row)
        with self.lock:
            if end is None:
                self._waiting.add(row.id)  # only the periodic pull looks at it again
                return 0
            self._waiting.discard(row.id)
            if row.id in self.dispatched:
                return 0
            self.dispatched[row.id] = (shard_of(end.session_id, self._settings.shards), time.monotonic())
        self._runtime.supervisor.tell(end)
        return 1

    def handovers(self) -> list[tuple[int, float]]:
        """The latest messages handed to the supervisor (at most 20,000): inbox id and the wall-clock time, for
        telling a message's wait for its pull from its wait in the runtime (``bench/cluster.py --profile``)."""
        return list(self._handed)
