"""What a chat-completions request asks for: the new user turn, and for a stateless client the conversation around it
and the name its stored session goes by.

A client without ``X-Hermes-Session-Id`` (Open WebUI, LobeChat, the SDKs) sends the whole conversation each time:
its system messages, joined with a newline, are system text added after ours; the user and assistant messages
before the last user message are the history the model sees; the last user message is the new turn. The stored
session of such a conversation is named by a fingerprint of how it began, as the reference system names it:
``"api-" + sha256(system + "\\n" + first user text)[:16]``, so consecutive requests of one frontend conversation land
in one stored session. When the request carries a key or a ``user``, both are mixed into the fingerprint, so two
clients never share a stored session (the reference lets any two that open with "Hello" share one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from hermes_actors.messages import ContextMessage, Conversation
from platforms.api_server.wire import ApiError, ChatMessage, ChatRequest, content_text, new_turn

__all__ = ["ROLES", "ChatTurn", "chat_turn", "conversation_name"]

ROLES = frozenset({"system", "user", "assistant", "tool"})


class ChatTurn(msgspec.Struct, frozen=True, kw_only=True):
    """The new turn of a request: its text and image URLs, and for a stateless request the conversation the model
    sees with it and the name of the conversation's stored session."""

    text: str
    images: list[str]
    conversation: Conversation | None = None
    name: str | None = None


def conversation_name(system: str | None, first_user: str, *, scope: str | None = None, user: str | None = None) -> str:
    """The fingerprint name of a conversation that began with ``system`` and ``first_user``; ``scope`` (the key's
    fingerprint) and ``user`` are mixed in when given."""
    seed = f"{system or ''}\n{first_user}"
    if scope is not None or user is not None:
        seed += f"\n\x00{scope or ''}\n\x00{user or ''}"
    return "api-" + hashlib.sha256(seed.encode()).hexdigest()[:16]


def chat_turn(chat: ChatRequest, *, stateless: bool, scope: str | None) -> ChatTurn:
    """Check the request's messages and return its new turn; a 400 names the field that is wrong."""
    _check(chat)
    text, images, index = new_turn(chat.messages)
    if not stateless:
        return ChatTurn(text=text, images=images)
    systems = [content_text(m.content) for m in chat.messages if m.role == "system"]
    system = "\n".join(s for s in systems if s) or None
    history = tuple(
        ContextMessage(role=m.role, content=content_text(m.content))
        for m in chat.messages[:index]
        if m.role in ("user", "assistant") and content_text(m.content)
    )
    first_user = next(content_text(m.content) for m in chat.messages if m.role == "user")
    name = conversation_name(system, first_user, scope=scope, user=chat.user)
    return ChatTurn(text=text, images=images, conversation=Conversation(system=system, history=history), name=name)


def _check(chat: ChatRequest) -> None:
    if chat.n is not None and chat.n != 1:
        raise ApiError(
            400, f"n={chat.n} is not supported: the agent gives one answer; send n=1 or leave it out", param="n"
        )
    _check_roles(chat.messages)


def _check_roles(messages: Sequence[ChatMessage]) -> None:
    for index, message in enumerate(messages):
        if message.role not in ROLES:
            raise ApiError(
                400,
                f"messages[{index}].role {message.role!r} is not supported; use system, user, assistant or tool",
                code="invalid_value",
                param=f"messages[{index}].role",
            )
