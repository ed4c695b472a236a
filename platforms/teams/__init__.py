"""Microsoft Teams through the Bot Framework: activities POSTed to a messaging endpoint, replies through the Bot
Connector.

Each configured bot (an Azure Bot registration; its name is the account in session keys) has its own messaging
endpoint, ``POST /teams/messages/<bot>``. A request counts only with the Bot Connector's JWT
(:mod:`platforms.teams.auth`: signature from the published keys, issuer, the bot's app id as audience, lifetime,
the ``serviceUrl`` claim matching the activity's). A ``message`` activity is answered 200 only after it is committed
to the inbox, with the conversation's reply address in the same transaction (:mod:`platforms.teams.addresses`), so
an acknowledged message is never lost and a reply after a restart still knows where to go; one that could not be
stored gets a 503. Other activities (``conversationUpdate``, reactions, typing) are acknowledged and skipped.
The dedupe key is ``<conversation.id>:<activity id>``: a redelivered or replayed activity runs no second turn.

The tenant is the key's scope: ``agent:main:teams.<tenant>~<bot>:dm:<conversation>`` for a personal chat,
``…:group:<conversation>:<aadObjectId>`` in a group chat, ``…:channel:<channel>:<root message id>`` for a channel
thread. Files and pasted images are saved into the media store before the commit (:mod:`platforms.teams.files`).
Replies (:mod:`platforms.teams.sender`) carry a client-credentials token (:mod:`platforms.teams.connector`) and honour
429 ``Retry-After``; a handoff opens a new channel thread.

Needs the ``teams`` extra (PyJWT with its crypto backend): ``pip install 'hermes-actors[teams]'``.
"""

from __future__ import annotations

from platforms.teams.adapter import TeamsAdapter
from platforms.teams.auth import ISSUER
from platforms.teams.config import DEFAULT_LOGIN_URL, DEFAULT_OPENID_METADATA_URL, TeamsBot, TeamsConfig
from platforms.teams.sender import TeamsSender

__all__ = [
    "DEFAULT_LOGIN_URL",
    "DEFAULT_OPENID_METADATA_URL",
    "ISSUER",
    "TeamsAdapter",
    "TeamsBot",
    "TeamsConfig",
    "TeamsSender",
]
