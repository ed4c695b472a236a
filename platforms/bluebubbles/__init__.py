"""iMessage through a BlueBubbles server: its webhook in, its REST API out.

``config`` is the ``platforms.bluebubbles`` section (one server: its URL, password, the secret webhook token, and
its name, the account in session keys), ``events`` the webhook's ``new-message`` events turned into inbound
messages deduplicated on the message ``guid``, ``files`` attachments fetched into the media store, ``sender`` the
replies (``tempGuid`` derived from the outbox id), and ``adapter`` the webhook server.
"""

from __future__ import annotations

from platforms.bluebubbles.adapter import PATH_PREFIX, BluebubblesAdapter
from platforms.bluebubbles.config import BluebubblesConfig
from platforms.bluebubbles.events import NEW_MESSAGE, PLATFORM, decode_event, inbound_of
from platforms.bluebubbles.sender import BluebubblesSender, temp_guid_of

__all__ = [
    "NEW_MESSAGE",
    "PATH_PREFIX",
    "PLATFORM",
    "BluebubblesAdapter",
    "BluebubblesConfig",
    "BluebubblesSender",
    "decode_event",
    "inbound_of",
    "temp_guid_of",
]
