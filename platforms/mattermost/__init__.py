"""Mattermost: the websocket event API in, REST ``POST /api/v4/posts`` out, threads for handoffs.

``platforms.mattermost`` in ``config.yaml`` (:class:`MattermostConfig`) names the server and lists bots by name; the
name is the ``account_id`` of their posts and the team is the scope, so channel keys read
``agent:main:mattermost.<team>~<bot>:group:<channel>:<user>``. Modules: :mod:`~platforms.mattermost.config` (the
section), :mod:`~platforms.mattermost.wire` (the JSON shapes), :mod:`~platforms.mattermost.events` (posts to inbound
messages), :mod:`~platforms.mattermost.cursor` (the read position and how a reconnect catches up),
:mod:`~platforms.mattermost.connection` (the websocket), :mod:`~platforms.mattermost.files` (files into the media
store), :mod:`~platforms.mattermost.rest` (REST calls and rate limits), :mod:`~platforms.mattermost.sender` (replies
and threads) and :mod:`~platforms.mattermost.adapter` (the lifecycle).
"""

from __future__ import annotations

from platforms.mattermost.adapter import MattermostAdapter
from platforms.mattermost.config import MAX_MESSAGE_CHARS, MattermostBot, MattermostConfig, cluster_parts
from platforms.mattermost.cursor import OVERLAP_MS, ReadState
from platforms.mattermost.events import PLATFORM, Skipped, Where, inbound_from_post
from platforms.mattermost.rest import RestClient, RestError, retry_after
from platforms.mattermost.sender import MattermostSender, pending_post_id
from platforms.mattermost.wire import Post, WireError, decode_envelope, decode_post

__all__ = [
    "MAX_MESSAGE_CHARS",
    "OVERLAP_MS",
    "PLATFORM",
    "MattermostAdapter",
    "MattermostBot",
    "MattermostConfig",
    "MattermostSender",
    "Post",
    "ReadState",
    "RestClient",
    "RestError",
    "Skipped",
    "Where",
    "WireError",
    "cluster_parts",
    "decode_envelope",
    "decode_post",
    "inbound_from_post",
    "pending_post_id",
    "retry_after",
]
