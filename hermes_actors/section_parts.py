"""How a platform section with several accounts runs in cluster mode: the type the platforms and the cluster share.

Platforms build it (``platforms.support.cluster_parts``);
:class:`~hermes_actors.cluster.replica.entry_points.ClusterReplica` runs it.
"""

from __future__ import annotations

import msgspec

__all__ = ["SectionParts"]


class SectionParts(msgspec.Struct, frozen=True, kw_only=True):
    """How a platform section with several accounts runs in cluster mode, split by account.

    ``served`` is the section cut down to the accounts the platform calls (webhook or callback mode; ``None`` when
    there are none): every replica serves it, like a push platform, and its replies are sent for
    ``served_accounts``. ``leased`` holds one section per long-poll or socket account, keyed by the ``account_id``
    its messages and replies carry: each is run by the one replica holding that account's role lease.
    """

    served: msgspec.Struct | None = None
    served_accounts: frozenset[str] = frozenset()
    leased: dict[str, msgspec.Struct] = msgspec.field(default_factory=dict)
