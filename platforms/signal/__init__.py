"""Signal through signal-cli's HTTP daemon: Server-Sent Events in, JSON-RPC ``send`` out, several accounts at once.

Run ``signal-cli daemon --http 127.0.0.1:8080 --receive-mode=on-connection`` (multi-account mode: no ``-a``) and
list the accounts under ``platforms.signal.accounts``; each account's number is the ``account_id`` of its
messages, so accounts never share sessions. Modules: :mod:`~platforms.signal.config` (the section),
:mod:`~platforms.signal.sse` (the event-stream format), :mod:`~platforms.signal.envelopes` (signal-cli's receive
events to inbound messages), :mod:`~platforms.signal.events` (the streams, reconnects, and what a drop does to
messages), :mod:`~platforms.signal.rpc` (JSON-RPC calls and errors), :mod:`~platforms.signal.files` (attachments
fetched with ``getAttachment``), :mod:`~platforms.signal.sender` (replies) and :mod:`~platforms.signal.adapter`
(the lifecycle).
"""

from __future__ import annotations

from platforms.signal.adapter import SignalAdapter
from platforms.signal.config import DEFAULT_URL, SignalConfig, cluster_parts
from platforms.signal.envelopes import PLATFORM, EventError, decode_event, inbound_from_event
from platforms.signal.sender import SignalSender

__all__ = [
    "DEFAULT_URL",
    "PLATFORM",
    "EventError",
    "SignalAdapter",
    "SignalConfig",
    "SignalSender",
    "cluster_parts",
    "decode_event",
    "inbound_from_event",
]
