"""A scripted model for the busy-policy tests: the tests' fake OpenAI endpoint answering each call with what it was
asked, each call held at a gate until the test lets it through, and every call counted by conversation.

A call's answer is ``re: A | B``: the user messages (one a line) after the last assistant message it was sent (what
the turn asks the model to answer). A call whose conversation's first user message starts with ``<tag>-`` counts for
``tag``. ``tool_first`` tags get a ``session_search`` tool call as their first answer of each turn (so a turn makes a
second model call, where a steered message joins it).
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

from tests.agents.chat_server import ChatServer, Scripted, completion, tool_call

__all__ = ["GatedModel", "answer_of"]


def _users_since_answer(messages: list[dict[str, Any]]) -> list[str]:
    users: list[str] = []
    for message in messages:
        if message["role"] == "assistant" and message.get("content"):
            users = []
        elif message["role"] == "user":
            users.extend(str(message["content"]).split("\n"))  # a merged turn's messages come as one, by line
    return users


def _tool_results_since_answer(messages: list[dict[str, Any]]) -> bool:
    """Whether this turn's model has had tool results already (a call after the first of the turn)."""
    found = False
    for message in messages:
        if message["role"] == "assistant" and message.get("content"):
            found = False
        elif message["role"] == "tool":
            found = True
    return found


def answer_of(*texts: str) -> str:
    """The model's answer to a call asked to answer ``texts``."""
    return "re: " + " | ".join(texts)


class GatedModel:
    """Answers ``server``'s chat completions (see the module docstring); ``open`` lets every call through at once."""

    def __init__(self, server: ChatServer, *, tool_first: frozenset[str] = frozenset(), open: bool = False) -> None:
        self._server = server
        self._tool_first = tool_first
        self._lock = threading.Condition()
        self._open = open
        self._passes: Counter[str] = Counter()  # calls let through per tag, beyond those waiting
        self.calls: Counter[str] = Counter()  # calls received per tag
        self.asked: list[tuple[str, list[str]]] = []  # (tag, what the call was asked to answer), in order
        server.respond_with(self._answer)

    def open(self) -> None:
        """Let every held and later call through."""
        with self._lock:
            self._open = True
            self._lock.notify_all()

    def close(self) -> None:
        """Hold later calls again."""
        with self._lock:
            self._open = False

    def let_through(self, tag: str, count: int = 1) -> None:
        """Let ``count`` calls of ``tag`` through (held ones first, else the next ones)."""
        with self._lock:
            self._passes[tag] += count
            self._lock.notify_all()

    def wait_calls(self, tag: str, count: int, timeout: float = 15.0) -> None:
        """Wait until ``count`` calls of ``tag`` have been received."""
        with self._lock:
            if not self._lock.wait_for(lambda: self.calls[tag] >= count, timeout):
                raise AssertionError(f"{tag}: {self.calls[tag]} model calls, expected {count}; asked {self.asked}")

    def _answer(self, body: Any) -> Scripted:
        messages = body["messages"]
        first = next((str(m["content"]) for m in messages if m["role"] == "user"), "")
        tag = first.split("-", 1)[0]
        asked = _users_since_answer(messages)
        with self._lock:
            self.calls[tag] += 1
            self.asked.append((tag, asked))
            self._lock.notify_all()
            while not self._open and self._passes[tag] <= 0 and not self._server.released.is_set():
                self._lock.wait(0.05)
            if self._passes[tag] > 0:
                self._passes[tag] -= 1
        if tag in self._tool_first and body.get("tools") and not _tool_results_since_answer(messages):
            arguments = json.dumps({"query": "earlier"})
            return completion(None, tool_calls=[tool_call(f"call-{len(self.asked)}", "session_search", arguments)])
        return completion(answer_of(*asked))
