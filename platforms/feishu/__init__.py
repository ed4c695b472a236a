"""Feishu/Lark: event subscription v2 over HTTP in, the IM message API out, for one or several apps at once.

Feishu pushes each app's events to ``POST /feishu/events/<app>`` (one URL per app: each has its own verification
token and encrypt key). URL-verification challenges are answered at once, encrypted or not; events are checked
against the verification token and, with an encrypt key, the ``X-Lark-Signature``, then AES-256-CBC decrypted
(:mod:`platforms.feishu.events`). ``im.message.receive_v1`` messages from p2p chats, groups and threads become
inbound messages deduplicated on ``event_id``; replies go out through the IM API with cached tenant access tokens
(:mod:`platforms.feishu.sender`). Images, files, audio and video keep a stand-in such as ``[image]`` in the text
and are downloaded into the media store as the message's attachments (:mod:`platforms.feishu.files`).
Sending uses self-built (internal) app credentials; the base URL is ``https://open.feishu.cn`` or, for Lark,
``https://open.larksuite.com``.
"""

from __future__ import annotations

from platforms.feishu.adapter import FeishuAdapter
from platforms.feishu.config import FEISHU_BASE_URL, LARK_BASE_URL, FeishuApp, FeishuConfig
from platforms.feishu.sender import FeishuSender

__all__ = ["FEISHU_BASE_URL", "LARK_BASE_URL", "FeishuAdapter", "FeishuApp", "FeishuConfig", "FeishuSender"]
