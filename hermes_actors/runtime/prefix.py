"""What goes before a session's conversation, frozen when the session starts: the prompt-cache rule.

Only an explicit reset may invalidate the model's prompt cache, so the system message (the configured
``agent.system_prompt`` and the memories of the session's user as of its start) and the tool list are fixed when a
session starts, stored with it (``sessions.system_prompt`` holds the exact system message, ``sessions.tools`` the
JSON of the tool entries) and sent as those same bytes on every call of the session, across passivation and
restarts, until it ends or compresses (a compression child freezes its own). Memories saved meanwhile reach the
user's next session. A session from before schema version 6 (``tools`` NULL) is frozen by its next turn.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import msgspec

from hermes_actors.agents.base import system_prompt_of
from hermes_actors.agents.tools import Tool, agent_tools, freeze_tools, thaw_tools
from hermes_actors.agents.turn import system_message
from hermes_actors.principal import Principal
from hermes_actors.routing import SessionSource
from hermes_actors.store import SessionRecord, StoreInterface

__all__ = ["FrozenPrefix", "fresh_prefix", "stored_prefix", "user_key"]


class FrozenPrefix(msgspec.Struct, frozen=True, kw_only=True):
    """A session's system message (``None``: none is sent) and tool list (JSON), as stored with it."""

    system_prompt: str | None
    tools: str

    @property
    def chars(self) -> int:
        """The characters it adds to every prompt: the system message and the tool list."""
        return len(self.system_prompt or "") + len(self.tools)

    def offered(self, current: Sequence[Tool]) -> tuple[Tool, ...]:
        """The frozen tools, each run by the ``current`` tool of its name."""
        return thaw_tools(self.tools, current)


def user_key(source: SessionSource) -> str | None:
    """Return the key of the principal a session belongs to (memories are kept per principal), or ``None``."""
    return Principal.of(source).memory_key


def fresh_prefix(
    store: StoreInterface, agent: object, source: SessionSource, tools: Sequence[Tool], *, prompt: str | None = None
) -> FrozenPrefix:
    """The prefix a session of ``source`` starts with now: ``prompt`` (by default the agent's configured one) and
    the memories of its user as the store has them, then ``tools`` and the agent's own (its MCP servers' tools, as
    they list them now: :func:`~hermes_actors.agents.tools.agent_tools`)."""
    key = user_key(source)
    memories = store.memories.for_user(key) if key is not None else []
    configured = prompt if prompt is not None else system_prompt_of(agent)
    listed = (*tools, *agent_tools(agent, fresh=True))
    # Interned: the sessions whose tool lists are alike (most) share one copy of its JSON.
    return FrozenPrefix(system_prompt=system_message(configured, memories), tools=sys.intern(freeze_tools(listed)))


def stored_prefix(record: SessionRecord) -> FrozenPrefix | None:
    """The prefix stored with ``record``; ``None`` for a session from before it was stored (schema 6)."""
    if record.tools is None:
        return None
    return FrozenPrefix(system_prompt=record.system_prompt, tools=sys.intern(record.tools))
