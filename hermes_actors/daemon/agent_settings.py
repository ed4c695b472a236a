"""The ``agent:`` section of ``config.yaml``: which agent answers, and the system prompt sessions start with."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from hermes_actors.agents.approvals import ApprovalSettings
from hermes_actors.agents.factory import FACTORY_PATTERN
from hermes_actors.agents.mcp.settings import McpServerSettings, check_servers
from hermes_actors.constraints import PositiveSeconds, Rule, check_section
from hermes_actors.errors import ConfigError
from hermes_actors.runtime.agent_health import AgentProbeConfig

__all__ = ["AgentSettings"]

_ENDPOINT_KEYS = ("api_key_env", "timeout_s", "max_retries", "temperature", "vision")
_BaseUrl = Annotated[
    str, Rule(Meta(pattern="^https?://"), "must be an http:// or https:// URL such as http://127.0.0.1:8000/v1")
]
_Retries = Annotated[int, Rule(Meta(ge=0), "must not be negative")]
_Window = Annotated[int, Rule(Meta(ge=1024), "must be at least 1024 tokens")]
_PromptFile = Annotated[str, Rule(Meta(pattern=r"\S"), "must be a file path such as prompt.md, not empty")]
_Factory = Annotated[
    str,
    Rule(
        Meta(pattern=rf"^(?:{FACTORY_PATTERN.pattern})\Z"),
        "{value!r} names no callable; use package.module:callable (such as mypkg.agent:build) or the name of an "
        "entry point of the hermes_actors.agents group",
    ),
]


class AgentSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``agent:`` section: one agent's settings. Without ``base_url`` or ``factory`` the built-in echo agent
    answers.

    ``factory`` (``package.module:callable``, or an entry point of the ``hermes_actors.agents`` group) builds a
    plug-in agent from an :class:`~hermes_actors.agents.factory.AgentContext`: the system prompt, ``model``,
    ``context_window`` and ``options`` (the factory's own settings, any mapping). The OpenAI-compatible agent's
    keys (``base_url``, ``api_key_env``, ``timeout_s``, ``max_retries``, ``temperature``, ``vision``) do not apply
    to it and are refused beside it.

    ``vision: true`` says the model takes images: a turn's image attachments are sent to it as image parts.
    ``system_prompt`` (text) or ``system_prompt_file`` (a UTF-8 file, relative to the home directory or absolute;
    not both) goes first in the system message of every session, which is frozen when the session starts: a
    change reaches the sessions started after hermesd restarts. :func:`load_settings` reads the file (a missing
    or unreadable one is a :class:`ConfigError`) and gives its absolute path; :meth:`read_system_prompt` the text.

    ``mcp_servers`` names MCP servers (:class:`~hermes_actors.agents.mcp.McpServerSettings`) whose tools every
    session of this agent offers, whatever the agent is.

    ``approvals`` (:class:`~hermes_actors.agents.approvals.ApprovalSettings`) names the tools whose calls wait for
    a person's decision (an MCP server's ``require_approval`` marks its own) and how long a request waits.

    ``probe`` (:class:`~hermes_actors.runtime.agent_health.AgentProbeConfig`; the default agent's counts) says how
    often health checks may probe the agent, and whether a degraded agent fails ``/health/ready``
    (``probe.fail_readiness``).
    """

    base_url: _BaseUrl | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: PositiveSeconds = 120.0
    max_retries: _Retries = 2
    temperature: float | None = None
    context_window: _Window | None = None
    vision: bool = False
    system_prompt: str | None = None
    system_prompt_file: _PromptFile | None = None
    factory: _Factory | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp_servers: dict[str, McpServerSettings] = msgspec.field(default_factory=dict)
    approvals: ApprovalSettings = ApprovalSettings()
    probe: AgentProbeConfig = AgentProbeConfig()

    def __post_init__(self) -> None:
        check_section(self, "agent")
        self._check_factory()
        check_servers(self.mcp_servers, "agent.mcp_servers")
        if self.system_prompt is not None and self.system_prompt_file is not None:
            raise ConfigError(
                "agent.system_prompt_file",
                "cannot be set together with agent.system_prompt; keep one of them (the text, or a file holding it)",
            )
        if self.base_url is not None and not self.model:
            raise ConfigError("agent.model", "is required with agent.base_url (the model name the endpoint serves)")

    def _check_factory(self) -> None:
        if self.factory is None:
            if self.options:
                raise ConfigError(
                    "agent.options", "only a plug-in agent takes options; set agent.factory or remove them"
                )
            return
        if self.base_url is not None:
            raise ConfigError(
                "agent.factory",
                "cannot be set together with agent.base_url: one names a plug-in agent, the other the "
                "OpenAI-compatible agent; keep one of them",
            )
        defaults = {field.name: field.default for field in msgspec.structs.fields(self)}
        for name in _ENDPOINT_KEYS:
            if getattr(self, name) != defaults[name]:
                raise ConfigError(
                    f"agent.{name}",
                    "is a setting of the OpenAI-compatible agent, not of agent.factory's; give the plug-in its "
                    "settings under agent.options",
                )

    @property
    def uses_echo(self) -> bool:
        """Whether the built-in echo agent answers (no endpoint and no factory configured)."""
        return self.base_url is None and self.factory is None

    def read_system_prompt(self, home: Path | None = None) -> str | None:
        """The configured system prompt: ``system_prompt``, or the text of ``system_prompt_file`` (relative to
        ``home``, else to the working directory); ``None`` for none or an empty one. Raises :class:`ConfigError`
        naming the key when the file cannot be read."""
        if self.system_prompt_file is None:
            return self.system_prompt or None
        path = Path(self.system_prompt_file).expanduser()
        if home is not None and not path.is_absolute():
            path = home / path
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            problem = f"names {path}, which does not exist"
        except IsADirectoryError:
            problem = f"names {path}, which is a directory"
        except (OSError, UnicodeDecodeError) as exc:
            problem = f"names {path}, which cannot be read as UTF-8 text ({exc})"
        else:
            return text.strip() or None
        raise ConfigError(
            "agent.system_prompt_file",
            f"{problem}; create it, fix the path (relative paths start at the home directory) "
            "or put the text in agent.system_prompt instead",
        )
