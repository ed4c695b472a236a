"""The named agents of one runtime, and the bindings that choose which of them answers a new session.

A session's agent is chosen once, when the session starts, and stored with it (``sessions.agent``): the agent a
message asked for (the API's ``model``, :attr:`~hermes_actors.messages.InboundMessage.agent`) when it names one,
else the most specific :class:`AgentBinding` that matches the session's source, else the agent named
:data:`DEFAULT_AGENT`. From then on the session, its compression children and a ``/resume`` of it keep that agent
(the prompt-cache rule: the same system message and tools for its life), so a change of the bindings reaches new
sessions only. A session without a stored name (from before schema version 8) has the default agent, which is what
answered it then. The choice is made when a session's actor is activated, never per turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence

import msgspec

from hermes_actors.agents.base import Agent
from hermes_actors.errors import ConfigError
from hermes_actors.lifecycle.resets import background_hook
from hermes_actors.routing import SessionSource
from hermes_actors.store import SessionRecord

__all__ = ["CHAT_TYPES", "DEFAULT_AGENT", "AgentBinding", "AgentRoster", "NamedAgent", "check_bindings"]

_log = logging.getLogger(__name__)

DEFAULT_AGENT = "default"
"""The name of the agent of ``config.yaml``'s ``agent:`` section, which answers what no binding chooses."""

CHAT_TYPES = ("dm", "group", "channel", "thread")
"""The chat types a binding may name: those the adapters give a message's source."""


class AgentBinding(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One entry of ``bindings``: ``agent`` answers the new sessions of the chats it matches. A key left out
    matches anything, so an entry with ``agent`` alone matches every chat (the catch-all).

    Of the entries that match, the one naming a chat id wins over one naming a chat type, which wins over one naming
    an account, which wins over one naming only a platform; among equals the first listed wins.
    """

    agent: str
    platform: str | None = None
    account: str | None = None  # the bot account (a webhook route's name, a Telegram bot's name, ...)
    chat_type: str | None = None  # one of CHAT_TYPES
    chat_id: str | None = None

    def matches(self, source: SessionSource) -> bool:
        """Whether every key this entry names equals ``source``'s."""
        return (
            (self.platform is None or self.platform == source.platform)
            and (self.account is None or self.account == (source.account_id or ""))
            and (self.chat_type is None or self.chat_type == source.chat_type)
            and (self.chat_id is None or self.chat_id == source.chat_id)
        )

    @property
    def rank(self) -> tuple[bool, bool, bool, bool]:
        """How specific the entry is: higher wins (chat id, then chat type, then account, then platform)."""
        return (
            self.chat_id is not None,
            self.chat_type is not None,
            self.account is not None,
            self.platform is not None,
        )


def check_bindings(bindings: Sequence[AgentBinding], names: Collection[str]) -> None:
    """Raise :class:`~hermes_actors.errors.ConfigError` naming ``bindings[i].agent`` for the first binding whose agent
    is not one of ``names``."""
    for index, binding in enumerate(bindings):
        if binding.agent not in names:
            raise ConfigError(
                f"bindings[{index}].agent",
                f"names {binding.agent!r}, which is not an agent; use one of: {', '.join(names)} "
                "(or add it under agents:)",
            )


class NamedAgent(msgspec.Struct, frozen=True, kw_only=True):
    """One configured agent: its name, the agent, and its context window in tokens (``None``: the agent's own, else
    ``runtime.context_window``)."""

    name: str
    agent: Agent
    context_window: int | None = None


class AgentRoster:
    """The named agents (one is :data:`DEFAULT_AGENT`) and the bindings between them; immutable once built.

    Raises :class:`~hermes_actors.errors.ConfigError` naming ``bindings[i].agent`` for a binding whose agent is
    not one of ``agents``, or ``agents`` when two share a name or none is the default.
    """

    __slots__ = ("_agents", "_bindings", "_default")

    def __init__(self, agents: Sequence[NamedAgent], bindings: Sequence[AgentBinding] = ()) -> None:
        named: dict[str, NamedAgent] = {}
        for entry in agents:
            if entry.name in named:
                raise ConfigError("agents", f"two agents are named {entry.name!r}; give each a name of its own")
            named[entry.name] = entry
        if DEFAULT_AGENT not in named:
            raise ConfigError("agents", f"no agent is named {DEFAULT_AGENT!r}; it answers what no binding chooses")
        check_bindings(bindings, named)
        self._agents: Mapping[str, NamedAgent] = named
        self._default = named[DEFAULT_AGENT]
        # Most specific first; sorted() is stable, so among equals the order of the configuration decides.
        self._bindings = tuple(sorted(bindings, key=lambda b: b.rank, reverse=True))

    @classmethod
    def single(cls, agent: Agent, *, context_window: int | None = None) -> AgentRoster:
        """A roster of ``agent`` alone, as the default agent."""
        return cls([NamedAgent(name=DEFAULT_AGENT, agent=agent, context_window=context_window)])

    @property
    def default(self) -> NamedAgent:
        """The agent of ``config.yaml``'s ``agent:`` section: what no binding chooses and what older sessions have."""
        return self._default

    @property
    def agents(self) -> tuple[NamedAgent, ...]:
        """Every agent, the default first, the others in the order they were given."""
        return (self._default, *(a for a in self._agents.values() if a is not self._default))

    @property
    def names(self) -> tuple[str, ...]:
        """The names of :attr:`agents`, in the same order."""
        return tuple(a.name for a in self.agents)

    def get(self, name: str) -> NamedAgent | None:
        """The agent named ``name``, if there is one."""
        return self._agents.get(name)

    def bound(self, source: SessionSource) -> NamedAgent:
        """The agent the bindings choose for a new session of ``source`` (the default when none matches)."""
        for binding in self._bindings:
            if binding.matches(source):
                return self._agents[binding.agent]
        return self._default

    def for_new(self, source: SessionSource, requested: str | None = None) -> NamedAgent:
        """The agent of a session that starts now: ``requested`` when it names an agent, else :meth:`bound`."""
        chosen = self._agents.get(requested) if requested is not None else None
        return chosen if chosen is not None else self.bound(source)

    def for_record(self, record: SessionRecord) -> NamedAgent:
        """The agent of a stored session: the one it recorded, the default when it recorded none. A name that is no
        longer configured gets the default too, with a warning (adding the agent back restores it)."""
        if record.agent is None:
            return self._default
        found = self._agents.get(record.agent)
        if found is None:
            _log.warning(
                "session %s: its agent %r is no longer configured; the default agent answers it (add agents.%s "
                "back to config.yaml to restore it)",
                record.id,
                record.agent,
                record.agent,
            )
            return self._default
        return found

    def background_hook(self) -> Callable[[str], float | None] | None:
        """When a session's background process started, as the first agent that knows says (``None``: no agent
        reports background processes)."""
        hooks = [hook for entry in self.agents if (hook := background_hook(entry.agent)) is not None]
        if len(hooks) <= 1:
            return hooks[0] if hooks else None

        def started_at(session_id: str) -> float | None:
            return next((at for hook in hooks if (at := hook(session_id)) is not None), None)

        return started_at
