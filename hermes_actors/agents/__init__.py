"""Agents: what runs a turn, and the public API of agent plug-ins.

An agent of your own (``agent.factory`` in ``config.yaml``, see :mod:`hermes_actors.agents.factory`) needs only the
names exported here: the :class:`Agent` protocol and its capability protocols, what a turn gives it
(:class:`TurnInput`, with :class:`TurnEvents` for streaming text and tool progress, :class:`Steering` for messages
sent while it runs, :class:`Tool` for what it may call, :class:`ClientTool` and :class:`ToolResult` for an API
client's own tools and their results, :class:`MessageRecord` for the history) and what it gives back
(:class:`AgentReply` of :class:`AgentMessage`, :class:`Memory`, or an :class:`AgentError`). A tool call that needs a
person's approval pauses the turn (:attr:`TurnInput.approvals`, an :class:`ApprovalGate`: ask
:meth:`ApprovalGate.required`, pause with :func:`request_approval` of :func:`tool_call`, continue from
:class:`ApprovalDecision`). :mod:`hermes_actors.testing` checks an agent against the runtime's expectations
(``check_agent``, ``AgentContract``).

The modules: ``base`` (the protocols and the runtime's helpers that ask for a capability), ``turn`` (the data of
a turn), ``factory`` (plug-ins), ``contract`` (the checks), ``echo`` (the built-in deterministic agent),
``openai_chat`` with ``openai_endpoint``, ``openai_stream`` and ``openai_transcript`` (any OpenAI-compatible
endpoint), ``tools`` (what an agent may call, ``session_search``) and ``history`` (what of a transcript is sent
to the model).
"""

from __future__ import annotations

from hermes_actors.agents.approvals import request_approval, tool_call
from hermes_actors.agents.base import (
    Agent,
    BackgroundEndReportingAgent,
    BackgroundInterruptingAgent,
    BackgroundReportingAgent,
    BudgetedSummaryAgent,
    ContextWindowAgent,
    InlineAgent,
    ModelNamingAgent,
    PromptedAgent,
    SessionReleasingAgent,
    SteerableAgent,
    TitlingAgent,
)
from hermes_actors.agents.factory import ENTRY_POINT_GROUP, AgentContext, AgentFactory
from hermes_actors.agents.tools import Tool, error_json
from hermes_actors.agents.turn import (
    AgentError,
    AgentMessage,
    AgentReply,
    ApprovalDecision,
    ApprovalGate,
    ClientTool,
    Memory,
    Steering,
    ToolResult,
    ToolStatus,
    TurnEvents,
    TurnInput,
)
from hermes_actors.store.records import MessageRecord, Role

__all__ = [
    "ENTRY_POINT_GROUP",
    "Agent",
    "AgentContext",
    "AgentError",
    "AgentFactory",
    "AgentMessage",
    "AgentReply",
    "ApprovalDecision",
    "ApprovalGate",
    "BackgroundEndReportingAgent",
    "BackgroundInterruptingAgent",
    "BackgroundReportingAgent",
    "BudgetedSummaryAgent",
    "ClientTool",
    "ContextWindowAgent",
    "InlineAgent",
    "Memory",
    "MessageRecord",
    "ModelNamingAgent",
    "PromptedAgent",
    "Role",
    "SessionReleasingAgent",
    "SteerableAgent",
    "Steering",
    "TitlingAgent",
    "Tool",
    "ToolResult",
    "ToolStatus",
    "TurnEvents",
    "TurnInput",
    "error_json",
    "request_approval",
    "tool_call",
]
