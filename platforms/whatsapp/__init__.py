"""WhatsApp through Meta's Cloud API: a signed webhook in, the Graph API ``messages`` endpoint out.

``config`` is the ``platforms.whatsapp`` section (numbers keyed by ``phone_number_id``, the account in keys),
``events`` what Meta sends (the verification handshake, ``X-Hub-Signature-256``, notifications turned into
inbound messages deduplicated on the ``wamid``), ``files`` the media of those messages downloaded into the
media store as attachments, ``window`` the 24-hour customer service window per user,
``sender`` the replies (split, paced per number and per user, refused outside the window), and ``adapter`` the
webhook server that ties them to the gateway.
"""

from __future__ import annotations

from platforms.whatsapp.adapter import WEBHOOK_PATH, WhatsappAdapter
from platforms.whatsapp.config import DEFAULT_GRAPH_BASE_URL, DEFAULT_GRAPH_VERSION, WhatsappConfig, WhatsappNumber
from platforms.whatsapp.events import PLATFORM
from platforms.whatsapp.sender import WhatsappSender
from platforms.whatsapp.window import WINDOW_S, ServiceWindows

__all__ = [
    "DEFAULT_GRAPH_BASE_URL",
    "DEFAULT_GRAPH_VERSION",
    "PLATFORM",
    "WEBHOOK_PATH",
    "WINDOW_S",
    "ServiceWindows",
    "WhatsappAdapter",
    "WhatsappConfig",
    "WhatsappNumber",
    "WhatsappSender",
]
