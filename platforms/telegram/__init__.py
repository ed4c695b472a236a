"""Telegram Bot API: long polling or webhooks in, ``sendMessage`` out, forum topics for handoffs.

``platforms.telegram`` in ``config.yaml`` (:class:`TelegramConfig`) lists bots by name; the name is the
``account_id`` of their messages, so several bots run at once without sharing sessions. Modules:
:mod:`~platforms.telegram.config` (the section), :mod:`~platforms.telegram.updates` (Telegram's payloads to inbound
messages), :mod:`~platforms.telegram.api` (calls and their errors), :mod:`~platforms.telegram.polling`
(``getUpdates`` with the offset committed alongside the inbox rows), :mod:`~platforms.telegram.sender` (replies,
pacing, topics) and :mod:`~platforms.telegram.adapter` (the webhook server and the lifecycle).
"""

from __future__ import annotations

from platforms.telegram.adapter import SECRET_HEADER, TelegramAdapter
from platforms.telegram.config import DEFAULT_BASE_URL, TelegramBot, TelegramConfig, cluster_parts
from platforms.telegram.sender import MAX_MESSAGE_UTF16, TelegramSender
from platforms.telegram.updates import UpdateError, decode_update, inbound_from_update

__all__ = [
    "DEFAULT_BASE_URL",
    "MAX_MESSAGE_UTF16",
    "SECRET_HEADER",
    "TelegramAdapter",
    "TelegramBot",
    "TelegramConfig",
    "TelegramSender",
    "UpdateError",
    "cluster_parts",
    "decode_update",
    "inbound_from_update",
]
