"""Sending the replies the shard hosts committed: each account's outbox rows sent by one replica of the cluster.

Shard hosts commit replies and leave them in the outbox. An :class:`OutboxDispatcher` runs in every
``hermesd --cluster`` replica with the senders it has, each for a set of rows under a role lease
(:class:`~hermes_actors.cluster.replica.roles.RoleTerm`), and claims those rows only while it holds the role:

- a push platform's sender sends every account of it under ``send:<platform>``, which the dispatcher competes for
  itself (for a platform split by account, :class:`~hermes_actors.section_parts.SectionParts`, only the accounts
  it serves);
- a leased account's sender, offered while its adapter runs here, sends that account's rows under the adapter's
  own term ``adapter:<platform>:<account>``: the replica polling a bot is the one sending its replies.

So each sender, and the rate limits kept inside it, runs in exactly one process of the cluster: the limits hold
cluster-wide. Rows of ``api_server`` are never dispatched here (the API server answers them to the waiting request).

Claims take the head of each chat (:class:`~hermes_actors.store.pg.outbox_claims.OutboxClaims`, ``FOR UPDATE SKIP
LOCKED``): a chat's next reply is claimed only after its head was sent or given up, so replies reach a chat in
commit order. Sends run on :class:`~hermes_actors.runtime.lanes.LaneWorkers`, one at a time per chat and several
chats at once, so a sender sleeping in its rate limiter for one chat holds up only that chat.

Each send mirrors the single-machine outbox (:mod:`hermes_actors.runtime.outbox`): its attempt is counted first, by
the statement that claims the row, which claims only rows of targets whose role term the database says is held (a
replica whose term ended claims and sends nothing; a claimed row not sent after all has its attempt taken back). A
row sent is recorded sent by the next claim's own statement (:mod:`~hermes_actors.cluster.replica.held_marks`),
which then claims its chat's next reply, or apart when no claim comes (nothing to claim for, every lane busy,
:meth:`OutboxDispatcher.wait_idle`, the stop); a replica that dies first has it sent again, flagged. A row with
attempts but no ``sent_at`` whose outcome this process does not know is sent again with ``possible_duplicate``
unless the sender's sends are idempotent; a failure is retried with exponential backoff or after the platform's
``retry_after``, a permanent one gives the reply up (``give_up``: recording the dead letters of what it answered, as
the single-machine outbox does). A dispatcher that dies mid-send leaves a claim that runs out.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping

import msgspec

from hermes_actors.cluster.replica.held_marks import HeldMarks
from hermes_actors.cluster.replica.roles import RoleTerm, send_role
from hermes_actors.cluster.replica.send_units import ChatKey, SendUnit, chat_of
from hermes_actors.errors import RoleLostError
from hermes_actors.messages import decode_outbound
from hermes_actors.ports import ReplySender, SendError
from hermes_actors.runtime.lanes import LaneWorkers
from hermes_actors.runtime.outbox import GiveUp, abandon
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.store.pg.turn_relay import OUTBOX_CHANNEL, RelayListener, reply_notice
from hermes_actors.store.records import OutboxRow

__all__ = ["NOT_DISPATCHED", "OutboxDispatcher"]

_log = logging.getLogger(__name__)

NOT_DISPATCHED = frozenset({"api_server"})
"""Platforms whose rows no dispatcher sends (the API server answers its replies to the waiting request)."""


class OutboxDispatcher:
    """Sends the replies of the roles it holds with the senders offered for them; :meth:`dispatch_once` or a thread.

    ``senders`` (by platform) are offered from the start under ``send:<platform>``; :meth:`offer` and
    :meth:`withdraw` change them later (a leased adapter's senders come and go with its term). ``lanes`` sends run
    at once, at most one per chat; a claim lasts ``claim_s`` by the database clock; a ``send:`` role term lasts
    ``role_ttl_s`` and is renewed every third of it.
    """

    def __init__(
        self,
        store: PostgresStore,
        senders: Mapping[str, ReplySender],
        *,
        name: str,
        lanes: int = 16,
        role_ttl_s: float = 10.0,
        claim_s: float = 30.0,
        retry_base_s: float = 2.0,
        retry_max_s: float = 300.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        give_up: GiveUp = abandon,
    ) -> None:
        self._store = store
        self._give_up = give_up
        self._name = name
        self._clock = clock
        self._monotonic = monotonic
        self._role_ttl = role_ttl_s
        self._claim_s = claim_s
        self._retry = (retry_base_s, retry_max_s)
        self._workers = LaneWorkers(f"dispatch-{name}", lanes)
        self._lock = threading.Condition()
        self._units: dict[tuple[str, str], SendUnit] = {}  # (role, platform) -> the sender offered
        self._owned: dict[str, RoleTerm] = {}  # send: roles kept here: offered, or withdrawn with sends under way
        self._kept_at: float | None = None
        self._busy: dict[ChatKey, tuple[int, str]] = {}  # chat -> the row being sent to it, and its role
        self._marks = HeldMarks()  # rows sent, recorded by the next claim's statement
        self._suspect: dict[int, bool] = {}  # rows failed here -> whether an attempt of theirs may have left
        self._wake = threading.Event()
        # A claim runs when a reply of a platform served here is queued (the listener counts those in _news), and
        # after a send only when it may find something: the sent row had a reply of its chat behind it, a reply
        # was queued since its claim, or the last claim left rows (_again: it took all it could, or dropped some).
        self._news = 0
        self._again = False
        self._capped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._replies: RelayListener | None = None  # the listener thread's connection, closed by stop()
        for platform, sender in senders.items():
            self.offer(platform, sender)

    # -- senders and roles ---------------------------------------------------------------------------------------

    def offer(
        self,
        platform: str,
        sender: ReplySender,
        *,
        accounts: Iterable[str] | None = None,
        term: RoleTerm | None = None,
    ) -> None:
        """Send ``platform``'s replies (only those of ``accounts``, when given) with ``sender`` while ``term`` is
        held: a leased adapter's term, which its adapter keeps; without one, ``send:<platform>``, which this
        dispatcher competes for and keeps itself."""
        if platform in NOT_DISPATCHED:
            return
        with self._lock:
            if term is None:
                role = send_role(platform)
                term = self._owned.get(role) or RoleTerm(
                    self._store.roles, role, self._name, ttl_s=self._role_ttl, monotonic=self._monotonic
                )
                self._owned[role] = term
            chosen = None if accounts is None else frozenset(accounts)
            self._units[(term.role, platform)] = SendUnit(platform, chosen, sender, term)
            self._kept_at = None  # compete at once
        self._wake.set()

    def withdraw(self, role: str) -> None:
        """Stop sending with the senders offered under ``role``; a ``send:`` role is released once its sends
        under way have finished."""
        with self._lock:
            for key in [key for key in self._units if key[0] == role]:
                del self._units[key]
            self._kept_at = None  # release it at the next round when nothing is under way
        self._wake.set()

    def held(self) -> set[str]:
        """The roles held now (by their local deadlines) that this dispatcher has senders for."""
        with self._lock:
            terms = {unit.term for unit in self._units.values()}
        return {term.role for term in terms if term.epoch() is not None}

    def _keep_roles(self) -> None:
        """Every third of a term: renew the send: roles held, try the free ones, release the withdrawn ones at
        rest (a leased adapter keeps its own term)."""
        now = self._monotonic()
        if self._kept_at is not None and now - self._kept_at < self._role_ttl / 3:
            return
        self._kept_at = now
        with self._lock:
            owned = dict(self._owned)
            offered = {role for role, _ in self._units}
            busy = {role for _, role in self._busy.values()}
            leaving = [role for role in owned if role not in offered and role not in busy]
            for role in leaving:
                del self._owned[role]
        for role, term in owned.items():
            if role in leaving:
                term.release()
            else:
                term.keep()

    # -- claiming and sending ------------------------------------------------------------------------------------

    def dispatch_once(self, limit: int = 100, *, wait: bool = True) -> int:
        """Keep the roles, claim up to ``limit`` heads of chats of the roles held and start their sends; with
        ``wait``, return once those sends have finished. How many rows were started."""
        self._keep_roles()
        with self._lock:
            units = list(self._units.values())
            free = min(limit, self._workers.size - len(self._busy))
            news = self._news  # read before the claim: a reply queued after it counts as news for its sends
        # Each target with the term it is sent under: the claim counts each row's attempt under that term.
        serving = {target: unit for unit in units if unit.term.epoch() is not None for target in unit.targets()}
        targets = sorted(serving)
        if not targets or free <= 0:
            with self._lock:
                self._again = bool(targets)  # every lane busy: claim again when a send ends
            self._write_marks()  # no claim to carry them
            return 0
        try:
            under = self._store.roles.held_among_query([serving[target].term.held() for target in targets])
        except RoleLostError:  # a term's local deadline passed since: the next round leaves it out
            self._write_marks()
            return 0
        marks = self._marks.take()
        try:
            claimed = self._store.outbox_claims.claim(
                self._name, limit=free, lease_s=self._claim_s, targets=targets, under=under, sent=marks
            )
        except BaseException:
            self._marks.put_back(marks)
            raise
        rows = claimed.rows
        started: list[int] = []
        dropped: list[int] = []
        kept: list[int] = []
        for row in rows:
            key = chat_of(row)
            unit = serving[targets[claimed.via[row.id]]]
            with self._lock:
                if key in self._busy:
                    if self._busy[key][0] != row.id:  # the chat's next reply, its head's send just ending: next round
                        dropped.append(row.id)
                    else:  # our own claim ran out while the row is still being sent: it stays ours, sent once
                        kept.append(row.id)
                    continue
                if self._units.get((unit.term.role, unit.platform)) is not unit:  # withdrawn meanwhile
                    dropped.append(row.id)
                    continue
                self._busy[key] = (row.id, unit.term.role)
            started.append(row.id)
            followed = row.id in claimed.followed
            self._workers.run(functools.partial(self._attempt, row, unit.sender, unit.term, followed, news))
        with self._lock:
            self._capped = len(rows) >= free
            self._again = self._capped or bool(dropped)
        if dropped:
            self._store.outbox_claims.uncount(self._name, dropped, unclaim=True)
        if kept:
            self._store.outbox_claims.uncount(self._name, kept, unclaim=False)
        if wait:
            with self._lock:
                self._lock.wait_for(lambda: not set(started) & {r for r, _ in self._busy.values()}, self._claim_s)
            self._write_marks()
        return len(started)

    def _attempt(self, row: OutboxRow, sender: ReplySender, term: RoleTerm, followed: bool, news: int) -> None:
        """Send ``row`` on a lane; then wake the claims if the chat's next reply (``followed``), a reply queued
        since the claim (the listener's count moved past ``news``) or rows the claim left may be waiting."""
        try:
            self._send(row, sender, term)
        except Exception:
            _log.exception("dispatcher %s: reply %d could not be handled; its claim runs out", self._name, row.id)
        finally:
            with self._lock:
                self._busy.pop(chat_of(row), None)
                self._lock.notify_all()
                wake = followed or self._again or self._news != news
            if wake:
                self._wake.set()

    def _send(self, row: OutboxRow, sender: ReplySender, term: RoleTerm) -> None:
        claims = self._store.outbox_claims
        if term.epoch() is None:  # the term ran out locally since the claim counted the attempt: nothing is sent
            _log.info("dispatcher %s: reply %d not sent: %s's term ended", self._name, row.id, term.role)
            claims.uncount(self._name, [row.id], unclaim=True)
            return
        attempt = row.attempts + 1  # counted by the claim, under the term
        message = msgspec.structs.replace(decode_outbound(row.payload), outbox_id=row.id)
        with self._lock:  # an attempt before this process knew the row, or one of unknown outcome, may have left
            suspect = self._suspect.get(row.id, row.attempts > 0)
        if suspect and not sender.idempotent_sends and not message.possible_duplicate:
            message = msgspec.structs.replace(message, possible_duplicate=True)
        base, cap = self._retry
        # Each outcome is recorded with the claim's end in one statement (the claim ends with the row settled).
        try:
            platform_id = sender.send(message)
        except SendError as exc:
            if exc.permanent or message.no_retry:
                _log.warning("dispatcher %s: reply %d failed and is given up: %s", self._name, row.id, exc)
                with self._store.transaction():
                    self._give_up(self._store, row.id, message, str(exc))
                self._remember(row.id, None)
                claims.unclaim(self._name, [row.id])
            else:
                wait = exc.retry_after_s if exc.retry_after_s is not None else min(cap, base * 2 ** (attempt - 1))
                _log.warning("dispatcher %s: reply %d failed (%s); retry in %.1f s", self._name, row.id, exc, wait)
                self._remember(row.id, suspect or exc.outcome_unknown)
                claims.failed(self._name, row.id, str(exc), self._clock() + wait)
        except Exception as exc:  # of unknown outcome: the next attempt is flagged
            _log.exception("dispatcher %s: the sender failed on reply %d", self._name, row.id)
            self._remember(row.id, True)
            claims.failed(self._name, row.id, f"the sender failed: {exc!r}", self._clock() + base)
        else:  # recorded by the next claim (at once when the chat has another reply waiting: _attempt wakes it)
            self._marks.hold([(row.id, platform_id)])
            self._remember(row.id, None)

    def _remember(self, outbox_id: int, suspect: bool | None) -> None:
        """After a failed attempt, whether the row is suspect from now on; ``None``: done with it (sent, given up)."""
        with self._lock:
            if suspect is None:
                self._suspect.pop(outbox_id, None)
            else:
                self._suspect[outbox_id] = suspect

    # -- the thread ----------------------------------------------------------------------------------------------

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no send is under way, and record the sends held; whether none is under way."""
        with self._lock:
            idle = self._lock.wait_for(lambda: not self._busy, timeout)
        self._write_marks()
        return idle

    def _write_marks(self) -> None:
        """Record the sends held, in one statement; held again for the next claim if that fails."""
        self._marks.flush(lambda marks: self._store.outbox_claims.sent(self._name, marks), f"{self._name}'s replies")

    def start(self, interval_s: float = 0.2, *, listen: bool = True) -> None:
        """Dispatch on a thread of its own until :meth:`stop`: at once when a reply of a platform it serves is
        queued (``NOTIFY hermes_outbox``), and every ``interval_s`` anyway (a retry coming due, a notification lost
        while a listener reconnected). With ``listen`` it listens on a connection of its own; without, whoever
        listens in this process already (the replica's :class:`~hermes_actors.cluster.replica.api_replies.ApiReplies`)
        tells it with :meth:`notified`, and PostgreSQL wakes one listener of the replica per notice instead of two."""
        self._thread = threading.Thread(target=self._run, args=(interval_s,), name=f"dispatch-{self._name}")
        self._thread.daemon = True
        self._thread.start()
        if listen:
            self._listener = threading.Thread(target=self._listen, name=f"dispatch-{self._name}-listen", daemon=True)
            self._listener.start()

    def notified(self, platforms: Collection[str] | None) -> None:
        """Replies of ``platforms`` were queued (``None``: notices may have been missed, a listener reconnected):
        claim at once if it serves any of them."""
        with self._lock:
            served = {platform for _, platform in self._units}
            news = platforms is None or not served.isdisjoint(platforms)
            if news:
                self._news += 1
        if news:
            self._wake.set()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                listener = self._replies
                if listener is None:
                    listener = self._replies = RelayListener(self._store.database.dsn, channels=(OUTBOX_CHANNEL,))
                    if self._stop.is_set():  # stop() came while it connected, and closed nothing
                        break
                platforms = {reply_notice(payload)[0] for _, payload in listener.wait(1.0)}
            except Exception as exc:
                if self._stop.is_set():
                    break
                _log.info("dispatcher %s: listening for replies failed (%s); polling meanwhile", self._name, exc)
                self._close_listener()
                self._stop.wait(1.0)
                continue
            if platforms:
                self.notified(platforms)
        self._close_listener()

    def _close_listener(self) -> None:
        listener, self._replies = self._replies, None
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                # At once again only when the claim took as many rows as it could: more may be due.
                if self.dispatch_once(wait=False) == 0 or not self._capped:
                    self._wake.wait(interval_s)
            except Exception:
                _log.exception("outbox dispatcher %s failed; trying again", self._name)
                self._stop.wait(1.0)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, let the sends under way finish (up to ``timeout``) and release the roles held."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._listener is not None:
            self._close_listener()  # a waiting listener returns at once
            self._listener.join(timeout=timeout)
        self.wait_idle(timeout)
        self._workers.close()
        with self._lock:
            terms = list(self._owned.values())
        for term in terms:
            term.release()
