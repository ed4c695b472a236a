"""Rows the reference system compacted away, kept here in a session of their own.

The reference system still searches rows it compacted away (``active = 0, compacted = 1``) but no longer shows them
to the model. Here they go to ``<id>-compacted``: an ended session (``imported``), a child of the session they came
from, so they stay searchable and out of the transcript a resumed session replays.
"""

from __future__ import annotations

import msgspec

from hermes_actors.importer.rows import tool_call_count
from hermes_actors.importer.target import Ledger, MessageRow, Target
from hermes_actors.store import EndReason, SessionRecord

__all__ = ["COMPACTED_SUFFIX", "add_compacted"]

COMPACTED_SUFFIX = "-compacted"


def add_compacted(target: Target, owner: SessionRecord, rows: list[MessageRow]) -> str | None:
    """Append ``rows`` to ``<owner>-compacted``, created on first use with ``owner``'s fields (its principal too);
    return why they could not be kept (the id is another session's here, or it was deleted here after an earlier
    import), else ``None``."""
    archive_id = owner.id + COMPACTED_SUFFIX
    ledger = target.ledger(archive_id)
    exists = target.session_ended(archive_id) is not None
    if exists and (ledger is None or ledger.source_session_id != owner.id):
        return f"compacted away, and the id {archive_id} for them is taken here"
    if not exists:
        if ledger is not None:  # deleted here after an earlier import
            return f"compacted away, and {archive_id} was deleted here after an earlier import"
        first, last = rows[0][6], rows[-1][6]
        target.insert_session(
            msgspec.structs.replace(
                owner,
                id=archive_id,
                routing_key=None,
                title=None,
                system_prompt=None,
                parent_session_id=owner.id,
                started_at=first,
                last_active_at=first,
                ended_at=max(first, last),
                end_reason=EndReason.IMPORTED.value,
                message_count=0,
                tool_call_count=0,
                input_tokens=0,
                output_tokens=0,
            )
        )
    tail = target.append(archive_id, rows)
    target.add_to_session(
        archive_id,
        messages=len(rows),
        tool_calls=sum(tool_call_count(row[2]) for row in rows),
        last_active_at=rows[-1][6],
    )
    target.set_ledger(
        archive_id,
        Ledger(
            source_session_id=owner.id,
            part="compacted",
            last_source_message_id=0,
            last_message_id=tail,
            imported_at=target.now(),
        ),
    )
    return None
