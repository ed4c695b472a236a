"""The APSW ``Store`` satisfies the store interface: checked by mypy (the typed assignments) and at run time."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import pytest

from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.interface import Maintenance, SessionDirectory, Transcripts
from hermes_actors.store.table_interface import (
    AttachmentIndex,
    CursorTable,
    HomeChannelTable,
    InboxQueue,
    LeaseTable,
    MemoryTable,
    OutboxQueue,
    ResponseTable,
    TimerTable,
)


def test_the_store_is_a_store_interface_to_the_type_checker(store: Store) -> None:
    whole: StoreInterface = store  # mypy rejects this line if Store misses or mistypes a member
    sessions: SessionDirectory = store
    transcripts: Transcripts = store
    maintenance: Maintenance = store
    inbox: InboxQueue = store.inbox
    outbox: OutboxQueue = store.outbox
    leases: LeaseTable = store.leases
    timers: TimerTable = store.timers
    kv: CursorTable = store.kv
    homes: HomeChannelTable = store.homes
    memories: MemoryTable = store.memories
    attachments: AttachmentIndex = store.attachments
    responses: ResponseTable = store.responses
    assert all(
        x is not None
        for x in (
            whole,
            sessions,
            transcripts,
            maintenance,
            inbox,
            outbox,
            leases,
            timers,
            kv,
            homes,
            memories,
            responses,
        )
    )
    assert attachments is store.attachments


@pytest.mark.parametrize(
    ("protocol", "part"),
    [
        (StoreInterface, lambda s: s),
        (SessionDirectory, lambda s: s),
        (Transcripts, lambda s: s),
        (Maintenance, lambda s: s),
        (InboxQueue, lambda s: s.inbox),
        (OutboxQueue, lambda s: s.outbox),
        (LeaseTable, lambda s: s.leases),
        (TimerTable, lambda s: s.timers),
        (CursorTable, lambda s: s.kv),
        (HomeChannelTable, lambda s: s.homes),
        (MemoryTable, lambda s: s.memories),
        (AttachmentIndex, lambda s: s.attachments),
        (ResponseTable, lambda s: s.responses),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_each_part_of_the_store_implements_its_protocol_at_run_time(
    store: Store, protocol: type, part: Callable[[Store], object]
) -> None:
    implementation = part(store)
    assert isinstance(implementation, protocol)
    for name, member in vars(protocol).items():
        if name.startswith("_") or not callable(member):
            continue
        declared = inspect.signature(member).parameters
        offered = inspect.signature(getattr(implementation, name)).parameters
        missing = [p for p in list(declared)[1:] if p not in offered]
        assert not missing, f"{type(implementation).__name__}.{name} lacks {missing} of {protocol.__name__}"
