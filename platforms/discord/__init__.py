"""Discord: the gateway websocket in, REST ``POST /channels/{id}/messages`` out, threads for handoffs.

``platforms.discord`` in ``config.yaml`` (:class:`DiscordConfig`) lists bots by name; the name is the
``account_id`` of their messages and the guild is the scope, so keys read ``agent:main:discord.<guild>~<bot>:...``.
The protocol is spoken directly over aiohttp's websocket client (discord.py cannot be pointed at another gateway).
Modules: :mod:`~platforms.discord.config` (the section), :mod:`~platforms.discord.events` (payloads to inbound
messages, the channel cache), :mod:`~platforms.discord.shard` (the websocket session: heartbeats, identify, resume),
:mod:`~platforms.discord.files` (attachments from the CDN into the media store), :mod:`~platforms.discord.rest`
(REST calls and rate-limit buckets), :mod:`~platforms.discord.sender` (replies and threads) and
:mod:`~platforms.discord.adapter` (the lifecycle).
"""

from __future__ import annotations

from platforms.discord.adapter import DiscordAdapter
from platforms.discord.config import DEFAULT_API_BASE_URL, MAX_MESSAGE_CHARS, DiscordBot, DiscordConfig, cluster_parts
from platforms.discord.events import ChannelCache, EventError, Message, decode_data, decode_frame, inbound_from_message
from platforms.discord.rest import Buckets, RestClient, RestError
from platforms.discord.resume import INTENTS, ResumeState
from platforms.discord.sender import DiscordSender

__all__ = [
    "DEFAULT_API_BASE_URL",
    "INTENTS",
    "MAX_MESSAGE_CHARS",
    "Buckets",
    "ChannelCache",
    "DiscordAdapter",
    "DiscordBot",
    "DiscordConfig",
    "DiscordSender",
    "EventError",
    "Message",
    "RestClient",
    "RestError",
    "ResumeState",
    "cluster_parts",
    "decode_data",
    "decode_frame",
    "inbound_from_message",
]
