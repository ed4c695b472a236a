"""The entry points of one ``hermesd --cluster`` replica, without Ray: what
:func:`~hermes_actors.cluster.replica.service.serve_cluster` runs beside the shard hosts, and what the tests run two
of.

Each enabled platform section runs where the platform registry places it (``placement``, by default
:func:`platforms.registry.placement`, handed in with ``build`` and ``parts``):

- **push**: its adapter runs on every replica (a load balancer spreads the requests; a redelivery adds nothing, the
  inbox rows being unique). Its sender may run in another replica than the adapter that took a message, so what it
  needs of that message it reads from the store through the inbox: Teams' conversation addresses (cursors committed
  with each activity), WhatsApp's 24-hour windows (the inbox rows); the others need nothing but their configuration
  (Feishu's and WeCom's tokens are fetched per process);
- **leased** (the platforms with long-poll or socket accounts): the section is split by account (``parts``,
  :class:`~hermes_actors.section_parts.SectionParts`). Each long-poll or socket account is run by the one replica
  holding ``adapter:<platform>:<account>`` (:class:`~hermes_actors.cluster.replica.singleton.LeasedAdapter`), which
  also sends that account's replies; the accounts the platform calls (Telegram webhook bots, QQ Bot callback bots,
  DingTalk in callback mode) are served together on every replica, like a push platform;
- **request** (the API server): run on every replica like a push adapter, but its clients wait for their replies,
  so each reply goes to the replica whose request waits for it
  (:class:`~hermes_actors.cluster.replica.api_replies.ApiReplies`, one per replica), never to a dispatcher;
- anything else (a platform the registry does not place): skipped with a warning.

The replica's :class:`~hermes_actors.cluster.replica.dispatch.OutboxDispatcher` is offered the push adapters' senders
at start, which send under ``send:<platform>``, and a leased adapter's senders while it runs here (a sender may need
its adapter started: WeChat's reads the context tokens its adapter stores), which send under the adapter's term.
It hears of queued replies from the replica's first ``ApiReplies`` where the API server runs (one listening
connection for both), else on a connection of its own.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence

import msgspec

from hermes_actors.cluster.replica.api_replies import ApiReplies
from hermes_actors.cluster.replica.dispatch import OutboxDispatcher
from hermes_actors.cluster.replica.fingerprint import differences
from hermes_actors.cluster.replica.inbox import ClusterInbox
from hermes_actors.cluster.replica.roles import RoleTerm, adapter_role
from hermes_actors.cluster.replica.singleton import LeasedAdapter
from hermes_actors.ports import Adapter, ReplySender
from hermes_actors.runtime.outbox import GiveUp, abandon
from hermes_actors.runtime.platform_board import PlatformBoard
from hermes_actors.section_parts import SectionParts
from hermes_actors.store.pg.store import PostgresStore
from hermes_actors.waiters import ReplyWaiters
from platforms import registry

__all__ = ["ClusterReplica", "replica_name"]

_log = logging.getLogger(__name__)

Build = Callable[[str, msgspec.Struct], Adapter]


class ClusterReplica:
    """Push adapters, leased adapters and the dispatcher of one replica named ``name`` (unique in the cluster)."""

    def __init__(
        self,
        store: PostgresStore,
        inbox: ClusterInbox,
        platforms: Mapping[str, msgspec.Struct],
        *,
        build: Build,
        name: str,
        role_ttl_s: float = 10.0,
        dispatch_interval_s: float = 1.0,  # a backstop: the dispatcher wakes on each reply queued
        enabled: Callable[[msgspec.Struct], bool] = lambda config: bool(getattr(config, "enabled", True)),
        board: PlatformBoard | None = None,
        parts: Callable[[str, msgspec.Struct], SectionParts | None] = registry.cluster_parts,
        placement: Callable[[str], str] = registry.placement,
        shared_config: tuple[str, str] = ("", ""),
        give_up: GiveUp = abandon,
    ) -> None:
        self.name = name
        # cluster_config(): the config's part the replicas must agree on (text, secrets masked) and its digest
        self._config, self._fingerprint = shared_config
        self._beat_s = role_ttl_s / 3
        self._stopped = threading.Event()
        self._beating = threading.Thread(target=self._beat_loop, name=f"replica-beat-{name}", daemon=True)
        self._store = store
        self._inbox = inbox
        self._interval = dispatch_interval_s
        self.push: list[Adapter] = []
        self.replies: list[ApiReplies] = []
        self._board = board or PlatformBoard()
        self._requests: dict[str, msgspec.Struct] = {}
        self.leased: dict[tuple[str, str], LeasedAdapter] = {}  # (platform, account) -> its singleton
        self.dispatcher = OutboxDispatcher(store, {}, name=name, role_ttl_s=role_ttl_s, give_up=give_up)
        self._sections: dict[str, tuple[msgspec.Struct, frozenset[str] | None]] = {}  # served here, for accounts
        for platform, config in platforms.items():
            if not enabled(config):
                self._board.disabled(platform)
                continue
            where = placement(platform)
            if where == "push":
                self._sections[platform] = (config, _named_accounts(platform, config))
            elif where == "request":
                self._requests[platform] = config
            elif where == "leased":
                split = parts(platform, config)
                if split is None:  # a platform the registry does not split: served whole, like a push one
                    self._sections[platform] = (config, None)
                    continue
                if split.served is not None:
                    self._sections[platform] = (split.served, split.served_accounts)
                for account, section in split.leased.items():
                    term = RoleTerm(store.roles, adapter_role(platform, account), name, ttl_s=role_ttl_s)
                    self.leased[(platform, account)] = LeasedAdapter(
                        platform,
                        account,
                        functools.partial(build, platform, section),
                        term,
                        inbox=inbox,
                        senders=self._senders,
                        board=self._board,
                    )
            else:
                _log.warning("platform %s is not run in cluster mode: the registry does not place it", platform)
        self._build = build

    def _senders(self, leased: LeasedAdapter, senders: Sequence[ReplySender] | None) -> None:
        """A leased adapter's senders, offered for its account under its term while it runs here (``None``:
        withdrawn)."""
        if senders is None:
            self.dispatcher.withdraw(leased.term.role)
            return
        for sender in senders:
            self.dispatcher.offer(sender.platform, sender, accounts=[leased.account], term=leased.term)

    def start(self, *, heartbeats: bool = True) -> None:
        """Start the push adapters and the dispatcher, and (with ``heartbeats``) the leased adapters' heartbeats;
        without, :meth:`LeasedAdapter.tick` is the caller's to call."""
        for platform, (config, accounts) in self._sections.items():
            adapter = self._build(platform, config)
            adapter.start(self._inbox)
            self._board.started(platform, adapter)
            self.push.append(adapter)
            for sender in adapter.senders():
                self.dispatcher.offer(sender.platform, sender, accounts=accounts)
        for platform, config in self._requests.items():
            adapter = self._build(platform, config)
            for waiters in adapter.senders():
                if not isinstance(waiters, ReplyWaiters):
                    raise TypeError(f"{platform}'s sender {waiters!r} is not a ReplyWaiters: it answers no request")
                tell = None if self.replies else self.dispatcher.notified  # the first one listens for it
                replies = ApiReplies(self._store.database.dsn, self._store, waiters, self._inbox.watch, on_outbox=tell)
                replies.start()
                self.replies.append(replies)
            adapter.start(self._inbox)
            self._board.started(platform, adapter)
            self.push.append(adapter)
        self.dispatcher.start(self._interval, listen=not self.replies)
        if heartbeats:
            for leased in self.leased.values():
                leased.start()
        self._compare_configs()
        self._beating.start()

    def _beat(self) -> None:
        self._store.replicas.beat(self.name, fingerprint=self._fingerprint, settings=self._config)

    def _beat_loop(self) -> None:
        """Beat (``cluster_replicas``) until stopped; a failed beat waits for the next."""
        while not self._stopped.wait(self._beat_s):
            try:
                self._beat()
            except Exception as exc:
                _log.debug("replica %s: heartbeat failed: %s", self.name, exc)

    def _compare_configs(self) -> None:
        """Beat once, and warn naming the settings that differ from a live replica's (item 3 of issue 37: a
        route known to one replica only goes wrong wherever its replies leave from)."""
        try:
            self._beat()
            others = [
                r for r in self._store.replicas.beats() if r.name != self.name and r.seen_s_ago < 3 * self._beat_s
            ]
        except Exception as exc:
            _log.warning("replica %s: could not compare its config with the other replicas': %s", self.name, exc)
            return
        for other in others:
            if other.fingerprint and self._fingerprint and other.fingerprint != self._fingerprint:
                _log.warning(
                    "replica %s runs another config than replica %s (fingerprint %s, theirs %s); they differ in %s. "
                    "Every replica of a cluster needs the same cluster: and platforms: sections",
                    self.name,
                    other.name,
                    self._fingerprint,
                    other.fingerprint,
                    ", ".join(differences(self._config, other.settings)),
                )

    def stop(self) -> None:
        """Stop every adapter (releasing the leased ones' roles) and the dispatcher (releasing its roles), and
        leave the replicas' list."""
        self._stopped.set()
        if self._beating.is_alive():
            self._beating.join(timeout=5)
            try:
                self._store.replicas.forget(self.name)
            except Exception as exc:
                _log.info("replica %s: not removed from the replicas' list (%s); it shows as silent", self.name, exc)
        for leased in self.leased.values():
            leased.close()
        for adapter in self.push:
            adapter.stop()  # the API drains first: its waiting requests still get their replies
        for replies in self.replies:
            replies.close()
        self.dispatcher.stop()


def _named_accounts(platform: str, config: msgspec.Struct) -> frozenset[str] | None:
    """The accounts of a push section whose replies need its own config to be sent (``None``: every account):
    a webhook reply goes to its route's ``callback_url``, so a replica sends only the routes it knows, and a reply
    of a route another replica alone knows waits for a dispatcher that knows it instead of being marked sent
    unsent (replicas warn at start when their configs differ)."""
    routes = getattr(config, "routes", None) if platform == "webhook" else None
    return frozenset(routes) if isinstance(routes, Mapping) else None


def replica_name(hostname: str) -> str:
    """A name unique to this process in the cluster: host name and pid."""
    return f"{hostname}:{os.getpid()}"
