"""Where each conversation's replies go, kept durably: a reply after a restart still finds its ``serviceUrl``.

A Teams reply is POSTed to the ``serviceUrl`` the conversation's last activity came with (a regional Bot
Connector address), and opening a channel thread needs the tenant too. Neither is part of the session key, so each
conversation's :class:`~platforms.teams.activity.Address` is stored as a poll cursor of its own (platform
``teams:address``, keyed by bot and conversation), committed in the same transaction as the inbox row that brought
it, and cached here.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.ports import PollCursor
from platforms.base import SendError
from platforms.teams.activity import Address

if TYPE_CHECKING:
    from hermes_actors.ports import Inbox

__all__ = ["ADDRESS_PLATFORM", "Addresses"]

ADDRESS_PLATFORM = "teams:address"

_decode = msgspec.json.Decoder(Address).decode


def _key(bot: str, chat_id: str) -> str:
    return msgspec.json.encode([bot, chat_id]).decode()


class Addresses:
    """The latest :class:`Address` per (bot, conversation), in memory and in the store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], Address] = {}
        self._inbox: Inbox | None = None

    def attach(self, inbox: Inbox) -> None:
        """Read stored addresses through ``inbox`` from now on."""
        self._inbox = inbox

    def cursor_if_new(self, bot: str, chat_id: str, address: Address) -> PollCursor | None:
        """The cursor to commit with a message when ``address`` is not the one known for the conversation."""
        with self._lock:
            if self._known.get((bot, chat_id)) == address:
                return None
        text = msgspec.json.encode(address).decode()
        return PollCursor(platform=ADDRESS_PLATFORM, cursor=text, account_id=_key(bot, chat_id))

    def committed(self, bot: str, chat_id: str, address: Address) -> None:
        """``address`` is stored for the conversation."""
        with self._lock:
            self._known[(bot, chat_id)] = address

    def find(self, bot: str, chat_id: str) -> Address:
        """The conversation's address, from memory or the store; :class:`SendError` (permanent) when never seen."""
        with self._lock:
            known = self._known.get((bot, chat_id))
        if known is not None:
            return known
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
            address = _decode(stored)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise SendError(
                f"teams bot '{bot}': the stored address of conversation {chat_id[:80]} cannot be read",
                permanent=True,
            ) from None
        with self._lock:
            self._known.setdefault((bot, chat_id), address)
        return address
