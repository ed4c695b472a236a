"""The OpenAI-compatible HTTP API: ``POST /v1/chat/completions``, ``/v1/runs`` (turns the server watches, see
:mod:`platforms.api_server.runs`), ``GET /v1/models``, and the operational routes
``GET /health``, ``/health/ready``, ``/health/detailed`` and ``/metrics`` (Prometheus).

A stateless client (no ``X-Hermes-Session-Id``) sends the whole conversation with every request: the model sees
that history, and the turn is stored in the session the conversation's fingerprint names
(:mod:`platforms.api_server.conversation`). A request that names a session with the header continues it from the
store. Each turn is watched live (:mod:`platforms.api_server.turn_call`), so a streaming client gets the model's
deltas as they arrive, and a turn the agent failed is an error, not an answer (:mod:`platforms.api_server.chat`).

A request is answered the durable way: its message is committed to the inbox, the turn runs in the session's actor
and the reply reaches the waiting request through :class:`~hermes_actors.waiters.ReplyWaiters`. A client that stops
waiting (timeout, disconnect, server stop) loses only the wait: the turn continues and its reply is stored.
Every error, ours or aiohttp's, leaves in OpenAI's error shape, so clients raise their usual exceptions.

Images come as ``image_url`` content parts of the newest user message. A base64 ``data:`` URL is saved into the
media store (one over ``media.max_bytes`` is refused before it is decoded: the turn still runs on the
text and the reply says the image could not be read); an http(s) URL is recorded as the attachment's source URL
and not fetched, so the server never makes requests on a client's behalf (a vision model gets the URL itself).
"""

from __future__ import annotations

from platforms.api_server.adapter import ApiServer
from platforms.api_server.config import ApiServerConfig
from platforms.api_server.sessions import SESSION_HEADER, key_fingerprint

__all__ = ["SESSION_HEADER", "ApiServer", "ApiServerConfig", "key_fingerprint"]
