"""Who a chat-completions request speaks for: the user whose memories it sees and whose sessions it may search.

In order: the user the server's key is configured for (``platforms.api_server.user``), the OpenAI ``user`` field,
and, only when ``platforms.api_server.trust_user_headers`` is on, the user Open WebUI forwards
(``X-OpenWebUI-User-Id``, else ``-Email``, else ``-Name``; its ``ENABLE_FORWARD_USER_INFO_HEADERS``). Those headers
are off by default because any client holding the key can send them: turn them on only when the API is reached
through Open WebUI alone (its key is the only one, and not handed to users), else one user could read another's
memories by naming them. Without any of them each stateless conversation is its own user, as before.

A key that speaks for one user (``platforms.api_server.user``) sees only that user's sessions, stored responses and
conversations (:func:`key_sees`): the MCP tools' listings and reads, ``GET /v1/responses/{id}``, ``/v1/conversations``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from platforms.api_server.config import ApiServerConfig
from platforms.api_server.wire import ApiError

__all__ = ["USER_HEADERS", "forwarded_user", "key_sees", "request_user"]

USER_HEADERS = ("X-OpenWebUI-User-Id", "X-OpenWebUI-User-Email", "X-OpenWebUI-User-Name")
_MAX_USER = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def forwarded_user(config: ApiServerConfig, headers: Mapping[str, str]) -> str | None:
    """The user a trusted frontend names in its headers (``None`` when they are not trusted or absent)."""
    if not config.trust_user_headers:
        return None
    for header in USER_HEADERS:
        value = headers.get(header, "").strip()
        if value:
            return _checked(value, header)
    return None


def request_user(config: ApiServerConfig, body_user: str | None, headers: Mapping[str, str]) -> str | None:
    """The principal of a request (see the module's docstring), ``None`` when nothing names one."""
    if config.user is not None:
        return config.user
    if body_user is not None and body_user.strip():
        return _checked(body_user.strip(), "user")
    return forwarded_user(config, headers)


def key_sees(config: ApiServerConfig, user_id: str | None) -> bool:
    """Whether this server's key may see a session (or what was made in it) of ``user_id``: any, unless the key
    speaks for one user, whose alone it sees."""
    return config.user is None or user_id == config.user


def _checked(value: str, where: str) -> str:
    if len(value) > _MAX_USER or _CONTROL.search(value):
        raise ApiError(
            400,
            f"{where} must be at most {_MAX_USER} characters without control characters; send a short user id",
            code="invalid_value",
            param=where,
        )
    return value
