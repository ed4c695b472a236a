"""Where each conversation's replies go, kept durably: a reply after a restart, or sent by another process, still
finds its ``serviceUrl``.

A Teams reply is POSTed to the ``serviceUrl`` the conversation's last activity came with (a regional Bot
Connector address), and opening a channel thread needs the tenant too. Neither is part of the session key, so each
conversation's :class:`~platforms.teams.activity.Address` is stored as a poll cursor of its own (platform
``teams:address``, keyed by bot and conversation), committed in the same transaction as the inbox row that brought
it, with every activity. A reply reads it from the store, not from this process's memory: in cluster mode the
replica sending Teams' replies is rarely the one the activity reached, and the store has the latest address
whichever replica committed it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from hermes_actors.ports import PollCursor
from platforms.base import SendError
from platforms.teams.activity import Address

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["ADDRESS_PLATFORM", "Addresses"]

ADDRESS_PLATFORM = "teams:address"

_decode = msgspec.json.Decoder(Address).decode


def _key(bot: str, chat_id: str) -> str:
    return msgspec.json.encode([bot, chat_id]).decode()


class Addresses:
    """The latest :class:`Address` per (bot, conversation), in the store, read through the adapter's inbox."""

    def __init__(self) -> None:
        self._inbox: ChatInbox | None = None

    def attach(self, inbox: ChatInbox) -> None:
        """Read stored addresses through ``inbox`` from now on."""
        self._inbox = inbox

    @staticmethod
    def to_commit(bot: str, chat_id: str, address: Address) -> PollCursor:
        """The cursor to commit with a message from the conversation: its address as of that message."""
        text = msgspec.json.encode(address).decode()
        return PollCursor(platform=ADDRESS_PLATFORM, cursor=text, account_id=_key(bot, chat_id))

    def find(self, bot: str, chat_id: str) -> Address:
        """The conversation's stored address; :class:`SendError` (permanent) when no message ever came from it."""
        inbox = self._inbox
        if inbox is None:
            raise SendError("teams: the adapter has not started, so the conversation's serviceUrl is not loaded")
        stored = inbox.poll_cursor(ADDRESS_PLATFORM, _key(bot, chat_id))
        if stored is None:
            raise SendError(
                f"teams bot '{bot}': no message ever came from conversation {chat_id[:80]}, so its Bot Connector "
                "address (serviceUrl) is unknown; a bot can only write where it was spoken to",
                permanent=True,
            )
        try:
            return _decode(stored)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise SendError(
                f"teams bot '{bot}': the stored address of conversation {chat_id[:80]} cannot be read",
                permanent=True,
            ) from None
