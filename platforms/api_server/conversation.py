"""What a chat-completions request asks for: the new user turn, and for a stateless client the conversation around it
and the name its stored session goes by.

A client without ``X-Hermes-Session-Id`` (Open WebUI, LobeChat, the SDKs) sends the whole conversation each time:
its system messages (and ``developer`` ones, OpenAI's newer name for them), joined with a newline, are system text
added after ours; the user and assistant messages before the last user message are the history the model sees; the
last user message is the new turn. The stored session of such a conversation is named by a fingerprint of how it
began, as the reference system names it: ``"api-" + sha256(system + "\\n" + first user text)[:16]``, so consecutive
requests of one frontend conversation land in one stored session. When the request carries a key or a ``user``, both
are mixed into the fingerprint, so two clients never share a stored session (the reference lets any two that open
with "Hello" share one).

The body is the conversation as the client holds it now (``Conversation.whole``): when its user regenerated an answer
or edited a message, the turn replaces the stored tail from the first message the client no longer sends with the
client's (:mod:`hermes_actors.runtime.rewind`), so the stored session holds what the user sees. An edit of the first
user message begins another conversation (its fingerprint changes): a new session, the old one kept as it was.

A request whose messages end with ``tool`` messages brings the results of the client tool calls the previous
answer ended with: those results are the new turn (stored as tool messages, and the model continues from them), and
the messages before them, the assistant's tool calls among them, are the history. Its fingerprint is the same as
its conversation's other requests', so it continues their stored session.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec

from hermes_actors.messages import ClientTool, ContextMessage, Conversation, ToolResult
from platforms.api_server.client_tools import chat_tools
from platforms.api_server.tool_wire import dump_calls
from platforms.api_server.wire import ApiError, ChatMessage, ChatRequest, content_text, new_turn

__all__ = ["ROLES", "ChatTurn", "chat_turn", "conversation_name"]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_SYSTEM = frozenset({"system", "developer"})  # OpenAI's newer models call the system message "developer"


class ChatTurn(msgspec.Struct, frozen=True, kw_only=True):
    """The new turn of a request: its text and image URLs (or the client's tool results), the client's tools, and
    for a stateless request the conversation the model sees with it and the name of the conversation's stored
    session."""

    text: str
    images: list[str]
    conversation: Conversation | None = None
    name: str | None = None
    tools: tuple[ClientTool, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()


def conversation_name(system: str | None, first_user: str, *, scope: str | None = None, user: str | None = None) -> str:
    """The fingerprint name of a conversation that began with ``system`` and ``first_user``; ``scope`` (the key's
    fingerprint) and ``user`` are mixed in when given."""
    seed = f"{system or ''}\n{first_user}"
    if scope is not None or user is not None:
        seed += f"\n\x00{scope or ''}\n\x00{user or ''}"
    return "api-" + hashlib.sha256(seed.encode()).hexdigest()[:16]


def chat_turn(chat: ChatRequest, *, stateless: bool, scope: str | None, user: str | None = None) -> ChatTurn:
    """Check the request's messages and return its new turn; a 400 names the field that is wrong. ``user`` (else
    the body's ``user``) is mixed into the conversation's name."""
    _check(chat)
    tools = chat_tools(chat.tools, chat.tool_choice)
    results, index = _results(chat.messages)
    text, images = "", list[str]()
    if not results:
        text, images, index = new_turn(chat.messages)
    if not stateless:
        return ChatTurn(text=text, images=images, tools=tools, tool_results=results)
    systems = [content_text(m.content) for m in chat.messages if m.role in _SYSTEM]
    system = "\n".join(s for s in systems if s) or None
    history = tuple(
        _context(m)
        for m in chat.messages[:index]
        if m.role not in _SYSTEM and (content_text(m.content) or m.tool_calls)
    )
    first_user = next((content_text(m.content) for m in chat.messages if m.role == "user"), None)
    if first_user is None:
        raise ApiError(400, "messages holds no message with role 'user'; add one", param="messages")
    name = conversation_name(system, first_user, scope=scope, user=user or chat.user)
    conversation = Conversation(system=system, history=history, whole=True)
    return ChatTurn(text=text, images=images, conversation=conversation, name=name, tools=tools, tool_results=results)


def _results(messages: Sequence[ChatMessage]) -> tuple[tuple[ToolResult, ...], int]:
    """The tool results the messages end with (the new turn), and the index of the first of them."""
    start = len(messages)
    while start > 0 and messages[start - 1].role == "tool":
        start -= 1
    results = []
    for index in range(start, len(messages)):
        call_id = messages[index].tool_call_id
        if not call_id:
            raise ApiError(
                400,
                f"messages[{index}] is a tool message without tool_call_id; send the id of the call it answers",
                param=f"messages[{index}].tool_call_id",
            )
        results.append(ToolResult(call_id=call_id, output=content_text(messages[index].content)))
    return tuple(results), start


def _context(message: ChatMessage) -> ContextMessage:
    """A message of the client's history as the model sees it (its tool calls, or the call it answers, kept)."""
    return ContextMessage(
        role=message.role,
        content=content_text(message.content),
        tool_calls=dump_calls(message.tool_calls) if message.tool_calls else None,
        tool_call_id=message.tool_call_id if message.role == "tool" else None,
    )


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
                f"messages[{index}].role {message.role!r} is not supported; use system (or developer), user, "
                "assistant or tool",
                code="invalid_value",
                param=f"messages[{index}].role",
            )
