"""Matrix client-server API: ``/sync`` long polls in, ``PUT .../send/m.room.message/{txnId}`` out, threads.

``platforms.matrix`` in ``config.yaml`` (:class:`MatrixConfig`) lists bot accounts by name; the name is the
``account_id`` of their messages, so two bots in one room never share a session. Keys:
``agent:main:matrix~<account>:dm:<room>`` for a direct room, ``…:group:<room>:<user>`` per member of a group room,
``…:group:<room>:<thread root>`` for a thread (shared). Matrix ids hold ``:`` (``!room:example.org``,
``@alice:example.org``), which the key percent-encodes (``!room%3Aexample.org``), so every key parses back to
exactly its ids.

There is no scope segment. SPEC section 2's scope is the platform-side tenant a chat belongs to (a Slack
workspace, a Feishu tenant). Matrix has none: a room id is global across federation (its server part, when it
has one, names the server that created the room, not ours), and the same room looks the same from any homeserver.
What separates our conversations is the bot account, and the homeserver is part of that account (it is where the
account lives): the account segment already carries it. A scope of the server name would repeat it, and would
wrongly suggest that ``!room:a.org`` seen from ``b.org`` is a different conversation for the same bot.

Modules: :mod:`~platforms.matrix.config` (the section), :mod:`~platforms.matrix.wire` (the API's JSON and
errors), :mod:`~platforms.matrix.events` (room events to inbound messages), :mod:`~platforms.matrix.state` (the
stored sync position and room details), :mod:`~platforms.matrix.client` (requests), :mod:`~platforms.matrix.files`
(media downloads), :mod:`~platforms.matrix.sync` (the long polls, invites, gaps), :mod:`~platforms.matrix.sender`
(replies) and :mod:`~platforms.matrix.adapter`.
"""

from __future__ import annotations

from platforms.matrix.adapter import MatrixAdapter
from platforms.matrix.config import MatrixAccount, MatrixConfig, cluster_parts
from platforms.matrix.events import PLATFORM, Incoming, MatrixFile, inbound_message, incoming_of
from platforms.matrix.sender import MatrixSender, transaction_id, wire_length
from platforms.matrix.wire import ApiError, EventError, SyncError, decode_event, decode_sync, repair_json

__all__ = [
    "PLATFORM",
    "ApiError",
    "EventError",
    "Incoming",
    "MatrixAccount",
    "MatrixAdapter",
    "MatrixConfig",
    "MatrixFile",
    "MatrixSender",
    "SyncError",
    "cluster_parts",
    "decode_event",
    "decode_sync",
    "inbound_message",
    "incoming_of",
    "repair_json",
    "transaction_id",
    "wire_length",
]
