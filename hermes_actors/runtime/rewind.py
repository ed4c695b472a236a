"""What a stateless client's turn changes in the stored transcript besides adding itself: :func:`rewind_of`.

A chat frontend (Open WebUI, LibreChat) sends the whole conversation with each request
(:attr:`~hermes_actors.messages.Conversation.whole`). When its user regenerates an answer or edits a message, the
conversation it sends no longer goes the way the stored one does. The turn then replaces the tail: the stored
messages from the first one the client no longer sends are cut, and the client's messages from that point are
stored in their place, in the turn's own commit, before the turn's messages. The session stays the same; its
transcript (and the console, which reads it) holds the conversation as the user sees it. Messages the client sends
beyond the stored ones (turns answered elsewhere, a partial answer of a stopped turn) are stored the same way.

Messages are compared as the client sees them: user messages and assistant answers with text. What the client never
sees (the gateway's own tool calls and their results, a user message that was only attachments, a compression's
summary) goes with the shown message before it. A stored user message matches the client's text without its
attachment stand-ins, and a stored answer the client's text with a note about unread attachments before it. A
compression child's transcript (its summary first) is compared from where its carried messages sit in the client's
conversation; when they are not found there (an edit reaching back before the compression), nothing is replaced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from hermes_actors.agents.history import is_summary
from hermes_actors.messages import ContextMessage, Conversation
from hermes_actors.store import MessageRecord, NewMessage, Role

__all__ = ["Rewind", "rewind_of"]

_ROLES = {"user": Role.USER, "assistant": Role.ASSISTANT, "tool": Role.TOOL}
_STAND_IN = re.compile(r"\[(?:attached .*|.* was not read: .*)\]")  # media.stand_in's first line


class Rewind(msgspec.Struct, frozen=True, kw_only=True):
    """The change a turn makes before storing itself: cut the stored messages from ``cut_id`` on (``None``: cut
    nothing), at ``cut_at`` in the cached transcript, and store ``restored`` (the client's) in their place."""

    cut_id: int | None
    cut_at: int
    restored: tuple[NewMessage, ...]


def _shown_stored(message: MessageRecord) -> bool:
    content = message.content or ""
    if message.role == Role.USER:
        return bool(content.strip()) and not _STAND_IN.fullmatch(content.split("\n", 1)[0])
    return message.role == Role.ASSISTANT and not message.tool_calls and bool(content.strip())


def _shown_sent(message: ContextMessage) -> bool:
    if message.role == "user":
        return bool(message.content.strip())
    return message.role == "assistant" and not message.tool_calls and bool(message.content.strip())


def _same(stored: MessageRecord, sent: ContextMessage) -> bool:
    if stored.role != sent.role:
        return False
    kept, given = (stored.content or "").strip(), sent.content.strip()
    if kept == given:
        return True
    if stored.role == Role.USER:  # the stored text with its attachments' stand-ins after it
        return kept.startswith(given + "\n") and bool(_STAND_IN.fullmatch(kept[len(given) + 1 :].split("\n", 1)[0]))
    return given.endswith("\n\n" + kept)  # the reply as sent, with a note about unread attachments before it


def _matched(stored: Sequence[MessageRecord], sent: Sequence[ContextMessage]) -> int:
    count = 0
    for kept, given in zip(stored, sent, strict=False):
        if not _same(kept, given):
            break
        count += 1
    return count


def _start(stored: Sequence[MessageRecord], sent: Sequence[ContextMessage]) -> tuple[int, int] | None:
    """Where a compression child's shown messages begin in the client's (the best match, the latest of equals),
    and how many match from there; ``None`` when none does."""
    best: tuple[int, int] | None = None
    for start in range(len(sent)):
        matched = _matched(stored, sent[start:])
        if matched and (best is None or matched >= best[1]):
            best = (start, matched)
    return best


def _restored(messages: Sequence[ContextMessage]) -> tuple[NewMessage, ...]:
    return tuple(
        NewMessage(
            role=_ROLES.get(m.role, Role.USER),
            content=m.content,
            tool_calls=m.tool_calls,
            tool_call_id=m.tool_call_id if m.role == "tool" else None,
        )
        for m in messages
    )


def rewind_of(history: Sequence[MessageRecord], conversation: Conversation | None) -> Rewind | None:
    """What a turn bringing ``conversation`` changes in the stored ``history`` (see the module's docstring);
    ``None`` when nothing (no whole conversation, or one that goes on from the stored one)."""
    if conversation is None or not conversation.whole:
        return None
    stored_at = [i for i, m in enumerate(history) if _shown_stored(m)]
    sent_at = [i for i, m in enumerate(conversation.history) if _shown_sent(m)]
    stored = [history[i] for i in stored_at]
    sent = [conversation.history[i] for i in sent_at]
    start, matched = 0, _matched(stored, sent)
    if history and is_summary(history[0]) and stored:
        found = _start(stored, sent)
        if found is None:
            return None
        start, matched = found
    cut_at = stored_at[matched] if matched < len(stored_at) else len(history)
    resent = start + matched
    restored = _restored(conversation.history[sent_at[resent] :]) if resent < len(sent_at) else ()
    if cut_at == len(history) and not restored:
        return None
    cut_id = history[cut_at].id if cut_at < len(history) else None
    return Rewind(cut_id=cut_id, cut_at=cut_at, restored=restored)
