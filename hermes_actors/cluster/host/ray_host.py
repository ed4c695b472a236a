"""Shard hosts as Ray actors: Ray places them and restarts them; PostgreSQL decides who may write.

:class:`ShardHost` is a named, detached Ray actor (``max_restarts=-1``: Ray starts it again after its worker dies,
rerunning the constructor, which takes the host's shards again once their terms have run out;
``max_task_retries=0``: no call is ever run twice). It hosts a
:class:`~hermes_actors.cluster.host.runtime.HostRuntime`. No call waits for a turn: its calls only start, stop and
report on the host. :func:`ensure_hosts` creates the hosts that do not exist yet (``get_if_exists``), which is what
``hermesd --cluster`` does at start; a second creation under a name already taken returns the running actor.
:func:`stop_hosts` (``hermesctl cluster stop-hosts``) ends them for good, to be created again from a replica's
configuration. A race
in Ray's named-actor registry could at worst run two incarnations of one name for a moment: they share the holder
name, but each takes a shard only under a new epoch, so at most one of them can commit in it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import ray

from hermes_actors.agents.base import Agent
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings, HostStatus
from hermes_actors.cluster.settings import Placement
from hermes_actors.cpu_affinity import cpu_affinity, placement
from hermes_actors.runtime.agent_roster import AgentRoster

__all__ = ["NAMESPACE", "ShardHost", "ensure_hosts", "host_handle", "stop_hosts"]

NAMESPACE = "hermes"
"""The Ray namespace of the shard hosts (named actors are unique within a namespace)."""

_log = logging.getLogger(__name__)


class _HostField(logging.Filter):
    """Adds ``host=<name>`` to every record (a structured formatter writes it as a field)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self._host = name

    def filter(self, record: logging.LogRecord) -> bool:
        record.host = self._host
        return True


class ShardHost:
    """A shard host in a Ray worker: builds and starts its runtime in the constructor (rerun on every restart).

    ``log_setup`` configures the worker's logging as ``hermesd``'s own (``daemon.log_level`` and ``log_format``,
    to the worker's stderr, which Ray keeps in its session directory: ``logs/worker-*-<pid>.err``); each line
    carries ``host=<name>``. Without it, WARNING and above in a plain format."""

    def __init__(
        self,
        settings: HostSettings,
        agent_factory: Callable[[], Agent | AgentRoster] | None = None,
        log_setup: Callable[[], None] | None = None,
    ) -> None:
        if log_setup is not None:
            log_setup()
        else:
            logging.basicConfig(level=logging.WARNING, format=f"{settings.name} %(levelname)s %(name)s: %(message)s")
        for handler in logging.getLogger().handlers:
            handler.addFilter(_HostField(settings.name))
        # The worker's threads (the host's and Ray's own) on the CPUs hermesd's daemon.cpu_affinity says, for the
        # life of the process: its turns share one interpreter lock, as hermesd's do.
        self._placement = contextlib.ExitStack()
        self._placement.enter_context(cpu_affinity(settings.cpu_affinity))
        if (placed := placement()) is not None:
            _log.info("%s", placed)
        built = agent_factory() if agent_factory is not None else None
        if isinstance(built, AgentRoster):
            self._runtime = HostRuntime(settings, agents=built)
        else:
            self._runtime = HostRuntime(settings, agent=built)
        self._runtime.start()

    def status(self) -> HostStatus:
        """A snapshot of this host."""
        return self._runtime.status()

    def handovers(self) -> list[tuple[int, float]]:
        """The latest messages handed to the supervisor: inbox id and when (:meth:`HostRuntime.handovers`)."""
        return self._runtime.handovers()

    def pid(self) -> int:
        """The worker process's id (the fault test signals it)."""
        return os.getpid()

    def stall_renewals(self, stalled: bool) -> None:
        """The fault test's switch: stop (or resume) renewing the shard terms while going on working."""
        self._runtime.keeper.stall_renewals = stalled

    def stop(self) -> None:
        """Stop the runtime and give the shards up (the caller then kills the actor)."""
        self._runtime.stop()


def _options(name: str, namespace: str, strategy: object) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": 4,  # status is answered while another call runs
        "num_cpus": 0,  # the agent pool, not Ray's scheduler, bounds a host's work
        "scheduling_strategy": strategy,  # also where Ray restarts it
        "get_if_exists": True,
    }


def _strategies(names: list[str], placement: Placement) -> dict[str, object]:
    """Where each host goes. ``spread``: the i-th host of ``names`` on the i-th live Ray node (by node id, round
    robin). The affinity is hard: when that node dies, Ray cannot restart the host there and gives it up, and a
    replica creates it again within its check interval on a node alive then. Ray's own ``SPREAD`` strategy, and a
    soft affinity, were not enough: two hosts could land on one node of two. ``pack``: Ray's default strategy."""
    if placement == "pack":
        return dict.fromkeys(names, "DEFAULT")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    listed: Callable[[], list[dict[str, Any]]] = ray.nodes  # untyped in Ray
    nodes = sorted(str(node["NodeID"]) for node in listed() if node.get("Alive"))
    if not nodes:
        return dict.fromkeys(names, "SPREAD")
    return {
        name: NodeAffinitySchedulingStrategy(nodes[index % len(nodes)], soft=False) for index, name in enumerate(names)
    }


def ensure_hosts(
    hosts: Iterable[HostSettings],
    *,
    agent_factory: Callable[[], Agent | AgentRoster] | None = None,
    namespace: str = NAMESPACE,
    log_setup: Callable[[], None] | None = None,
    placement: Placement = "spread",
) -> dict[str, Any]:
    """Create every host of ``hosts`` that is not running yet (logging as ``log_setup`` sets up), placed on the Ray
    nodes as ``placement`` says (``cluster.placement``); the handles by name."""
    remote = ray.remote(ShardHost)
    settings = list(hosts)
    strategies = _strategies([one.name for one in settings], placement)
    return {
        one.name: remote.options(**_options(one.name, namespace, strategies[one.name])).remote(
            one, agent_factory, log_setup
        )
        for one in settings
    }


def stop_hosts(names: Iterable[str], *, namespace: str = NAMESPACE, timeout_s: float = 30.0) -> list[str]:
    """Stop the running hosts among ``names`` for good: each gives its shards up (:meth:`ShardHost.stop`, waited for
    at most ``timeout_s``), then its actor is killed without a restart. A running replica creates them again within
    its check interval, with its own configuration and code. Returns the names that were running."""
    handles = {name: handle for name in names if (handle := host_handle(name, namespace)) is not None}
    stopping = {name: handle.stop.remote() for name, handle in handles.items()}
    for name, pending in stopping.items():
        try:
            ray.get(pending, timeout=timeout_s)
        except Exception:  # a host that cannot stop in time is killed all the same; its terms run out
            _log.warning("shard host %s did not stop within %.0f s; killing it", name, timeout_s, exc_info=True)
        ray.kill(handles[name], no_restart=True)
    return sorted(handles)


def host_handle(name: str, namespace: str = NAMESPACE) -> Any | None:
    """The handle of the running host ``name``, or ``None``."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None
