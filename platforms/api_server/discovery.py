"""``GET /v1/capabilities``: what this API server supports, for a client deciding what it may use.

The answer is built from :data:`ENDPOINTS` and :func:`features`: add a row or a key when a feature lands, and
publish only what the server does now (a client trusts this over guessing). It takes the client key like every
``/v1/`` route.
"""

from __future__ import annotations

from importlib import metadata

import msgspec
from aiohttp import web

from platforms.api_server.config import ApiServerConfig
from platforms.api_server.idempotency import IDEMPOTENCY_HEADER
from platforms.api_server.sessions import MEMORY_HEADER, SESSION_HEADER, TOOL_PROGRESS_HEADER
from platforms.api_server.wire import IGNORED_PARAMETERS, json_response

__all__ = ["ENDPOINTS", "Discovery", "Endpoint", "features"]


class Endpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A route a client may call: its path, methods, and which key opens it (``client``, ``admin`` or ``none``;
    ``client`` means none when the server has no client key)."""

    path: str
    methods: tuple[str, ...]
    auth: str


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint(path="/v1/chat/completions", methods=("POST",), auth="client"),
    Endpoint(path="/v1/responses", methods=("POST",), auth="client"),
    Endpoint(path="/v1/responses/{id}", methods=("GET", "DELETE"), auth="client"),
    Endpoint(path="/v1/responses/{id}/input_items", methods=("GET",), auth="client"),
    Endpoint(path="/v1/responses/{id}/cancel", methods=("POST",), auth="client"),
    Endpoint(path="/v1/responses/{id}/approval", methods=("POST",), auth="client"),
    Endpoint(path="/v1/conversations", methods=("POST",), auth="client"),
    Endpoint(path="/v1/conversations/{id}", methods=("GET", "POST", "DELETE"), auth="client"),
    Endpoint(path="/v1/conversations/{id}/items", methods=("GET", "POST"), auth="client"),
    Endpoint(path="/v1/conversations/{id}/items/{id}", methods=("GET", "DELETE"), auth="client"),
    Endpoint(path="/v1/runs", methods=("POST",), auth="client"),
    Endpoint(path="/v1/runs/{id}", methods=("GET",), auth="client"),
    Endpoint(path="/v1/runs/{id}/events", methods=("GET",), auth="client"),
    Endpoint(path="/v1/runs/{id}/stop", methods=("POST",), auth="client"),
    Endpoint(path="/v1/runs/{id}/approval", methods=("POST",), auth="client"),
    Endpoint(path="/v1/models", methods=("GET",), auth="client"),
    Endpoint(path="/v1/capabilities", methods=("GET",), auth="client"),
    Endpoint(path="/health", methods=("GET",), auth="none"),
    Endpoint(path="/health/ready", methods=("GET",), auth="none"),
    Endpoint(path="/health/detailed", methods=("GET",), auth="client"),
    Endpoint(path="/health/cluster", methods=("GET",), auth="client"),
    Endpoint(path="/metrics", methods=("GET",), auth="client"),
    Endpoint(path="/api/sessions", methods=("GET", "POST"), auth="admin"),
    Endpoint(path="/api/sessions/{id}", methods=("GET", "PATCH", "DELETE"), auth="admin"),
    Endpoint(path="/api/sessions/{id}/messages", methods=("GET",), auth="admin"),
    Endpoint(path="/api/sessions/{id}/fork", methods=("POST",), auth="admin"),
    Endpoint(path="/api/sessions/{id}/chat", methods=("POST",), auth="admin"),
    Endpoint(path="/api/sessions/{id}/chat/stream", methods=("POST",), auth="admin"),
    Endpoint(path="/api/approvals", methods=("GET",), auth="admin"),
    Endpoint(path="/api/approvals/{id}", methods=("POST",), auth="admin"),
    Endpoint(path="/api/jobs", methods=("GET", "POST"), auth="admin"),
    Endpoint(path="/api/jobs/{id}", methods=("GET", "DELETE"), auth="admin"),
    Endpoint(path="/api/jobs/{id}/pause", methods=("POST",), auth="admin"),
    Endpoint(path="/api/jobs/{id}/resume", methods=("POST",), auth="admin"),
    Endpoint(path="/api/jobs/{id}/run", methods=("POST",), auth="admin"),
    Endpoint(path="/mcp", methods=("POST",), auth="client"),  # the admin key too: every session
)
"""Every route the server answers."""


def features(config: ApiServerConfig) -> dict[str, object]:
    """What the chat routes do, as a client would ask it."""
    return {
        "streaming": True,  # stream=true answers server-sent events ending with [DONE]
        "token_streaming": True,  # each text delta of the model as it arrives
        "tool_progress_events": True,  # event: hermes.tool.progress {tool, toolCallId, status}, when asked for
        "tool_progress_header": TOOL_PROGRESS_HEADER,  # "1" asks a streamed chat completion for those frames
        "client_tools": True,  # a request's function tools: their calls end the turn for the client to run
        "stateless": True,  # without the session header the body's conversation is what the model sees
        "session_header": SESSION_HEADER,  # continues a stored session; the reply's says where the turn ended
        "memory_header": MEMORY_HEADER,  # a long-term memory scope independent of the session
        "idempotency": IDEMPOTENCY_HEADER,  # a retry with the same key is answered from the store
        "images": True,  # image_url content parts (data: URLs are stored, http(s) URLs passed on)
        "usage": True,  # the model's reported token usage (estimated when it reports none)
        "stream_usage": "final_chunk",  # stream_options.include_usage: once, in a last chunk with empty choices
        "retry_fold_s": config.retry_fold_s,  # an identical request this soon after is its client's retry
        "ignored_parameters": IGNORED_PARAMETERS,  # accepted and not used: the agent's model settings decide
        "responses": True,  # /v1/responses: previous_response_id, conversation, stored with their session
        "conversations": True,  # /v1/conversations: each a session; its items are the stored messages
        "runs": True,  # /v1/runs: 202 at once, status, SSE events, stop
        "operator_api": True,  # /api/sessions with the admin key
        "mcp": "/mcp",  # the sessions as MCP tools (Streamable HTTP), with the client key or the admin key
        "agent_models": True,  # a model naming an agent (GET /v1/models) chooses a new session's agent
        "cors": bool(config.cors_origins),
        "max_concurrent_runs": config.max_concurrent_runs,  # 0: no cap; beyond it 429
        "max_body_bytes": config.max_body_bytes,
    }


class Discovery:
    """The capabilities route of an API server with ``config``."""

    def __init__(self, config: ApiServerConfig) -> None:
        self._config = config

    def add_to(self, app: web.Application) -> None:
        """Add ``GET /v1/capabilities`` to ``app``."""
        app.router.add_get("/v1/capabilities", self.capabilities)

    async def capabilities(self, request: web.Request) -> web.Response:
        """The endpoints and features, as JSON."""
        try:
            version = metadata.version("hermes-actors")
        except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree without metadata
            version = "unknown"
        return json_response(
            {
                "object": "hermes.capabilities",
                "server": "hermes-actors",
                "version": version,
                "model": self._config.model_name,
                "endpoints": ENDPOINTS,
                "features": features(self._config),
            }
        )
