"""Messages that cross the runtime's boundaries: the edge, actors, the disk and the outbox.

All are frozen, keyword-only msgspec Structs, encoded with msgpack into the inbox and outbox rows. The closed sets
of values they carry are ``StrEnum``s (:class:`AttachmentKind`, :class:`OutboundError`): a member encodes as its
value, so rows written when these fields were bare strings decode unchanged, and decoding refuses anything else.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from hermes_actors.routing import SessionSource

__all__ = [
    "ApprovalCall",
    "ApprovalRequest",
    "Attachment",
    "AttachmentKind",
    "BusyPolicy",
    "ClientTool",
    "ContextMessage",
    "Conversation",
    "InboundMessage",
    "OutboundDocument",
    "OutboundError",
    "OutboundMessage",
    "ResponseRecord",
    "TokenUsage",
    "ToolResult",
    "ToolServerHealth",
    "ToolServerState",
    "decode_inbound",
    "decode_outbound",
    "encode",
]


class AttachmentKind(enum.StrEnum):
    """What an attachment is; a MIME type that names none of the others is a document."""

    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    DOCUMENT = "document"


class OutboundError(enum.StrEnum):
    """Why an outbound notice is not the agent's reply (request/response entry points answer it as an error)."""

    STORAGE_UNAVAILABLE = "storage_unavailable"  # the message could not be saved yet; it is kept and retried
    AGENT_FAILED = "agent_failed"  # the agent gave no reply (failed, timed out); the text says so to a chat user
    SESSION_ENDED = "session_ended"  # the session ended (elsewhere) before the message ran; it was not run
    SESSION_BUSY = "session_busy"  # the session was answering another message (busy policy reject); not run


class BusyPolicy(enum.StrEnum):
    """What happens to a message that arrives while its session is busy with a turn (``busy:`` in config.yaml, or
    an API request's ``X-Hermes-Busy``)."""

    QUEUE = "queue"  # its own turn after the running one, in order
    COLLECT = "collect"  # the messages that arrive during a turn become one next turn
    INTERRUPT = "interrupt"  # the running turn is stopped; a new turn answers everything since
    REJECT = "reject"  # answered at once that the session is busy; not run
    STEER = "steer"  # into the running turn at its agent's next model call, when the agent takes it; else collect


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """A file that came with a message, as a record: the bytes are in the media store, never in a message.

    ``path`` is the local cache file (absolute, under ``$HERMES_HOME/media``) once the bytes were saved;
    ``source_url`` is where the platform offered it (an image URL may be all there is). ``error`` says why it was
    not read (too large, a kind not allowed, a failed download); such an attachment has no ``path``.
    ``description`` is a text stand-in made when it was saved (a plain-text document's first kilobytes, or what a
    configured describe step said). Build them with :class:`hermes_actors.media.MediaStore`.
    """

    kind: AttachmentKind
    mime_type: str | None = None
    name: str | None = None
    size: int | None = None  # bytes, when known
    path: str | None = None
    sha256: str | None = None
    source_url: str | None = None
    error: str | None = None
    description: str | None = None


class ContextMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of a conversation a client sent whole (``role`` is ``user``, ``assistant`` or ``tool``): an
    assistant message may carry ``tool_calls`` (a JSON array, OpenAI's shape) and a tool message answers the call
    ``tool_call_id``."""

    role: str
    content: str
    tool_calls: str | None = None
    tool_call_id: str | None = None


class ClientTool(msgspec.Struct, frozen=True, kw_only=True):
    """A function tool an API client offers with its request (OpenAI's ``tools``): the model may call it, and a call
    ends the turn with the call for the client to run. ``parameters`` is its JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """The result a client sends for a call of one of its tools (``call_id``) that ended the previous turn."""

    call_id: str
    output: str


class Conversation(msgspec.Struct, frozen=True, kw_only=True):
    """The conversation a stateless client sends with each request (the OpenAI chat-completions body): the model
    sees this history and this extra system text instead of the stored transcript's, for that turn only.

    ``after_transcript`` keeps the stored transcript (a Responses chain continues its session): the model sees the
    transcript, then ``history``, with ``system`` added to the session's system text. ``whole`` says ``history`` is
    the whole conversation as the client holds it now (a chat-completions body): the turn stores the conversation
    that way, the stored messages the client no longer sends (a regenerated answer, an edited message) replaced by
    the client's.
    """

    system: str | None = None
    history: tuple[ContextMessage, ...] = ()
    after_transcript: bool = False
    whole: bool = False


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True):
    """The model's tokens for one turn, summed over its calls; ``estimated`` when some call reported none."""

    input_tokens: int
    output_tokens: int
    estimated: bool = False


class InboundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message from a platform, normalised by its adapter.

    ``message_id`` is the platform's id, used with the platform and account for durable dedupe. ``context`` is a
    stateless client's conversation (:class:`Conversation`), kept in the inbox row so a replayed turn sees it too;
    ``fingerprint`` is a hash of the request that made the message (an idempotent retry with another body is told
    apart by it). ``agent`` names the configured agent the message asks for (the API's ``model``): a session it
    starts is answered by that agent instead of the one the bindings choose; a session that exists keeps its own.
    ``client_tools`` are an API client's own tools, offered to the model for this turn beside the session's;
    ``tool_results`` make the message the results of the client tool calls the previous turn ended with (its
    ``text`` is then empty): they are stored as tool messages and the model continues from them. ``busy`` is the
    sender's own :class:`BusyPolicy` for this message (an API request's), over the configured one. ``streams`` is
    ``False`` when the sender reads only the turn's outcome (a chat completion without ``stream``): a cluster's shard
    host then relays nothing of the turn as it runs, only its stop (the reply carries what a failed agent wrote).
    They are left out of the encoding when unset, so rows stay as they were.
    """

    source: SessionSource
    text: str
    message_id: str
    attachments: tuple[Attachment, ...] = ()
    received_at: float | None = None
    context: Conversation | msgspec.UnsetType = msgspec.UNSET
    fingerprint: str | msgspec.UnsetType = msgspec.UNSET
    agent: str | msgspec.UnsetType = msgspec.UNSET
    client_tools: tuple[ClientTool, ...] | msgspec.UnsetType = msgspec.UNSET
    tool_results: tuple[ToolResult, ...] | msgspec.UnsetType = msgspec.UNSET
    busy: BusyPolicy | msgspec.UnsetType = msgspec.UNSET
    streams: bool | msgspec.UnsetType = msgspec.UNSET


class OutboundDocument(msgspec.Struct, frozen=True, kw_only=True):
    """A file a reply carries (``/save``'s conversation): a sender that can send files sends it, with ``caption``,
    instead of the reply's ``text``; any other sender sends the ``text``, which then stands in for the file."""

    name: str
    mime_type: str
    data: bytes
    caption: str = ""


class ApprovalCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call waiting for a person's approval: the tool's name and its arguments (JSON text)."""

    call_id: str
    name: str
    arguments: str


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The question a reply asks (:attr:`OutboundMessage.approval`): may these calls run? ``id`` is what
    ``/approve ID`` and ``/deny ID`` name (a platform's buttons send them); no answer by ``expires_at`` is a no."""

    id: int
    calls: tuple[ApprovalCall, ...]
    expires_at: float


class OutboundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A reply for a platform to deliver.

    ``possible_duplicate`` is set when an earlier attempt may have reached the platform before a crash.
    ``no_retry`` replies (a handoff's first message) are given up after one failed attempt and reported.
    ``answers`` lists the platform message ids of every inbound message the reply answers (a turn may merge
    several), so request/response platforms (the HTTP API, the terminal) can complete each waiting request.
    ``outbox_id`` is set by the outbox when it hands the reply to a sender: the same on every attempt, different
    for every reply, so a platform's idempotency key can include it. ``error`` marks a notice that the message
    could not be handled (:class:`OutboundError`); request/response entry points answer it as an error, not as the
    agent's reply. ``usage`` is the model's tokens for the turn the reply ends; ``tool_calls`` (a JSON array,
    OpenAI's shape) are the calls of the client's own tools the turn ended with, for the client to run (both left
    out of the encoding when unset). ``document`` is a file the reply carries (:class:`OutboundDocument`; also
    left out when unset). ``retry_after_s`` is when a refused message may be sent again (a busy session's notice;
    left out when unset). ``approval`` is the question of a turn paused on tool calls (:class:`ApprovalRequest`;
    its ``text`` asks it in words): a platform with buttons adds approve and deny buttons (left out when unset).
    ``partial`` is the text a watched turn's agent had streamed before it failed (an ``AGENT_FAILED`` notice; left
    out when unset), so a request that did not read the turn as it ran can still answer with it.
    """

    platform: str
    text: str
    account_id: str = ""
    chat_id: str | None = None
    thread_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    reply_to: str | None = None
    possible_duplicate: bool = False
    no_retry: bool = False
    answers: tuple[str, ...] = ()
    outbox_id: int | None = None
    error: OutboundError | None = None
    usage: TokenUsage | msgspec.UnsetType = msgspec.UNSET
    tool_calls: str | msgspec.UnsetType = msgspec.UNSET
    document: OutboundDocument | msgspec.UnsetType = msgspec.UNSET
    retry_after_s: int | msgspec.UnsetType = msgspec.UNSET
    approval: ApprovalRequest | msgspec.UnsetType = msgspec.UNSET
    partial: str | msgspec.UnsetType = msgspec.UNSET


class ResponseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A response of the API's ``/v1/responses`` as the store keeps it, tied to the session its turn ran in.

    ``body`` is the response object (JSON) the client got; ``scope`` is the API key's fingerprint (``None``
    without a key); ``conversation`` the client's name for the conversation it follows; ``instructions`` those in
    force, which a chained request inherits.
    """

    id: str
    session_id: str
    scope: str | None
    status: str  # completed, failed, incomplete
    body: bytes
    created_at: float
    conversation: str | None = None
    previous_id: str | None = None
    instructions: str | None = None


_encoder = msgspec.msgpack.Encoder()
_inbound = msgspec.msgpack.Decoder(InboundMessage)
_outbound = msgspec.msgpack.Decoder(OutboundMessage)


class ToolServerState(enum.StrEnum):
    """Where one of the agent's tool servers (an MCP server) stands."""

    IDLE = "idle"  # configured, not started yet: servers start with the first session that needs their tools
    STARTING = "starting"  # connecting, or restarting after it died
    UP = "up"  # connected, its tools listed
    DOWN = "down"  # it failed or died; tried again after a pause, and its calls get an error result meanwhile
    STOPPED = "stopped"  # closed: the process is stopping


class ToolServerHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One of an agent's MCP servers as ``/health/detailed`` and ``hermesctl status`` show it: its transport
    (``stdio`` or ``http``), state, the tools it offers (after ``allow`` and ``deny``), how often it was started
    again, its calls and failed calls since this process started, and the last error."""

    name: str
    transport: str
    state: ToolServerState
    agent: str | None = None  # the named agent whose section lists it (several agents: agents.<name>.mcp_servers)
    tools: int = 0
    restarts: int = 0
    calls: int = 0
    failures: int = 0
    last_error: str | None = None


def encode(message: InboundMessage | OutboundMessage) -> bytes:
    """Encode a message for an inbox or outbox row."""
    return _encoder.encode(message)


def decode_inbound(payload: bytes) -> InboundMessage:
    """Decode an inbox row's payload."""
    return _inbound.decode(payload)


def decode_outbound(payload: bytes) -> OutboundMessage:
    """Decode an outbox row's payload."""
    return _outbound.decode(payload)
