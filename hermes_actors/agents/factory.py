"""Agent plug-ins: the callable ``agent.factory`` names, what it is given and what it must return.

``agent.factory`` is either ``package.module:callable`` (an attribute path after the colon: ``mod:Class.build``) or
the name of an entry point in the :data:`ENTRY_POINT_GROUP` group, which an installed distribution declares::

    [project.entry-points."hermes_actors.agents"]
    calculator = "calculator_agent:build"

The callable is an :class:`AgentFactory`: it gets one :class:`AgentContext` and returns the agent, any object with
the :class:`~hermes_actors.agents.base.Agent` methods (and whichever capabilities it has). It runs when
``hermesd`` starts and again for ``hermesctl config check`` (which drops the agent, calling its ``close()`` if it
has one), on each shard host of a cluster, and for ``hermesctl chat --local``: building should be quick and
open nothing it cannot close. :func:`build_plugin_agent` loads and calls it; every way that can fail is a
:class:`~hermes_actors.errors.ConfigError` naming the key, the import path and the exception.
"""

from __future__ import annotations

import importlib
import re
import reprlib
from collections.abc import Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any, Protocol, cast

import msgspec

from hermes_actors.errors import ConfigError

if TYPE_CHECKING:
    from hermes_actors.agents.base import Agent

__all__ = [
    "AGENT_METHODS",
    "ENTRY_POINT_GROUP",
    "FACTORY_PATTERN",
    "AgentContext",
    "AgentFactory",
    "build_plugin_agent",
    "echo_agent",
    "load_factory",
]

ENTRY_POINT_GROUP = "hermes_actors.agents"
FACTORY_PATTERN = re.compile(r"(?:[A-Za-z_][\w.]*:[A-Za-z_][\w.]*|[A-Za-z0-9][\w.-]*)")
"""``module:attribute`` (dotted names on either side), or an entry point's name (no colon)."""
AGENT_METHODS = ("run_turn", "summarize", "save_memories")
"""What every agent has; the rest are capabilities (:mod:`hermes_actors.agents.base`)."""


class AgentContext(msgspec.Struct, frozen=True, kw_only=True):
    """What an :class:`AgentFactory` is given: the ``agent:`` section's settings that concern any agent.

    - ``system_prompt``: ``agent.system_prompt`` (or the text of ``agent.system_prompt_file``), ``None`` when
      unset. Sessions freeze the agent's ``system_prompt`` attribute into their system message, so an agent built
      with a prompt must keep it there (``self.system_prompt = context.system_prompt``).
    - ``model``: ``agent.model``, ``None`` when unset; sessions record the agent's ``model`` attribute.
    - ``options``: ``agent.options``, the factory's own settings as parsed from YAML (any mapping).
    - ``context_window``: ``agent.context_window`` in tokens, ``None`` when unset.
    - ``environ``: the environment of the process building the agent (on a cluster's shard hosts, the host's),
      for the secrets the factory reads by the names its options give.
    - ``section``: the config key the agent is built from (``agent``), for the factory's own
      :class:`~hermes_actors.errors.ConfigError` (``f"{context.section}.options.url"``), which is shown as raised.
    """

    system_prompt: str | None = None
    model: str | None = None
    options: Mapping[str, Any] = msgspec.field(default_factory=dict)
    context_window: int | None = None
    environ: Mapping[str, str] = msgspec.field(default_factory=dict)
    section: str = "agent"


class AgentFactory(Protocol):
    """Builds an agent from its :class:`AgentContext` (a function, or a class whose ``__init__`` takes it)."""

    def __call__(self, context: AgentContext, /) -> Agent: ...


def load_factory(reference: str, *, key: str = "agent.factory") -> AgentFactory:
    """The callable ``reference`` names (``module:attribute`` or an entry point's name); raise
    :class:`ConfigError` on ``key`` naming the reference and the exception when it cannot be loaded."""
    if ":" in reference:
        module_name, _, attribute = reference.partition(":")
        found = _imported(reference, module_name, attribute, key)
    else:
        found = _entry_point(reference, key)
    if not callable(found):
        raise ConfigError(
            key,
            f"{reference} is not callable ({_shown(found)}); name a function or class that builds the agent",
        )
    factory: AgentFactory = found
    return factory


def _imported(reference: str, module_name: str, attribute: str, key: str) -> object:
    try:
        found: object = importlib.import_module(module_name)
    except Exception as exc:  # a plug-in's module may raise anything while it imports
        raise ConfigError(
            key,
            f"cannot import {module_name} for {reference} ({type(exc).__name__}: {exc}); install it or put its "
            "directory on hermesd's PYTHONPATH",
        ) from exc
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError as exc:
            raise ConfigError(
                key,
                f"cannot load {reference}: {module_name} has no {attribute} (AttributeError: {exc}); check the name",
            ) from exc
    return found


def _entry_point(name: str, key: str) -> object:
    points = list(metadata.entry_points(group=ENTRY_POINT_GROUP, name=name))
    if not points:
        known = sorted({point.name for point in metadata.entry_points(group=ENTRY_POINT_GROUP)})
        listed = f" (installed: {', '.join(known)})" if known else " (none is installed)"
        raise ConfigError(
            key,
            f"no entry point {name!r} in the {ENTRY_POINT_GROUP} group{listed}; install the package that declares "
            "it, or name the callable as package.module:callable",
        )
    values = sorted({point.value for point in points})
    if len(values) > 1:
        raise ConfigError(
            key,
            f"entry point {name!r} of {ENTRY_POINT_GROUP} names {' and '.join(values)}; name one as module:callable",
        )
    try:
        return points[0].load()
    except Exception as exc:
        raise ConfigError(
            key, f"cannot load entry point {name!r} ({values[0]}): {type(exc).__name__}: {exc}; check the package"
        ) from exc


def build_plugin_agent(reference: str, context: AgentContext) -> Agent:
    """Load the factory ``reference`` names and build the agent from ``context``; raise :class:`ConfigError` on
    ``<section>.factory`` when the factory cannot be loaded, raises, or returns something that is not an agent (or
    one without the ``system_prompt``/``model`` attribute that carries a configured prompt or model into sessions).
    A :class:`ConfigError` the factory raises itself is passed on as it is."""
    key = f"{context.section}.factory"
    factory = load_factory(reference, key=key)
    try:
        agent: object = factory(context)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            key, f"{reference} raised {type(exc).__name__}: {exc}; fix the factory or {context.section}.options"
        ) from exc
    missing = [name for name in AGENT_METHODS if not callable(getattr(agent, name, None))]
    if missing:
        raise ConfigError(
            key,
            f"{reference} returned {_shown(agent)}, which is not an agent: it lacks {', '.join(missing)} "
            "(see hermes_actors.agents.Agent)",
        )
    for setting, attribute in (("system_prompt", context.system_prompt), ("model", context.model)):
        if attribute is not None and not hasattr(agent, setting):
            raise ConfigError(
                f"{context.section}.{setting}",
                f"is set, but the {type(agent).__name__} that {reference} built has no {setting} attribute, so "
                f"sessions would never see it; keep it there (self.{setting} = context.{setting}) or remove it",
            )
    return cast("Agent", agent)  # checked above: it has the Agent methods


def _shown(value: object) -> str:
    """``str 'abc'``: a value's type and its start, for an error."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def echo_agent(context: AgentContext) -> Agent:
    """The built-in echo agent as a plug-in: hermes-actors' own entry point ``echo`` of :data:`ENTRY_POINT_GROUP`."""
    from hermes_actors.agents.echo import EchoAgent

    return EchoAgent(system_prompt=context.system_prompt)
