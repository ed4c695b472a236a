"""QQ Bot (the official open platform, API v2): per bot, HTTP callbacks or the websocket gateway.

``config`` is the ``platforms.qqbot`` section (the bots; the AppID is the account in session keys), ``signature``
the Ed25519 key pair derived from the AppSecret (QQ's callback signatures, the op 13 validation answer), ``events``
the callback payloads turned into inbound messages deduplicated on the message ``id``, ``files`` attachments
downloaded into the media store, ``token`` the cached access tokens, ``sender`` the passive replies (``msg_id`` and
a ``msg_seq`` derived from the outbox id), ``gateway`` the websocket sessions (resumed from the committed session
and ``s``), and ``adapter`` the callback server and the gateway connections.

Needs ``cryptography`` for Ed25519: ``pip install 'hermes-actors[qqbot]'``.
"""

from __future__ import annotations

from platforms.qqbot.adapter import ACK, APPID_HEADER, PATH_PREFIX, QqbotAdapter
from platforms.qqbot.config import DEFAULT_API_BASE_URL, DEFAULT_TOKEN_URL, QqbotBot, QqbotConfig, cluster_parts
from platforms.qqbot.events import PLATFORM, inbound_of
from platforms.qqbot.sender import QqbotSender, msg_seq_of
from platforms.qqbot.signature import SIGNATURE_HEADER, TIMESTAMP_HEADER, Signer, seed_of

__all__ = [
    "ACK",
    "APPID_HEADER",
    "DEFAULT_API_BASE_URL",
    "DEFAULT_TOKEN_URL",
    "PATH_PREFIX",
    "PLATFORM",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "QqbotAdapter",
    "QqbotBot",
    "QqbotConfig",
    "QqbotSender",
    "Signer",
    "cluster_parts",
    "inbound_of",
    "msg_seq_of",
    "seed_of",
]
