"""Which session a request continues: the ``X-Hermes-Session-Id`` header, and the check that a named session is one
this API created with the same key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hermes_actors.ids import is_session_id
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import build_session_key
from platforms.api_server.wire import PLATFORM, ApiError

if TYPE_CHECKING:
    from hermes_actors.ports import ApiInbox

__all__ = [
    "COMPLETED_HEADER",
    "CONVERSATION_HEADER",
    "MEMORY_HEADER",
    "SESSION_HEADER",
    "TOOL_PROGRESS_HEADER",
    "continue_session",
    "key_fingerprint",
    "memory_scope",
    "session_named",
    "wants_tool_progress",
]

SESSION_HEADER = "X-Hermes-Session-Id"
_MAX_SESSION_NAME = 256
_SESSION_NAME = re.compile(rf"[\x20-\x7e]{{1,{_MAX_SESSION_NAME}}}")


def session_named(headers: Mapping[str, str]) -> str | None:
    """The session or conversation ``X-Hermes-Session-Id`` names, ``None`` when it is absent or blank.

    A name is 1 to 256 printable ASCII characters without ``/``, ``\\`` or ``..``: it becomes a chat id, turns up
    in logs and paths, and is matched against stored session ids, so anything else is a 400 naming the header.
    """
    return _name_in(headers, SESSION_HEADER, "send the session id a response of this API returned in its header")


def _name_in(headers: Mapping[str, str], header: str, fix: str) -> str | None:
    """The name ``header`` carries (see :func:`session_named` for the rules), ``None`` when absent or blank."""
    value = headers.get(header, "").strip()
    if not value:
        return None
    if not _SESSION_NAME.fullmatch(value) or "/" in value or "\\" in value or ".." in value:
        raise ApiError(
            400,
            f"{header} must be 1 to {_MAX_SESSION_NAME} printable ASCII characters without '/', '\\' or '..'; " + fix,
            code="invalid_header",
            param=header,
        )
    return value


def key_fingerprint(key: str) -> str:
    """The scope of sessions made with bearer ``key``: ``k`` and 16 hex digits of its SHA-256 (never the key)."""
    return "k" + hashlib.sha256(key.encode()).hexdigest()[:16]


def continue_session(inbox: ApiInbox, inbound: InboundMessage, continues: str) -> None:
    """Point the request's routing key at the session ``continues`` names (blocking): a client continues a session
    by naming it in the header.

    Only sessions this API created, with the same key when a key is set (the source's scope is the key's
    fingerprint), are continued; another platform's or another key's session gets the 404 an unknown id gets. A
    header that is not shaped like a session id names a conversation of the client's own choosing.
    """
    routing_key = build_session_key(inbound.source, inbox.key_policy)
    owner = inbox.session_owner(continues, routing_key)
    ours = owner is not None and owner.platform == PLATFORM and owner.scope_id == inbound.source.scope_id
    if owner is None or not ours:
        if owner is None and not is_session_id(continues):
            return
        raise ApiError(
            404,
            f"no session {continues[:100]!r}; start a conversation without {SESSION_HEADER}, or send the id a "
            "response of this API returned in its header",
            code="session_not_found",
            param=SESSION_HEADER,
        )
    assert owner is not None
    if owner.live and owner.route is None:
        inbox.rebind(routing_key, owner.session_id)


CONVERSATION_HEADER = "X-Hermes-Conversation"  # the fingerprint name of a stateless conversation
MEMORY_HEADER = "X-Hermes-Session-Key"  # a long-term memory scope, independent of the session
COMPLETED_HEADER = "X-Hermes-Completed"  # "false" when the agent did not finish its answer


def memory_scope(headers: Mapping[str, str]) -> str | None:
    """The memory scope ``X-Hermes-Session-Key`` names (the user whose memories the turn sees and keeps), ``None``
    when absent; the same shape rules as the session header, else a 400 naming the header."""
    return _name_in(headers, MEMORY_HEADER, "name the memory scope with a short plain name")


TOOL_PROGRESS_HEADER = "X-Hermes-Tool-Progress"
"""``1`` (or ``true``) asks a streamed chat completion for ``event: hermes.tool.progress`` frames of the gateway's own
tool runs: frames without ``choices``, so only a client that reads them should ask."""


def wants_tool_progress(headers: Mapping[str, str]) -> bool:
    """Whether the request asks for tool progress frames (:data:`TOOL_PROGRESS_HEADER`)."""
    return headers.get(TOOL_PROGRESS_HEADER, "").strip().lower() in ("1", "true", "yes")
