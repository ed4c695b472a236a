"""What the API server serves besides the OpenAI routes, added in one call: the guards (security headers and
CORS, :mod:`.guards`), the operator API (:mod:`.operator_api`, :mod:`.operator_chat`) and ``/v1/capabilities``
(:mod:`.discovery`)."""

from __future__ import annotations

from aiohttp import web

from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.config import ApiServerConfig
from platforms.api_server.discovery import Discovery
from platforms.api_server.guards import Guards
from platforms.api_server.operator_api import Attached, OperatorApi
from platforms.api_server.operator_chat import OperatorChat

__all__ = ["add_surface"]


def add_surface(app: web.Application, config: ApiServerConfig, attached: Attached, waiters: ReplyWaiters) -> None:
    """Add the guards, the operator API and the capabilities route to the API server's ``app``."""
    guards = Guards(config)
    guards.install(app)
    chat = OperatorChat(attached, waiters, config, guards)
    OperatorApi(attached, config.max_body_bytes).add_to(app, chat.chat, chat.chat_stream)
    Discovery(config).add_to(app)
