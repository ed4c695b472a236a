from __future__ import annotations

import sys

import pytest

from hermes_actors.runtime.futex import futex_slots_for, size_futex_hash


def test_the_hash_gets_a_power_of_two_slots_at_or_above_the_threads_within_bounds() -> None:
    assert [futex_slots_for(n) for n in (0, 16, 17, 5320, 8192, 12320, 10**6)] == [
        16,
        16,
        32,
        8192,
        8192,
        16384,
        65536,
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_a_size_the_kernel_refuses_changes_nothing_and_raises_nothing() -> None:
    # Not a power of two: Linux 6.16+ refuses it with EINVAL, older kernels refuse the unknown option likewise.
    assert size_futex_hash(3000) is False
