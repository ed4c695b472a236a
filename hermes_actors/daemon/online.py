"""``hermesctl config check --online``: try what a configuration points at, beyond what a start checks.

The agent endpoint is asked for its models (``GET {agent.base_url}/models`` with the configured key), and each
enabled platform whose adapter has a cheap credential check (``check_credentials``: Telegram ``getMe``, Slack
``auth.test``, Discord ``/users/@me``, Matrix ``/account/whoami``, Feishu's tenant token, WhatsApp's number on
the Graph API) runs it; a platform without one (the API server, webhooks, WeChat, Signal) says so. Every check is
one line: what was tried and what came back. The agent's request goes through the platforms' HTTP client
(:func:`platforms.registry.fetch_json`), like the platforms' own checks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from http import HTTPStatus
from pathlib import Path

import msgspec

from hermes_actors.daemon.agent_settings import AgentSettings
from hermes_actors.daemon.config_file import Settings
from hermes_actors.daemon.startup import prepare_start
from hermes_actors.errors import HermesError
from platforms import registry

__all__ = ["OnlineCheck", "check_agent", "online_checks"]


class OnlineCheck(msgspec.Struct, frozen=True, kw_only=True):
    """One check's outcome: ``subject`` (``agent`` or a platform name), whether it passed, and what was seen."""

    subject: str
    ok: bool
    outcome: str


def online_checks(
    settings: Settings, *, home: Path, environ: Mapping[str, str], timeout_s: float = 10.0
) -> Iterator[OnlineCheck]:
    """The agent's check and each named agent's (subject ``agents.<name>``), then one per enabled platform, in the
    configuration's order."""
    yield check_agent(settings.agent, environ, timeout_s=timeout_s)
    for name, named in settings.agents.items():
        checked = check_agent(named, environ, timeout_s=timeout_s)
        yield msgspec.structs.replace(checked, subject=f"agents.{name}")
    plan = prepare_start(settings, home=home, environ=environ)
    try:
        for name, adapter in plan.adapters.items():
            try:
                seen = registry.check_credentials(adapter, timeout_s=timeout_s)
            except HermesError as exc:
                yield OnlineCheck(subject=name, ok=False, outcome=f"refused: {exc}")
                continue
            if seen is None:
                yield OnlineCheck(subject=name, ok=True, outcome="has no credential check to try; not contacted")
            else:
                yield OnlineCheck(subject=name, ok=True, outcome="ok: " + "; ".join(seen))
    finally:
        plan.discard()


def check_agent(agent: AgentSettings, environ: Mapping[str, str], *, timeout_s: float) -> OnlineCheck:
    """``GET {base_url}/models`` with the key from ``agent.api_key_env`` (the echo agent has nothing to try)."""
    if agent.factory is not None:
        outcome = f"the plug-in agent of {agent.factory}; nothing to contact"
        return OnlineCheck(subject="agent", ok=True, outcome=outcome)
    if agent.base_url is None:
        return OnlineCheck(subject="agent", ok=True, outcome="the built-in echo agent; nothing to contact")
    url = agent.base_url.rstrip("/") + "/models"
    headers = {"Accept": "application/json"}
    key = environ.get(agent.api_key_env)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        status, answer = registry.fetch_json(url, headers=headers, timeout_s=timeout_s)
    except HermesError as exc:
        return OnlineCheck(subject="agent", ok=False, outcome=f"GET {url} failed ({exc}); is the endpoint running?")
    if not 200 <= status < 300:
        hint = f"; check the key in ${agent.api_key_env}" if status in (401, 403) else ""
        outcome = f"GET {url} answered HTTP {status} {_phrase(status)}{hint}"
        return OnlineCheck(subject="agent", ok=False, outcome=outcome)
    try:
        listed = [str(entry["id"]) for entry in answer["data"]]
    except (KeyError, TypeError):
        return OnlineCheck(subject="agent", ok=False, outcome=f"GET {url} did not answer a model list")
    if agent.model in listed:
        return OnlineCheck(subject="agent", ok=True, outcome=f"ok: {url} lists {agent.model}")
    return OnlineCheck(
        subject="agent",
        ok=True,
        outcome=f"reachable, but {url} does not list {agent.model} (it lists {', '.join(listed[:5]) or 'none'})",
    )


def _phrase(status: int) -> str:
    """The reason phrase of ``status`` (``Unauthorized``), or nothing for a code HTTP does not name."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
