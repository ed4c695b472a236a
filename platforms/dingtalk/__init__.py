"""DingTalk robots: signed HTTP callbacks or the stream WebSocket in, session webhooks and the robot API out.

In callback mode DingTalk posts each robot's messages to ``POST /dingtalk/robot/<name>``
(:mod:`platforms.dingtalk.callback` checks the ``timestamp`` and ``sign`` headers and decodes the body); in stream
mode each robot holds a WebSocket opened through ``/v1.0/gateway/connections/open`` and acknowledges each message
once it is committed (:mod:`platforms.dingtalk.stream`). Replies go back through the message's session
webhook while it is valid, else through the robot send API with a cached access token
(:mod:`platforms.dingtalk.sender`). Sessions are keyed by the corp (``chatbotCorpId``, the scope), the robot (the
account), the conversation and, in groups, the sender. Pictures, files, audio and video keep a stand-in such as
``[image]`` in the text and are downloaded into the media store by their ``downloadCode``
(:mod:`platforms.dingtalk.files`).
"""

from __future__ import annotations

from platforms.dingtalk.adapter import DingtalkAdapter
from platforms.dingtalk.config import DINGTALK_API_URL, DingtalkConfig, DingtalkRobot, cluster_parts
from platforms.dingtalk.sender import DingtalkSender

__all__ = ["DINGTALK_API_URL", "DingtalkAdapter", "DingtalkConfig", "DingtalkRobot", "DingtalkSender", "cluster_parts"]
