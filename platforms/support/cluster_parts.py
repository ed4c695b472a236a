"""A platform section split by account for cluster mode (:class:`~hermes_actors.section_parts.SectionParts`).

In cluster mode each long-poll or socket account is a singleton of its own: a Telegram bot polled by two replicas
loses updates, a Discord gateway opened twice delivers every event twice. The platforms with such accounts define
``cluster_parts(config)`` with :func:`split_accounts`: one section per such account, cut down to it, keyed by the
``account_id`` its messages carry (the account's name in the section, QQ Bot's app id, Signal's number); the
accounts the platform calls instead (webhook or callback mode) stay together in one section every replica serves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from hermes_actors.section_parts import SectionParts

__all__ = ["split_accounts"]

C = TypeVar("C", bound=msgspec.Struct)


def _named(name: str, account: Any) -> str:
    return name


def _polled(account: Any) -> bool:
    return False


def split_accounts(
    config: C,
    field: str,
    *,
    wire_id: Callable[[str, Any], str] = _named,
    served: Callable[[Any], bool] = _polled,
) -> SectionParts:
    """Split ``config``'s accounts, the mapping (or list) in its ``field``: those ``served`` is true of into one
    section, each other one into a section of its own keyed by ``wire_id(name, account)`` (for a list, the name
    is the item)."""
    found: Mapping[str, Any] | list[str] = getattr(config, field)
    accounts = dict.fromkeys(found, None) if isinstance(found, list) else dict(found)
    keep = list if isinstance(found, list) else dict

    def cut(names: list[str]) -> C:
        return msgspec.structs.replace(config, **{field: keep({n: accounts[n] for n in names})})

    called = [name for name, account in accounts.items() if account is not None and served(account)]
    leased: dict[str, msgspec.Struct] = {
        wire_id(name, account): cut([name]) for name, account in accounts.items() if name not in called
    }
    return SectionParts(
        served=cut(called) if called else None,
        served_accounts=frozenset(wire_id(name, accounts[name]) for name in called),
        leased=leased,
    )
