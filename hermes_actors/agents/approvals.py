"""Tools that wait for a person's approval: what an agent's configuration says, and how an agent asks.

``agent.approvals`` (:class:`ApprovalSettings`) names the tools whose calls wait for a decision (the built-in ones
such as ``session_search``, an MCP tool by the name the model calls it, or a plug-in agent's own tools) and how
long the session's user has to answer: no answer in time is a denial. An MCP server's ``require_approval`` marks
its tools itself (:attr:`~hermes_actors.agents.tools.Tool.needs_approval`). Where the agent is built,
:func:`require_approvals` hands the settings to the runtime, which gives each turn an
:class:`~hermes_actors.agents.turn.ApprovalGate` (``TurnInput.approvals``).

An agent asks by ending its turn with the calls that wait (:attr:`~hermes_actors.agents.turn.AgentReply.
approval_calls`; :func:`request_approval` builds that reply): the runtime stores the turn, asks the user in their
chat (or over the API, or in the console) and continues with the decision as the next turn, after a restart too.
The built-in OpenAI-compatible agent does this for every call the gate holds.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from hermes_actors.agents.turn import AgentMessage, AgentReply
from hermes_actors.constraints import PositiveSeconds, check_section
from hermes_actors.store.records import Role

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "ApprovalSettings",
    "approval_settings",
    "request_approval",
    "require_approvals",
    "tool_call",
]

DEFAULT_TIMEOUT_S = 600.0  # how long a request waits for its answer unless agent.approvals.timeout_s says otherwise


class ApprovalSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``agent.approvals``: ``tools`` are tool names or shell patterns (as the model calls them: ``session_search``,
    ``files__delete_*``, a plug-in agent's own) whose calls wait for the session's user (or the operator) to
    approve them; ``timeout_s`` is how long a request waits before it counts as denied."""

    tools: list[str] = []
    timeout_s: PositiveSeconds = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        check_section(self, "agent.approvals")


_SETTINGS: weakref.WeakKeyDictionary[object, ApprovalSettings] = weakref.WeakKeyDictionary()
_PINNED: dict[int, tuple[object, ApprovalSettings]] = {}  # agents that cannot be weakly referenced


def require_approvals(agent: object, settings: ApprovalSettings) -> None:
    """Have the sessions of ``agent`` hold the calls ``settings`` names for approval (where the agent is built)."""
    try:
        _SETTINGS[agent] = settings
    except TypeError:  # no __weakref__ slot
        _PINNED[id(agent)] = (agent, settings)


def approval_settings(agent: object) -> ApprovalSettings:
    """The settings :func:`require_approvals` gave ``agent`` (none: no tool of its own waits, a wait of
    :data:`DEFAULT_TIMEOUT_S` for MCP tools that ask)."""
    try:
        found = _SETTINGS.get(agent)
    except TypeError:
        pinned = _PINNED.get(id(agent))
        found = pinned[1] if pinned is not None and pinned[0] is agent else None
    return found if found is not None else ApprovalSettings()


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """A call of ``name`` in OpenAI's shape, as :attr:`AgentReply.approval_calls` and ``AgentMessage.tool_calls``
    hold them."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(dict(arguments))}}


def request_approval(
    calls: Sequence[Mapping[str, Any]],
    *,
    text: str = "",
    before: Sequence[AgentMessage] = (),
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> AgentReply:
    """The reply that pauses a turn until ``calls`` (:func:`tool_call`) are decided: ``before`` (what the turn
    produced so far), then an assistant message with ``text`` and the calls. The next turn brings the decisions
    (``turn.approvals.decision(call_id)``)."""
    if not calls:
        raise ValueError("request_approval needs at least one call to ask about")
    dumped = json.dumps([dict(call) for call in calls])
    asking = AgentMessage(role=Role.ASSISTANT, content=text or None, tool_calls=dumped)
    return AgentReply(
        messages=(*before, asking),
        text=text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        approval_calls=dumped,
    )
