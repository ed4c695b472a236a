"""WeCom (WeChat Work) self-built applications: encrypted callbacks in, ``cgi-bin/message/send`` out.

WeCom checks each app's callback URL with a ``GET`` (answered with the decrypted ``echostr``) and then pushes
messages as encrypted XML to ``POST /wecom/callback/<name>`` (:mod:`platforms.wecom.callback`, with the signature
and AES envelope of :mod:`platforms.wecom.crypto`). Messages are deduplicated on ``MsgId``; images, voice, video
and files are fetched with ``media/get`` into the media store (:mod:`platforms.wecom.media`); replies go to the
user through the app with cached access tokens (:mod:`platforms.wecom.sender`). Sessions are keyed by the corp id
(scope), the app (account) and the user. Decrypting needs the ``cryptography`` package.
"""

from __future__ import annotations

from platforms.wecom.adapter import WecomAdapter
from platforms.wecom.config import WECOM_API_URL, WecomApp, WecomConfig
from platforms.wecom.sender import WecomSender

__all__ = ["WECOM_API_URL", "WecomAdapter", "WecomApp", "WecomConfig", "WecomSender"]
