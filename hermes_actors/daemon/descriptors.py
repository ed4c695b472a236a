"""The process's file-descriptor limit, raised at start so idle clients cannot exhaust it.

Every HTTP listener holds up to ``daemon.http_max_connections`` sockets; the store, the media files, the adapters'
own connections and the control socket need more. Linux starts a process with a soft limit of 1,024 and usually
a hard limit far above it, so :func:`raise_descriptor_limit` lifts the soft limit to the hard one (at most
:data:`WANTED`) for installs not run by the shipped systemd unit (which sets ``LimitNOFILE=`` itself).
"""

from __future__ import annotations

import logging
import resource

__all__ = ["WANTED", "raise_descriptor_limit"]

_log = logging.getLogger(__name__)

WANTED = 65_536  # the shipped unit's LimitNOFILE=


def raise_descriptor_limit(needed: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` towards :data:`WANTED` (never past the hard limit) and return it; warn when
    it stays below ``needed`` (the descriptors the listeners may hold at their caps)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = WANTED if hard == resource.RLIM_INFINITY else min(WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:  # a container may forbid it
            _log.info("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
    if soft != resource.RLIM_INFINITY and soft < needed:
        _log.warning(
            "the open-file limit is %d, below the %d the HTTP listeners may hold at daemon.http_max_connections: "
            "raise it (LimitNOFILE= in the unit, ulimit -n) or lower daemon.http_max_connections",
            soft,
            needed,
        )
    return int(soft)
