"""A scripted model for client-side tool round trips, served by :mod:`tests.agents.chat_server`.

It reads each chat-completions body and plays one tool loop: to the user's question it calls the server's own
``session_search``; given that result it calls the client's ``get_weather`` (when the request offers it); given the
weather it answers in words. So one question costs three model calls, and the turn that calls ``get_weather`` ends
with a call for the client to run, after a server-side tool ran in the same turn.
"""

from __future__ import annotations

import json
from typing import Any

from tests.agents.chat_server import ChatServer, Scripted, completion, tool_call

__all__ = ["CLIENT_TOOL", "QUESTION", "WeatherModel", "answer_for"]

CLIENT_TOOL = "get_weather"
QUESTION = "What is the weather in Paris?"
_SEARCH_ID = "call_search_1"
_WEATHER_ID = "call_weather_1"


def answer_for(weather: str) -> str:
    """The model's final answer once ``get_weather`` returned ``weather``."""
    return f"In Paris: {weather}."


def _offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def _called(messages: list[dict[str, Any]], call_id: str) -> str | None:
    """The name of the tool the call ``call_id`` of an earlier assistant message named."""
    for message in messages:
        for call in message.get("tool_calls") or []:
            if call.get("id") == call_id:
                return str(call["function"]["name"])
    return None


class WeatherModel:
    """The responder of a :class:`ChatServer` (``server.respond_with(WeatherModel(server))``)."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        server.respond_with(self)

    @property
    def calls(self) -> int:
        """How many chat completions the model was asked for."""
        return len(self.server.completion_bodies)

    def __call__(self, body: Any) -> Scripted:
        messages: list[dict[str, Any]] = body["messages"]
        last = messages[-1]
        if last["role"] == "user":
            return completion(None, tool_calls=[tool_call(_SEARCH_ID, "session_search", {"query": "weather"})])
        if last["role"] == "tool" and _called(messages, last["tool_call_id"]) == "session_search":
            if CLIENT_TOOL not in _offered(body):
                return completion(f"{CLIENT_TOOL} is not offered: {_offered(body)}")
            return completion(None, tool_calls=[tool_call(_WEATHER_ID, CLIENT_TOOL, {"city": "Paris"})])
        if last["role"] == "tool" and _called(messages, last["tool_call_id"]) == CLIENT_TOOL:
            content = last["content"]
            return completion(answer_for(content if isinstance(content, str) else json.dumps(content)))
        return completion(f"unexpected conversation: {json.dumps(messages)[:500]}")
