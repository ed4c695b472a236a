"""The agents as the API's models: ``GET /v1/models`` lists them, and a request's ``model`` may name one.

The list is the server's ``model_name`` (what the bindings choose for the API: the default agent unless a binding
says otherwise), then, when ``agents:`` configures more than the one agent, every agent by name, the default
(``default``) first. A request whose ``model``
names an agent starts its session with that agent; any other value (``model_name``, or a client's own default such
as ``gpt-4o``) leaves the choice to the bindings, as before agents had names. A session keeps its agent for its
life: a later request of the same session that names another agent is still answered by the session's. So that a
stateless conversation (one without ``X-Hermes-Session-Id``) begun with another agent is another stored session,
the agent's name is mixed into the conversation's fingerprint name (:func:`conversation_with`).
"""

from __future__ import annotations

import hashlib

from hermes_actors.ports import ApiInbox
from platforms.api_server.wire import Model, ModelList

__all__ = ["OWNER", "conversation_with", "model_list", "requested_agent"]

OWNER = "hermes-actors"
"""The ``owned_by`` of every listed model."""


def model_list(model_name: str, agents: tuple[str, ...], created: int) -> ModelList:
    """``model_name``, then each of ``agents`` not named so already (none when there is one agent alone)."""
    names = dict.fromkeys((model_name, *(agents if len(agents) > 1 else ())))
    return ModelList(
        object="list", data=[Model(id=name, object="model", created=created, owned_by=OWNER) for name in names]
    )


def requested_agent(inbox: ApiInbox, model: str | None) -> str | None:
    """The agent a request's ``model`` names; ``None`` when it names none (the bindings choose)."""
    return model if model is not None and model in inbox.agents else None


def conversation_with(name: str | None, agent: str | None) -> str | None:
    """A stateless conversation's fingerprint ``name`` for a request that named ``agent``: unchanged without one
    (so conversations from before keep their sessions), else with 8 hex digits of the agent's name added."""
    if name is None or agent is None:
        return name
    return f"{name}-{hashlib.sha256(agent.encode()).hexdigest()[:8]}"
