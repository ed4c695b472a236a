"""Tools an agent may call during a turn, and the one every session offers: ``session_search``.

A :class:`Tool` is what a chat-completions endpoint needs to offer a function (name, description, JSON-schema
parameters) plus :meth:`Tool.run`, which takes the decoded arguments and returns JSON text for the tool message.
``run`` never raises: bad arguments and failures come back as ``{"error": ...}`` so the model can correct itself.

A session offers the same tool list for its whole life: :func:`freeze_tools` gives the text stored with it when it
starts and :func:`thaw_tools` the tools of a later turn, those specs with today's handlers.

An agent's configuration may add tools of its own (its MCP servers, :mod:`hermes_actors.agents.mcp`): a
:class:`ToolSource` given to :func:`offer_tools`. Sessions of that agent offer them after ``session_search``,
whatever the agent is (they reach it as ``TurnInput.tools``): :func:`agent_tools` with ``fresh=True`` when a session
starts, without when a later turn needs the handlers of the tools it froze.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import msgspec

from hermes_actors.config import SearchScope
from hermes_actors.messages import ToolServerHealth
from hermes_actors.search import DEFAULT_LIMIT, DEFAULT_WINDOW, MAX_LIMIT, MAX_WINDOW, Sort, session_search
from hermes_actors.store import Role, SessionFilter, StoreInterface

__all__ = [
    "SESSION_SEARCH",
    "Tool",
    "ToolSource",
    "agent_tools",
    "error_json",
    "find_tool",
    "freeze_tools",
    "offer_tools",
    "session_search_tool",
    "thaw_tools",
    "tool_servers",
]

_log = logging.getLogger(__name__)

SESSION_SEARCH = "session_search"


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    """A function the agent can call: ``handler`` gets the decoded arguments and returns JSON text.
    ``needs_approval``: a call waits for a person's decision before it runs (``TurnInput.approvals``)."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[dict[str, Any]], str]
    needs_approval: bool = False

    def run(self, arguments: dict[str, Any]) -> str:
        """Call the tool; return its JSON result, or ``{"error": ...}`` when it fails (it never raises)."""
        try:
            return self.handler(arguments)
        except Exception as exc:
            _log.exception("tool %s failed with arguments %.300r", self.name, arguments)
            return error_json(f"{self.name} failed ({type(exc).__name__}: {exc}); try again or change the arguments")

    def openai_spec(self) -> dict[str, Any]:
        """The tool as a chat-completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def error_json(message: str) -> str:
    """A tool result that reports ``message`` as an error."""
    return msgspec.json.encode({"error": message}).decode()


class _SearchArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a model may pass to session_search; ``null`` means the default."""

    query: str | None = None
    session_id: str | None = None
    around_message_id: int | None = None
    window: int | None = None
    role_filter: list[str] | str | None = None  # a string is comma-separated, as the reference's tool takes it
    sort: Sort | None = None
    limit: int | None = None
    source: str | None = None


_SCOPES = {
    SearchScope.USER: "earlier conversations with this user (only theirs: nobody else's are visible)",
    SearchScope.CHAT: "earlier conversations in this chat, with this user and the chat's other members",
    SearchScope.TENANT: "earlier conversations of this workspace and bot account, with any of its users",
    SearchScope.ALL: "earlier conversations with every user on every platform of this gateway",
}

_DESCRIPTION = (
    "Search {scope}. Shapes: "
    'query -> discovery (FTS5 syntax: words, "exact phrase", prefix*, AND/OR/NOT; title matches first, '
    "then matching messages, one hit per conversation, this conversation excluded; each hit has session_id, "
    "title, when, source, a snippet with >>>matches<<<, messages (the window around match_message_id, the anchor "
    "flagged), bookend_start, bookend_end, messages_before and messages_after); "
    "session_id + around_message_id -> scroll the messages around one message; session_id alone -> read that "
    "session (first 20 and last 10 messages when long); no arguments -> browse the most recent conversations. "
    "Times are unix seconds."
)

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for (FTS5 syntax). Omit to browse or read."},
        "session_id": {"type": "string", "description": "A session to read or scroll (from a hit)."},
        "around_message_id": {"type": "integer", "description": "With session_id: the message to scroll around."},
        "window": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_WINDOW,
            "description": f"Messages on each side of a match or scroll anchor (default {DEFAULT_WINDOW}).",
        },
        "role_filter": {
            "type": ["array", "string"],
            "items": {"type": "string", "enum": [r.value for r in Role]},
            "description": (
                "Roles whose messages discovery searches (default user and assistant): a list, or a "
                'comma-separated string such as "user,assistant,tool".'
            ),
        },
        "sort": {"type": "string", "enum": ["relevance", "newest", "oldest"], "description": "Discovery order."},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIMIT,
            "description": f"Most conversations discovery returns (default {DEFAULT_LIMIT}).",
        },
        "source": {"type": "string", "description": "Only sessions from this platform (telegram, slack, cli, ...)."},
    },
    "additionalProperties": False,
}


def session_search_tool(
    read: Callable[[], AbstractContextManager[StoreInterface]],
    current_session_id: str,
    *,
    visible: SessionFilter | None = None,
    scope: SearchScope = SearchScope.ALL,
) -> Tool:
    """The ``session_search`` tool for a turn of ``current_session_id``; ``read`` lends a read-only store.

    ``visible`` is what the asking principal may see under ``scope`` (see
    :func:`hermes_actors.principal.visible_sessions`); the tool's description tells the model that scope.
    """

    def handle(arguments: dict[str, Any]) -> str:
        try:
            args = msgspec.convert(arguments, _SearchArguments)
        except msgspec.ValidationError as exc:
            return error_json(f"bad arguments for {SESSION_SEARCH}: {exc}; see the parameter schema")
        with read() as store:
            result = session_search(
                store,
                query=args.query,
                session_id=args.session_id,
                around_message_id=args.around_message_id,
                window=DEFAULT_WINDOW if args.window is None else args.window,
                role_filter=args.role_filter,
                sort=args.sort or "relevance",
                limit=DEFAULT_LIMIT if args.limit is None else args.limit,
                current_session_id=current_session_id,
                source=args.source,
                visible=visible,
            )
        return msgspec.json.encode(result).decode()

    description = _DESCRIPTIONS[scope]  # one string per scope, shared by every session's tool
    return Tool(name=SESSION_SEARCH, description=description, parameters=_PARAMETERS, handler=handle)


_DESCRIPTIONS = {scope: _DESCRIPTION.format(scope=text) for scope, text in _SCOPES.items()}


def find_tool(tools: Sequence[Tool], name: str) -> Tool | None:
    """The tool called ``name``, or ``None``."""
    return next((tool for tool in tools if tool.name == name), None)


def freeze_tools(tools: Sequence[Tool]) -> str:
    """The tool list as a session stores it: the JSON array of the tools' chat-completions entries."""
    return msgspec.json.encode([tool.openai_spec() for tool in tools]).decode()


def thaw_tools(frozen: str, current: Sequence[Tool]) -> tuple[Tool, ...]:
    """The tools ``frozen`` lists, each with its stored name, description and parameters and the handler (and
    whether it needs approval: today's setting) of the ``current`` tool of that name; a tool no longer available
    answers with an error. Text that is not a frozen tool list gives ``current`` (logged)."""
    try:
        tools = []
        for name, description, parameters in _frozen_specs(frozen):
            now = find_tool(current, name)
            handler = now.handler if now is not None else _gone(name)
            needs = now is not None and now.needs_approval
            tools.append(
                Tool(name=name, description=description, parameters=parameters, handler=handler, needs_approval=needs)
            )
        return tuple(tools)
    except (msgspec.DecodeError, KeyError, TypeError) as exc:
        _log.warning("a frozen tool list is not valid (%s); offering the current tools", exc)
        return tuple(current)


@functools.lru_cache(maxsize=64)
def _frozen_specs(frozen: str) -> tuple[tuple[str, str, dict[str, Any]], ...]:
    """(name, description, parameters) of each entry of a frozen tool list, decoded once per distinct list: the
    sessions that froze the same list share its schemas (nothing writes to a tool's ``parameters``)."""
    entries = msgspec.json.decode(frozen, type=list[dict[str, Any]])
    specs = [entry["function"] for entry in entries]
    return tuple((str(spec["name"]), str(spec.get("description") or ""), spec["parameters"]) for spec in specs)


def _gone(name: str) -> Callable[[dict[str, Any]], str]:
    def handle(arguments: dict[str, Any]) -> str:
        return error_json(f"{name} is no longer available on this gateway; answer without it")

    return handle


class ToolSource(Protocol):
    """Tools an agent's configuration adds to its sessions' own, and the state of the servers behind them."""

    def fresh(self) -> tuple[Tool, ...]:
        """The tools as their servers list them now (a session is starting); bounded in time, and the last known
        list of a server that does not answer."""
        ...

    def current(self) -> tuple[Tool, ...]:
        """The tools as last listed, without waiting (the handlers of the tools a session froze)."""
        ...

    def health(self) -> list[ToolServerHealth]:
        """Each server's state."""
        ...


_SOURCES: weakref.WeakKeyDictionary[object, ToolSource] = weakref.WeakKeyDictionary()
_PINNED: dict[int, tuple[object, ToolSource]] = {}  # agents that cannot be weakly referenced, kept for good


def offer_tools(agent: object, source: ToolSource) -> None:
    """Have the sessions of ``agent`` offer the tools of ``source`` beside their own (any agent, a plug-in too:
    they reach it as ``TurnInput.tools``)."""
    try:
        _SOURCES[agent] = source
    except TypeError:  # no __weakref__ slot
        _PINNED[id(agent)] = (agent, source)


def _source_of(agent: object) -> ToolSource | None:
    try:
        return _SOURCES.get(agent)
    except TypeError:
        pinned = _PINNED.get(id(agent))
        return pinned[1] if pinned is not None and pinned[0] is agent else None


def agent_tools(agent: object, *, fresh: bool = False) -> tuple[Tool, ...]:
    """The tools :func:`offer_tools` gave ``agent``: listed now when ``fresh`` (a session starts), else as last
    listed; ``()`` for an agent without any (one dictionary lookup)."""
    source = _source_of(agent)
    if source is None:
        return ()
    return source.fresh() if fresh else source.current()


def tool_servers(agent: object) -> list[ToolServerHealth]:
    """The state of the servers behind the tools of ``agent`` (empty for an agent without any)."""
    source = _source_of(agent)
    return source.health() if source is not None else []
