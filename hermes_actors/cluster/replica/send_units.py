"""What an :class:`~hermes_actors.cluster.replica.dispatch.OutboxDispatcher` sends with, and to: the senders offered
to it, each under its role term (:class:`SendUnit`), and the chat an outbox row goes to (:func:`chat_of`), one send
at a time per chat."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_actors.cluster.replica.roles import RoleTerm
from hermes_actors.ports import ReplySender
from hermes_actors.store.records import OutboxRow

__all__ = ["ChatKey", "SendUnit", "chat_of"]

ChatKey = tuple[str, str, str | None, str | None]
"""A chat: platform, account, chat and thread."""


def chat_of(row: OutboxRow) -> ChatKey:
    """The chat ``row`` goes to."""
    return (row.platform, row.account_id, row.chat_id, row.thread_id)


@dataclass(frozen=True)
class SendUnit:
    """A sender offered for ``platform``'s rows of ``accounts`` (``None``: every account), sent under ``term``."""

    platform: str
    accounts: frozenset[str] | None
    sender: ReplySender
    term: RoleTerm

    def targets(self) -> list[tuple[str, str | None]]:
        """The (platform, account) pairs it sends for, an account of ``None`` standing for every account."""
        if self.accounts is None:
            return [(self.platform, None)]
        return [(self.platform, account) for account in sorted(self.accounts)]
