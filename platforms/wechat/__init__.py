"""WeChat through Tencent's iLink bot API: a long poll per bot account in, ``sendmessage`` out.

``config`` is the ``platforms.wechat`` section, ``wire`` the protocol (headers, answers, the abortable long poll),
``batching`` what an account keeps between polls (cursor, batches, dedupe window, stored as one poll cursor),
``sender`` the replies (context tokens, splitting), ``adapter`` the threads that tie them to the gateway.
"""

from __future__ import annotations

from platforms.wechat.adapter import PLATFORM, WechatAdapter
from platforms.wechat.config import DEFAULT_BASE_URL, WechatAccount, WechatConfig, cluster_parts
from platforms.wechat.sender import TOKEN_PLATFORM

__all__ = [
    "DEFAULT_BASE_URL",
    "PLATFORM",
    "TOKEN_PLATFORM",
    "WechatAccount",
    "WechatAdapter",
    "WechatConfig",
    "cluster_parts",
]
