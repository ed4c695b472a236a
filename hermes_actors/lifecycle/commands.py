"""Slash commands: recognised on every platform before the agent sees a message.

``parse_command`` turns a message text into a :class:`Command` or ``None`` (ordinary text, or an unknown slash
command, which goes to the agent as text). The reset triggers are configurable (default ``/new`` and ``/reset``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

from hermes_actors.principal import Principal
from hermes_actors.routing import SessionSource
from hermes_actors.search import session_search
from hermes_actors.store import SessionFilter, SessionRecord, Store
from hermes_actors.store.lineage import lineage_tip

__all__ = [
    "DEFAULT_RESET_TRIGGERS",
    "Command",
    "CommandName",
    "ResumeChoice",
    "choose_resume_target",
    "list_resumable",
    "list_sessions_text",
    "owns",
    "parse_command",
    "reachable",
    "resume_listing_text",
    "title_holder_text",
]

DEFAULT_RESET_TRIGGERS = ("/new", "/reset")


class CommandName(enum.StrEnum):
    """The commands the runtime handles itself."""

    NEW = "new"
    RESET = "reset"
    RESUME = "resume"
    TITLE = "title"
    COMPRESS = "compress"
    SESSIONS = "sessions"
    STOP = "stop"
    SETHOME = "sethome"
    HANDOFF = "handoff"


class Command(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed slash command; ``argument`` is the rest of the line, stripped ('' when absent)."""

    name: CommandName
    argument: str = ""


_FIXED = {
    "/resume": CommandName.RESUME,
    "/title": CommandName.TITLE,
    "/compress": CommandName.COMPRESS,
    "/sessions": CommandName.SESSIONS,
    "/stop": CommandName.STOP,
    "/sethome": CommandName.SETHOME,
    "/handoff": CommandName.HANDOFF,
}


def parse_command(text: str, *, reset_triggers: Sequence[str] = DEFAULT_RESET_TRIGGERS) -> Command | None:
    """Return the command ``text`` starts with, or ``None``.

    A trigger matches case-insensitively as the first word; Telegram's ``/cmd@botname`` form is accepted. Of the
    reset triggers, ``/new`` is ``new`` (end reason ``new_session``), any other is ``reset`` (``session_reset``).
    """
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    word, _, rest = stripped.partition(" ")
    if "\n" in word:
        word, _, more = word.partition("\n")
        rest = more + (" " + rest if rest else "")
    word = word.split("@", 1)[0].lower()
    argument = rest.strip()
    triggers = [t.lower() for t in reset_triggers]
    if word in triggers:
        name = CommandName.NEW if word == "/new" else CommandName.RESET
        return Command(name=name, argument=argument)
    fixed = _FIXED.get(word)
    return None if fixed is None else Command(name=fixed, argument=argument)


def owns(source: SessionSource, record: SessionRecord) -> bool:
    """Return whether ``record`` belongs to the sender of ``source`` (the whole principal: platform, scope,
    account and participant)."""
    return Principal.of(source).owns(record)


def reachable(source: SessionSource, *, any_user: bool = False) -> SessionFilter:
    """The sessions the sender of ``source`` may name in a command: their own, or with ``any_user`` (an admin
    setting) every user's of the same platform, workspace and bot account, never another tenant's."""
    principal = Principal.of(source)
    return principal.tenant() if any_user else principal.sessions()


def title_holder_text(source: SessionSource | None, title: str, holder: SessionRecord) -> str:
    """Why ``title`` cannot be used: it names the holding session only when that is the sender's own."""
    if source is not None and owns(source, holder):
        return f"Title '{title}' is already in use by session {holder.id}"
    return f"Title '{title}' is already taken; choose another"


def list_resumable(store: Store, source: SessionSource, *, any_user: bool = False) -> list[SessionRecord]:
    """Return the titled sessions ``/resume`` offers the sender, most recently active first (at most 20)."""
    sessions = store.list_sessions(limit=200, visible=reachable(source, any_user=any_user))
    return [s for s in sessions if s.title][:20]


def resume_listing_text(sessions: Sequence[SessionRecord]) -> str:
    """Return the numbered list a bare ``/resume`` answers with."""
    if not sessions:
        return "You have no titled sessions here yet; name one with /title <text>."
    lines = [f"{n}. {s.title} ({s.id})" for n, s in enumerate(sessions, 1)]
    return "Your sessions:\n" + "\n".join(lines) + "\nResume one with /resume <number, id or title>."


class ResumeChoice(msgspec.Struct, frozen=True, kw_only=True):
    """The session ``/resume <argument>`` leads to (the newest of its lineage), or why there is none."""

    target: SessionRecord | None = None
    refusal: str | None = None


def choose_resume_target(
    store: Store, source: SessionSource, argument: str, listed: Sequence[str], *, any_user: bool = False
) -> ResumeChoice:
    """Resolve ``argument`` (a number from the last listing, an id, a unique prefix or a title) among the
    sessions the sender may reach; another principal's session is not found, exactly like a missing one.

    Raises the store's lookup errors (not found, ambiguous prefix) for the caller to report.
    """
    visible = reachable(source, any_user=any_user)
    if argument.isdigit() and 1 <= int(argument) <= len(listed):
        target = store.resolve_session(listed[int(argument) - 1], visible=visible)
    else:
        target = store.resolve_session(argument, visible=visible)
    return ResumeChoice(target=store.get_session(lineage_tip(store, target.id)))


def list_sessions_text(
    store: Store, source: SessionSource, query: str, *, any_user: bool = False, limit: int = 10
) -> str:
    """Answer ``/sessions [query]``: the sender's recent sessions, or those whose messages or titles match
    ``query`` (through ``session_search`` discovery, restricted to the sessions the sender may reach)."""
    visible = reachable(source, any_user=any_user)
    if query:
        result = session_search(store, query=query, limit=limit, visible=visible)
        if result.error is not None:
            return f"Search failed: {result.error}"
        found = [store.find_session(hit.session_id) for hit in result.hits]
        mine = [s for s in found if s is not None]
    else:
        mine = store.list_sessions(limit=limit, visible=visible)
    if not mine:
        return "No sessions found."
    return "\n".join(f"{s.title or '(untitled)'} ({s.id}, {s.message_count} messages)" for s in mine)
