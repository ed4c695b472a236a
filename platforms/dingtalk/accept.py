"""What both ways in (HTTP callbacks and the stream) do with a robot message: fetch its files, then commit it.

The message is committed with its conversation's :class:`~platforms.dingtalk.callback.Route` as the poll cursor
``route:<robot>:<conversationId>`` in the same transaction, so the sender finds the session webhook (and the
conversation's type and user) after a restart; only then is DingTalk answered or the stream frame acknowledged.
A route replaces the stored one only when it brings a session webhook (one of DingTalk's; the decoder dropped any
other) with a message seen for the first time: a message without one, or delivered again, keeps the stored route
(and stores its own only where there is none).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgspec

from platforms.base import AcceptResult, ChatInbox, PollCursor
from platforms.dingtalk.callback import PLATFORM, Received, encode_route, route_key
from platforms.dingtalk.config import RobotKeys
from platforms.dingtalk.files import attach_files
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session
from platforms.support.http_host import committed

__all__ = ["commit", "with_files"]


async def with_files(
    received: Received,
    robot: RobotKeys,
    *,
    inbox: ChatInbox,
    api_base_url: str,
    token: Callable[[str | None], Awaitable[str]],
    fetch: FetchPolicy,
    timeout_s: float,
) -> Received:
    """``received`` with its files downloaded into the media store as the message's attachments (their download
    addresses fetched as ``fetch`` allows)."""
    if not received.files:
        return received
    async with open_session() as session:
        inbound = await attach_files(
            received.inbound,
            received.files,
            api_base_url=api_base_url,
            robot_code=robot.robot_code,
            token=token,
            media=inbox.media,
            session=session,
            fetch=fetch,
            timeout_s=timeout_s,
        )
    return msgspec.structs.replace(received, inbound=inbound)


async def commit(inbox: ChatInbox, robot: str, received: Received, *, again: bool = False) -> AcceptResult:
    """Commit the message with its conversation's route; return once it is safe (raises what the store raised).
    ``again``: the message is being delivered again, so its route replaces no stored one."""
    key = route_key(robot, received.route.conversation_id)
    cursor: PollCursor | None = PollCursor(platform=PLATFORM, cursor=encode_route(received.route), account_id=key)
    replaces = received.route.webhook is not None and not again
    if not replaces and await asyncio.to_thread(inbox.poll_cursor, PLATFORM, key) is not None:
        cursor = None
    (result,) = await committed(inbox.submit_many([received.inbound], cursor=cursor), inbox.ask_timeout_s)
    return result
