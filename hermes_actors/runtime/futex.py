"""Size the process's futex hash for thousands of actor threads (Linux 6.16 and later).

Since Linux 6.16 a threaded process gets a private futex hash sized from its CPU count: 16 slots on a 2-core
machine. Every actor thread parks on its inbox with a futex, so with thousands of live sessions each slot holds
hundreds of waiters, and every wake-up walks its slot under a spinlock. ``prctl(PR_FUTEX_HASH,
PR_FUTEX_HASH_SET_SLOTS, n)`` gives the process ``n`` slots instead. With 8,192 slots, activating 10,000
sessions (``bench/throughput.py --only activate``) took 13.1 s instead of 21.6 s. Older kernels refuse the call
with ``EINVAL``, and then nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

__all__ = ["futex_slots_for", "size_futex_hash"]

_log = logging.getLogger(__name__)

PR_FUTEX_HASH = 78  # <linux/prctl.h>, Linux 6.16
PR_FUTEX_HASH_SET_SLOTS = 1
MAX_SLOTS = 65536


def futex_slots_for(threads: int) -> int:
    """The power of two (16 to 65,536) at or above ``threads``: about one slot per thread that may wait."""
    slots = 16
    while slots < threads and slots < MAX_SLOTS:
        slots *= 2
    return slots


def size_futex_hash(slots: int) -> bool:
    """Give this process ``slots`` private futex hash slots (0: the kernel's global hash); return whether the
    kernel took it. Call it at start, before the actor threads exist."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_FUTEX_HASH, PR_FUTEX_HASH_SET_SLOTS, slots, 0, 0) == 0:
        return True
    error = ctypes.get_errno()
    _log.debug("prctl(PR_FUTEX_HASH_SET_SLOTS, %d) refused: %s", slots, os.strerror(error))
    return False
