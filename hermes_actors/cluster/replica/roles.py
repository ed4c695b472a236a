"""One role term as a ``hermesd --cluster`` replica holds it in memory: the epoch and the local deadline
(:class:`~hermes_actors.store.held_terms.HeldTerms`, as a shard host holds its shards).

:class:`RoleTerm` wraps a role of :class:`~hermes_actors.store.pg.roles.PgRoles` (``adapter:<platform>:<account>``,
``send:<platform>``). :meth:`RoleTerm.keep` takes the role when it is free and renews it while held; the local
deadline is measured from before the statement was sent, so it ends no later than the database's term, and past it
:meth:`RoleTerm.epoch` answers ``None`` on its own (self-fencing) before the replica has even heard that another
one took over. :meth:`RoleTerm.check`, inside the transaction of a guarded write, checks the local deadline first,
then the database row ``FOR KEY SHARE``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from hermes_actors.errors import RoleLostError, StoreError
from hermes_actors.store.held_terms import HeldTerms
from hermes_actors.store.pg.roles import PgRoles

__all__ = ["RoleTerm", "adapter_role", "send_role"]

_log = logging.getLogger(__name__)


def adapter_role(platform: str, account: str) -> str:
    """The role of running the long-poll or socket adapter of ``platform``'s ``account`` (its ``account_id``), and
    of sending that account's replies."""
    return f"adapter:{platform}:{account}"


def send_role(platform: str) -> str:
    """The role of sending the replies of ``platform``'s accounts that are not leased (its senders and their rate
    limits)."""
    return f"send:{platform}"


class RoleTerm:
    """``holder``'s term of ``role`` (``ttl_s`` long, renewed by :meth:`keep`); safe to share between threads."""

    def __init__(
        self,
        roles: PgRoles,
        role: str,
        holder: str,
        *,
        ttl_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role = role
        self.holder = holder
        self.ttl_s = ttl_s
        self._roles = roles
        self._monotonic = monotonic
        self._term = HeldTerms[str](holder, monotonic=monotonic, on_expired=self._ran_out)

    def _ran_out(self, roles: list[str]) -> None:
        _log.warning("%s: the term of %s ran out locally; it is no longer held", self.holder, self.role)

    def epoch(self) -> int | None:
        """The epoch held, or ``None`` when not held or past the local deadline (the term is then forgotten)."""
        return self._term.epoch(self.role)

    def keep(self) -> bool:
        """Renew the term when held, else try to take the role; whether it is held now. A store error counts as
        not renewed (the local deadline still runs: a replica that cannot reach the database fences itself)."""
        epoch = self.epoch()
        asked_at = self._monotonic()
        try:
            if epoch is not None:
                kept = self._roles.renew(self.role, self.holder, epoch, self.ttl_s)
                if not kept:
                    _log.warning("%s: lost %s at epoch %d (expired or taken)", self.holder, self.role, epoch)
            else:
                epoch = self._roles.acquire(self.role, self.holder, self.ttl_s)
                kept = epoch is not None
                if epoch is not None:
                    _log.info("%s: took %s at epoch %d", self.holder, self.role, epoch)
        except StoreError as exc:
            _log.warning("%s: could not renew or take %s: %s", self.holder, self.role, exc)
            return self.epoch() is not None
        if kept and epoch is not None:
            self._term.grant({self.role: epoch}, self.ttl_s, asked_at=asked_at)
        else:
            self._term.drop([self.role])
        return kept

    def release(self) -> None:
        """End the term now (another replica may take the role at once); nothing when not held."""
        epoch = self._term.drop([self.role]).get(self.role)
        if epoch is None:
            return
        try:
            self._roles.release(self.role, self.holder, epoch)
        except StoreError as exc:
            _log.warning("%s: could not release %s (it runs out by itself): %s", self.holder, self.role, exc)

    def held(self) -> tuple[str, str, int]:
        """The term as (role, holder, epoch), for a statement that writes only under it
        (:meth:`~hermes_actors.store.pg.roles.PgRoles.held_among_query`); :class:`RoleLostError` at once when the
        local deadline has passed."""
        epoch = self.epoch()
        if epoch is None:
            raise RoleLostError(f"{self.holder} does not hold {self.role} (or its term ran out locally)")
        return self.role, self.holder, epoch

    def check(self) -> None:
        """Inside a transaction: :class:`RoleLostError` unless the term is held by the local deadline and by the
        database (its row is then held ``FOR KEY SHARE`` until the transaction ends)."""
        epoch = self.epoch()
        if epoch is None:
            raise RoleLostError(f"{self.holder} does not hold {self.role} (or its term ran out locally)")
        self._roles.check(self.role, self.holder, epoch)
