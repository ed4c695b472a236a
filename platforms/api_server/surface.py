"""What the API server serves besides the OpenAI routes, added in one call: the guards (security headers and
CORS, :mod:`.guards`), the trusted proxies' word on each request (:mod:`.proxies`), the operator API
(:mod:`.operator_api`, :mod:`.operator_chat`, :mod:`.operator_approvals`), the web console (:mod:`.console`) and
``/v1/capabilities`` (:mod:`.discovery`)."""

from __future__ import annotations

from aiohttp import web

from hermes_actors.waiters import ReplyWaiters
from platforms.api_server.config import ApiServerConfig
from platforms.api_server.console import Console
from platforms.api_server.discovery import Discovery
from platforms.api_server.guards import Guards
from platforms.api_server.jobs_api import JobsApi
from platforms.api_server.operator_api import Attached, OperatorApi
from platforms.api_server.operator_approvals import OperatorApprovals
from platforms.api_server.operator_chat import OperatorChat
from platforms.api_server.proxies import TrustedProxies

__all__ = ["add_surface"]


def add_surface(app: web.Application, config: ApiServerConfig, attached: Attached, waiters: ReplyWaiters) -> None:
    """Add the guards, the trusted proxies, the operator API, the console and the capabilities route to the API
    server's ``app``."""
    guards = Guards(config)
    guards.install(app)
    TrustedProxies(config.trusted_proxies).install(app)  # outside the guards: their origin check sees the proxy's word
    chat = OperatorChat(attached, waiters, config, guards)
    operator = OperatorApi(attached, config.max_body_bytes)
    operator.add_to(app, chat.chat, chat.chat_stream)
    OperatorApprovals(attached, config.max_body_bytes).add_to(app, operator.guarded)
    JobsApi(attached, config.max_body_bytes, operator.guarded).add_to(app)
    Console(attached, config=config.console).add_to(app)
    Discovery(config).add_to(app)
