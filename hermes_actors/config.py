"""Runtime settings. The YAML loader of the daemon fills these; tests construct them directly."""

from __future__ import annotations

import enum
from typing import Annotated

import msgspec
from msgspec import Meta

from hermes_actors.constraints import (
    AccountName,
    NonNegativeSeconds,
    PositiveSeconds,
    Rule,
    WebhookSecret,
    check_section,
)
from hermes_actors.errors import ConfigError
from hermes_actors.messages import BusyPolicy, InboundMessage
from hermes_actors.routing import KeyPolicy

__all__ = [
    "EVENTS_PLATFORM",
    "MIN_MESSAGE_CAP_CHARS",
    "SAVE_MEMORY_TRIGGERS",
    "BusyConfig",
    "BusyOverride",
    "EventKind",
    "EventWebhook",
    "EventsConfig",
    "HttpLimits",
    "InterruptedOutput",
    "PlatformBusyOverride",
    "RuntimeConfig",
    "SearchScope",
    "SessionsConfig",
]

MIN_MESSAGE_CAP_CHARS = 500
SAVE_MEMORY_TRIGGERS = ("idle", "daily", "new", "reset")  # the ends a save-memory turn may run before

_LiveActors = Annotated[
    int,
    Rule(
        Meta(ge=1, le=15000),
        "must be between 1 and 15000 (each live actor is an OS thread; a process dies near 22000)",
    ),
]
_AtLeastOne = Annotated[int, Rule(Meta(ge=1), "must be at least 1")]
_Triggers = Annotated[
    tuple[Annotated[str, Rule(Meta(pattern="^/"), "must be a command starting with '/'")], ...],
    Rule(Meta(min_length=1), "must be a non-empty list of commands starting with '/'"),
]
_Ratio = Annotated[float, Rule(Meta(gt=0, le=1), "must be in (0, 1]: a share of the agent's context window")]
_CompressAt = Annotated[int, Rule(Meta(ge=4), "must be at least 4 messages")]
_SummaryTokens = Annotated[
    int, Rule(Meta(ge=0), "must be 0 (a tenth of the context window) or a positive number of tokens")
]
_RetentionDays = Annotated[
    float,
    Rule(Meta(ge=1), "must be at least 1 day: answered inbox rows are what recognises a platform's redelivery"),
]
_NonNegative = Annotated[float, Rule(Meta(ge=0), "must not be negative")]


class HttpLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What every HTTP listener holds a client to (``daemon.http_header_timeout_s``, ``daemon.http_idle_timeout_s``,
    ``daemon.http_max_connections``; :mod:`platforms.support.http_listener`).

    ``header_timeout_s``: a new connection's first request line and headers must have arrived by then;
    ``idle_timeout_s``: a connection waiting for its next request is closed after it (its clock runs from the
    connection's start too, so the shorter of the two bounds the first request); ``max_connections``: open
    connections per listener, past which the longest idle one is closed to make room for a new one (or, when
    every one is answering a request, new ones wait in the listen queue). The daemon's settings check the values.
    """

    header_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0  # above the 60 s a reverse proxy (nginx) keeps its idle upstream connections
    max_connections: int = 512


class RuntimeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the actor runtime behaves (the ``runtime:`` section of ``config.yaml``)."""

    passivate_after_s: PositiveSeconds = 300.0
    max_live_actors: _LiveActors = 5000
    pending_soft_limit: int = 4  # queued messages from which a session's next turn merges them
    pending_hard_limit: int = 64  # queued messages beyond which new ones are refused with a reply
    max_concurrent_agent_calls: _AtLeastOne = 256
    agent_timeout_s: PositiveSeconds = 120.0
    lease_ttl_s: PositiveSeconds = 30.0
    lease_wait_s: NonNegativeSeconds = 10.0
    outbox_retry_base_s: float = 1.0
    outbox_retry_max_s: float = 300.0
    # Answered inbox rows are the durable dedupe record (platforms redeliver for up to 7 days: WhatsApp); they and
    # delivered outbox rows are deleted once older than this.
    queue_retention_days: _RetentionDays = 8.0
    ask_timeout_s: float = 30.0
    key_policy: KeyPolicy = KeyPolicy()
    reset_triggers: _Triggers = ("/new", "/reset")
    resume_any_user: bool = False  # /resume may pick sessions of other users (an admin setting)
    compress_at_messages: _CompressAt = 5000
    compress_at_ratio: _Ratio = 0.85  # of the agent's context window, in estimated prompt tokens
    context_window: int = 128_000  # used when the agent does not say (``agent.context_window``)
    protected_recent_messages: int = 4  # copied verbatim into a compression child
    summary_max_tokens: _SummaryTokens = 0  # a compression summary's budget; 0: a tenth of the context window
    # Which ends run a save-memory turn first: timer resets (idle, daily) and the /new and /reset commands.
    save_memory_on: tuple[str, ...] = SAVE_MEMORY_TRIGGERS
    auto_titles: bool = True  # title a session after its first exchange (``hermes_actors.lifecycle.auto_titles``)
    model_message_cap_chars: int = 16_000  # per message of history sent to the model; 0: no cap (agents.history)

    def saves_memories_on(self, trigger: str) -> bool:
        """Whether a save-memory turn runs before an end by ``trigger`` (idle, daily, new or reset)."""
        return trigger in self.save_memory_on

    def __post_init__(self) -> None:
        check_section(self, "runtime")
        if not 1 <= self.pending_soft_limit <= self.pending_hard_limit:
            raise ConfigError("runtime.pending_soft_limit", "must be at least 1 and at most runtime.pending_hard_limit")
        unknown = [t for t in self.save_memory_on if t not in SAVE_MEMORY_TRIGGERS]
        if unknown:
            raise ConfigError(
                "runtime.save_memory_on",
                f"unknown trigger {unknown[0]!r} (expected a list of: {', '.join(SAVE_MEMORY_TRIGGERS)}; [] for none)",
            )
        if self.model_message_cap_chars != 0 and self.model_message_cap_chars < MIN_MESSAGE_CAP_CHARS:
            raise ConfigError(
                "runtime.model_message_cap_chars",
                f"must be 0 (no cap) or at least {MIN_MESSAGE_CAP_CHARS} characters (a cut message keeps its "
                "head and tail around a marker of about 150 characters)",
            )


class SearchScope(enum.StrEnum):
    """How far the agent's ``session_search`` tool reaches (``sessions.search_scope``)."""

    USER = "user"  # the asking principal's own sessions
    CHAT = "chat"  # every session of the asking chat (a group's other members too), same tenant and bot account
    TENANT = "tenant"  # every session of the workspace/tenant and bot account
    ALL = "all"  # every session of every platform (a gateway with one user)


class SessionsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``sessions:`` section: automatic pruning of old ended sessions (off by default), and how far the
    agent's ``session_search`` reaches (``search_scope``, overridable per platform in ``search_scope_platforms``)."""

    auto_prune: bool = False
    retention_days: _NonNegative = 90
    vacuum_after_prune: bool = True
    min_interval_hours: _NonNegative = 24
    search_scope: SearchScope = SearchScope.USER
    search_scope_platforms: dict[str, SearchScope] = {}

    def search_scope_for(self, platform: str) -> SearchScope:
        """The search scope of sessions opened on ``platform``."""
        return self.search_scope_platforms.get(platform, self.search_scope)

    def __post_init__(self) -> None:
        check_section(self, "sessions")


class InterruptedOutput(enum.StrEnum):
    """What a turn stopped by a newer message (busy policy ``interrupt``) keeps of its agent's answer."""

    DISCARD = "discard"  # nothing: the transcript keeps the user's message without an answer
    PARTIAL = "partial"  # the text the agent streamed before the stop, stored marked as partial


class BusyOverride(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A chat type's busy policy; unset keeps the less specific level's."""

    mode: BusyPolicy | msgspec.UnsetType = msgspec.UNSET


class PlatformBusyOverride(BusyOverride, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A platform's busy policy, with further ones for chat types on that platform."""

    chat_types: dict[str, BusyOverride] = {}


_RetryAfter = Annotated[int, Rule(Meta(ge=1, le=3600), "must be 1..3600 seconds")]


class BusyConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``busy:`` section: what happens to a message that arrives while its session runs a turn (double
    texting), shaped like ``session_reset``'s overrides::

        busy:
          mode: queue                 # queue | collect | interrupt | reject | steer
          interrupted_output: discard # discard | partial
          retry_after_s: 5            # a rejected API request's Retry-After
          chat_types:                 # any chat type, on every platform
            group: {mode: collect}
          platforms:
            telegram:
              mode: collect
              chat_types:             # this chat type on this platform only
                group: {mode: queue}

    :meth:`policy_for` applies, most specific last: ``mode``, ``chat_types[chat_type]``, ``platforms[platform]``,
    ``platforms[platform].chat_types[chat_type]``; a message's own policy (an API request's ``X-Hermes-Busy``)
    comes before all of them (:meth:`policy_of`).
    """

    mode: BusyPolicy = BusyPolicy.QUEUE
    interrupted_output: InterruptedOutput = InterruptedOutput.DISCARD
    retry_after_s: _RetryAfter = 5
    chat_types: dict[str, BusyOverride] = {}
    platforms: dict[str, PlatformBusyOverride] = {}

    def __post_init__(self) -> None:
        check_section(self, "busy")

    def policy_for(self, platform: str, chat_type: str | None) -> BusyPolicy:
        """The policy of messages on ``platform`` in chats of ``chat_type`` (``None``: no chat type)."""
        on_platform = self.platforms.get(platform)
        layers = (
            None if chat_type is None else self.chat_types.get(chat_type),
            on_platform,
            None if chat_type is None or on_platform is None else on_platform.chat_types.get(chat_type),
        )
        policy = self.mode
        for layer in layers:
            if layer is not None and isinstance(layer.mode, BusyPolicy):
                policy = layer.mode
        return policy

    def policy_of(self, message: InboundMessage) -> BusyPolicy:
        """The policy of ``message``: its own (an API request's), else the configured one of its chat."""
        if isinstance(message.busy, BusyPolicy):
            return message.busy
        return self.policy_for(message.source.platform, message.source.chat_type or None)


EVENTS_PLATFORM = "events"
"""The outbox's platform of event deliveries: a row's account and chat are the webhook's name (one lane each)."""


class EventKind(enum.StrEnum):
    """What an event webhook can subscribe to (the ``type`` of its deliveries)."""

    TURN_COMPLETED = "turn.completed"  # a turn committed (its reply queued, or none: a stopped turn)
    RUN_COMPLETED = "run.completed"  # the turn of an API run (POST /v1/runs) committed
    SESSION_ENDED = "session.ended"  # a session ended (a reset, /new, an operator's end)
    JOB_FIRED = "job.fired"  # a scheduled job sent its prompt
    APPROVAL_REQUESTED = "approval.requested"  # a tool call waits for a person's decision
    MESSAGE_DEAD_LETTERED = "message.dead_lettered"  # a message could not be answered (see hermesctl messages)


_WebhookUrl = Annotated[
    str,
    Rule(
        Meta(pattern=r"^https?://[^/?#\s@]+(?:[/?#]\S*)?\Z"),
        "must be an http:// or https:// URL with a host, such as https://hooks.example.com/hermes",
    ),
]
_EventKinds = Annotated[
    tuple[EventKind, ...],
    Rule(Meta(min_length=1), f"must list at least one event of: {', '.join(EventKind)}"),
]
_GiveUpAfter = Annotated[float, Rule(Meta(ge=60), "must be at least 60 seconds")]


class EventWebhook(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``events.webhooks.<name>``: the ``url`` each delivery is POSTed to, the Standard Webhooks ``secret`` it is
    signed with (or ``secret_env``, the environment variable holding it), the ``events`` it wants, how long a
    delivery that keeps failing is retried before it is given up as a dead letter (``give_up_after_s``, from when
    it was queued or replayed) and how long one POST may take (``timeout_s``)."""

    url: _WebhookUrl
    events: _EventKinds
    secret: WebhookSecret | None = None
    secret_env: str | None = None
    give_up_after_s: _GiveUpAfter = 86400.0
    timeout_s: PositiveSeconds = 10.0


class EventsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``events:`` section: signed webhooks told what happens (:class:`EventKind`), through the durable outbox."""

    webhooks: dict[AccountName, EventWebhook] = {}

    def subscribers(self, kind: EventKind) -> list[str]:
        """The names of the webhooks that want ``kind``, sorted."""
        return sorted(name for name, hook in self.webhooks.items() if kind in hook.events)

    def __post_init__(self) -> None:
        check_section(self, "events")
        for name, hook in self.webhooks.items():
            if (hook.secret is None) == (hook.secret_env is None):
                raise ConfigError(
                    f"events.webhooks.{name}.secret",
                    "give the webhook's secret as secret, or name the environment variable holding it in "
                    "secret_env (one of them)",
                )
