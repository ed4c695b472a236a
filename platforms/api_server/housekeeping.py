"""Housekeeping requests: a frontend's title, tag and follow-up prompts, answered by the model without a session.

Open WebUI and LibreChat ask the same chat-completions endpoint for a conversation's title, its tags, follow-up
questions, search queries and autocompletions, each with a fixed task prompt that carries the chat history in its
text. Run as turns, each would open a session of its own and could feed memory. A request whose system or newest
user message begins with one of :data:`TASKS`' markers (the frontends' default task prompts; a template an admin
rewrote is not recognised) is answered by the agent alone: no session, history, memories or tools, nothing stored.
``platforms.api_server.housekeeping: false`` runs them as ordinary turns, as a cluster replica does (its inbox has
no agent to ask).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgspec
from aiohttp import web

from hermes_actors.errors import HermesError
from hermes_actors.messages import TokenUsage
from platforms.api_server.models import requested_agent
from platforms.api_server.wire import ApiError, ChatRequest, Delta, Turn, content_text, json_response

if TYPE_CHECKING:
    from platforms.api_server.service import ApiService

__all__ = ["HOUSEKEEPING_HEADER", "TASKS", "AgentAsking", "Task", "answer_housekeeping", "housekeeping_task"]

HOUSEKEEPING_HEADER = "X-Hermes-Housekeeping"  # the task a stateless answer was for (title, tags, ...)
_DONE = b"data: [DONE]\n\n"


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """A frontend's task prompt: who sends it, what it asks for, and how its text begins (lower case, single
    spaces)."""

    frontend: str
    task: str
    marker: str


TASKS = (
    Task(frontend="open-webui", task="title", marker="### task: generate a concise, 3-5 word title"),
    Task(frontend="open-webui", task="tags", marker="### task: generate 1-3 broad tags categorizing"),
    Task(frontend="open-webui", task="follow_ups", marker="### task: suggest 3-5 relevant follow-up questions"),
    Task(frontend="open-webui", task="queries", marker="### task: analyze the chat history to determine the necessity"),
    Task(frontend="open-webui", task="autocomplete", marker="### task: you are an autocompletion system."),
    Task(frontend="librechat", task="title", marker="provide a concise, 5-word-or-less title for the conversation"),
    Task(frontend="librechat", task="title", marker="please generate a concise, 5-word-or-less title for the"),
    Task(frontend="librechat", task="title", marker="analyze this conversation and provide: 1. the detected language"),
    Task(frontend="librechat", task="title", marker="please generate a concise title (max 40 characters) for a"),
)
"""The task prompts recognised, as their frontends' default templates begin."""

_SPACE = re.compile(r"\s+")


@runtime_checkable
class AgentAsking(Protocol):
    """An inbox that can ask the agent for an answer without a session (the gateway's does)."""

    def ask_agent(self, text: str, *, agent: str | None, timeout_s: float) -> tuple[str, TokenUsage]: ...


def housekeeping_task(chat: ChatRequest) -> tuple[Task, str] | None:
    """The task a request's prompt is, and the text to answer (its system text, then its newest user message);
    ``None`` for an ordinary request."""
    if chat.tools:
        return None
    systems = [content_text(m.content) for m in chat.messages if m.role in ("system", "developer")]
    users = [content_text(m.content) for m in chat.messages if m.role == "user"]
    if not users:
        return None
    for text in (*systems, users[-1]):
        head = _SPACE.sub(" ", text[:400]).strip().lower()
        for task in TASKS:
            if head.startswith(task.marker):
                return task, "\n\n".join([*(s for s in systems if s), users[-1]])
    return None


async def answer_housekeeping(
    service: ApiService, request: web.Request, chat: ChatRequest, task: Task, text: str
) -> web.StreamResponse:
    """Answer the housekeeping request ``chat`` (its ``text``) with the agent alone, streamed when it asks."""
    inbox, host = service.parts()
    if not isinstance(inbox, AgentAsking):  # pragma: no cover - the caller checked
        raise ApiError(503, "this server cannot answer housekeeping requests", type="server_error")
    timeout_s = service.config.request_timeout_s
    with service.admitted():
        try:
            agent = requested_agent(inbox, chat.model)
            reply, counted = await host.blocking(lambda: inbox.ask_agent(text, agent=agent, timeout_s=timeout_s))
        except HermesError as exc:
            raise ApiError(
                502, f"the agent did not answer: {exc}", type="server_error", code="agent_incomplete"
            ) from None
    usage = counted if counted.input_tokens or counted.output_tokens else None  # else estimated
    turn = Turn(
        completion_id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=chat.model or service.config.model_name,
        prompt=text,
        routing_key="",
        deadline=0.0,
    )
    headers = {HOUSEKEEPING_HEADER: f"{task.frontend}:{task.task}"}
    if not chat.stream:
        return json_response(turn.completion(reply, usage), headers=headers)
    response = await service.event_stream(request, headers)
    await response.write(turn.chunk(Delta(role="assistant", content="")))
    if reply:
        await response.write(turn.chunk(Delta(content=reply)))
    await response.write(turn.chunk(Delta(), "stop"))
    if chat.stream_options is not None and chat.stream_options.include_usage:
        await response.write(turn.chunk(None, usage=turn.completion(reply, usage).usage))
    await response.write(_DONE)
    await response.write_eof()
    return response
