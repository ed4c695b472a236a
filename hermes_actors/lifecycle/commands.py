"""Slash commands: recognised on every platform before the agent sees a message.

``parse_command`` turns a message text into a :class:`Command` or ``None`` (ordinary text, or an unknown slash
command, which goes to the agent as text). The reset triggers are configurable (default ``/new`` and ``/reset``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import msgspec

from hermes_actors.errors import TitleError
from hermes_actors.principal import Principal
from hermes_actors.routing import SessionSource
from hermes_actors.search import session_search
from hermes_actors.store import LineageRow, SessionFilter, SessionRecord, StoreInterface
from hermes_actors.titles import check_chosen_title, sanitize_title

__all__ = [
    "DEFAULT_RESET_TRIGGERS",
    "Command",
    "CommandName",
    "ResumeChoice",
    "choose_resume_target",
    "list_resumable",
    "list_sessions_text",
    "next_title_refusal",
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
    SAVE = "save"
    APPROVE = "approve"
    DENY = "deny"


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
    "/save": CommandName.SAVE,
    "/approve": CommandName.APPROVE,
    "/deny": CommandName.DENY,
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


def next_title_refusal(store: StoreInterface, source: SessionSource, title: str) -> str | None:
    """Why ``title`` cannot be kept for the sender's next session (``None``: it can), as a sentence without its
    full stop: it ends in a lineage's ``" #N"``, or another session holds it (named only when it is the sender's
    own). The title compared is the sanitised one, exactly: a lineage's newer segments (``"t #2"``) do not make
    ``"t"`` free.

    Raises :class:`~hermes_actors.errors.TitleError` for a title too long to be one.
    """
    clean = sanitize_title(title)
    try:
        check_chosen_title(clean)  # a session not started yet has no lineage title of its own
    except TitleError as exc:
        return f"The title {exc}, so it was not applied"
    holder_id = store.title_holder(clean) if clean is not None else None
    holder = store.find_session(holder_id) if holder_id is not None else None
    if holder is None:
        return None
    taken = f"is already in use by session {holder.id}" if owns(source, holder) else "is already taken"
    return f"The title '{clean}' {taken}, so it was not applied; choose another with /title <text>"


def list_resumable(store: StoreInterface, source: SessionSource, *, any_user: bool = False) -> list[SessionRecord]:
    """Return the titled conversations ``/resume`` offers the sender, each by the newest segment of its compression
    lineage, most recently active first (at most 20)."""
    page = store.list_lineages(limit=200, visible=reachable(source, any_user=any_user))
    return [row.tip for row in page.rows if row.tip.title][:20]


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
    store: StoreInterface, source: SessionSource, argument: str, listed: Sequence[str], *, any_user: bool = False
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
    return ResumeChoice(target=store.get_session(store.lineage_tip(target.id)))


def list_sessions_text(
    store: StoreInterface, source: SessionSource, query: str, *, any_user: bool = False, limit: int = 10
) -> str:
    """Answer ``/sessions [query]``: the sender's recent conversations, or those whose messages or titles match
    ``query`` (through ``session_search`` discovery, restricted to the sessions the sender may reach). Each
    conversation is one line, named by the newest segment of its compression lineage, with the lineage's totals."""
    visible = reachable(source, any_user=any_user)
    if query:
        result = session_search(store, query=query, limit=limit, visible=visible)
        if result.error is not None:
            return f"Search failed: {result.error}"
        rows = _lineages_of(store, [hit.session_id for hit in result.hits], visible)
    else:
        rows = store.list_lineages(limit=limit, visible=visible).rows
    if not rows:
        return "No sessions found."
    return "\n".join(_conversation_line(row) for row in rows)


def _lineages_of(store: StoreInterface, session_ids: Sequence[str], visible: SessionFilter) -> list[LineageRow]:
    """The conversations of ``session_ids`` (segments of any lineage), once each, in the order first met."""
    # A segment's own id stands in for a tip the sender may not see (its lineage, as they see it, ends there).
    pairs = [(store.lineage_tip(sid), sid) for sid in session_ids]
    found = store.list_lineages(limit=None, visible=visible, tips=[i for pair in pairs for i in pair]).rows
    rows = {row.tip.id: row for row in found}
    chosen = [rows.get(tip) or rows.get(sid) for tip, sid in pairs]
    return list({row.tip.id: row for row in chosen if row is not None}.values())


def _conversation_line(row: LineageRow) -> str:
    messages = f"{row.message_count} message" + ("" if row.message_count == 1 else "s")
    compressions = (
        f", {row.compressions} compression" + ("" if row.compressions == 1 else "s") if row.compressions else ""
    )
    return f"{row.tip.title or '(untitled)'} ({row.tip.id}, {messages}{compressions})"
