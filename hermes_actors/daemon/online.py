"""``hermesctl config check --online``: try what a configuration points at, beyond what a start checks.

The agent endpoint is asked for its models (``GET {agent.base_url}/models`` with the configured key), and each
enabled platform whose adapter has a cheap credential check (``check_credentials``: Telegram ``getMe``, Slack
``auth.test``, Discord ``/users/@me``, Matrix ``/account/whoami``, Feishu's tenant token, WhatsApp's number on
the Graph API) runs it; a platform without one (the API server, webhooks, WeChat, Signal) says so. Every check is
one line: what was tried and what came back.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
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
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    key = environ.get(agent.api_key_env)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        hint = f"; check the key in ${agent.api_key_env}" if exc.code in (401, 403) else ""
        return OnlineCheck(subject="agent", ok=False, outcome=f"GET {url} answered HTTP {exc.code} {exc.reason}{hint}")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return OnlineCheck(subject="agent", ok=False, outcome=f"GET {url} failed ({reason}); is the endpoint running?")
    try:
        listed = [str(entry["id"]) for entry in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        return OnlineCheck(subject="agent", ok=False, outcome=f"GET {url} did not answer a model list")
    if agent.model in listed:
        return OnlineCheck(subject="agent", ok=True, outcome=f"ok: {url} lists {agent.model}")
    return OnlineCheck(
        subject="agent",
        ok=True,
        outcome=f"reachable, but {url} does not list {agent.model} (it lists {', '.join(listed[:5]) or 'none'})",
    )
