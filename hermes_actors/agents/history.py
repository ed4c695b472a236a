"""Context hygiene: what of a transcript is sent to the model.

Pasted logs, long diffs and big tool outputs are what make a context grow, far more than media. The store keeps
every message whole (search finds all of it, exports carry all of it, and the session's cached transcript stays
whole); only the history a turn sends to the model has each message's content cut to
``runtime.model_message_cap_chars``. The current turn's user text is never cut: the user just sent it.

A cut keeps the head and the tail of the text and puts a marker between them that says how much is missing and
how to read it all (``session_search`` with the session id and ``around_message_id`` returns the message whole).
The head says what the text is (the command, the file, the question); the tail is where logs and tool outputs
put their outcome (the error, the stack trace, the exit status), so keeping both loses the least.

:class:`ModelHistory` keeps the capped view of a growing transcript up to date incrementally, so a turn costs
work for its new messages only. A cap of 0 sends every message whole.

Compression sizes: a summary gets a token budget (:func:`summary_budget`, cut to it by :func:`fit_summary`), and
:func:`carried_tokens` estimates the history a compression child would start with, so a compression that would not
make the prompt smaller is refused. Tokens are estimated at four characters each everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.store.content import HERMES_JSON_PREFIX, split_content
from hermes_actors.store.records import MessageRecord, Role

__all__ = [
    "CHARS_PER_TOKEN",
    "CUT_MARKER",
    "HEAD_SHARE",
    "SUMMARY_CUT",
    "SUMMARY_HEADER",
    "SUMMARY_SHARE",
    "ModelHistory",
    "cap_message",
    "cap_text",
    "carried_tokens",
    "fit_summary",
    "is_capped",
    "is_summary",
    "summary_budget",
    "summary_message",
]

CUT_MARKER = (
    "…[cut: {missing:,} more characters are in the store; session_search with session_id {session_id} and "
    "around_message_id {message_id} returns the whole message]…"
)
HEAD_SHARE = 2 / 3  # of the kept characters, the rest is the tail
SUMMARY_HEADER = "[Summary of the conversation so far]"  # first line of the system message a compression writes
SUMMARY_SHARE = 10  # without runtime.summary_max_tokens, a summary gets 1/10 of the context window
SUMMARY_CUT = " …[summary cut to its budget]"
CHARS_PER_TOKEN = 4


def summary_budget(configured: int, window: int) -> int:
    """The token budget of a compression summary: ``configured`` (``runtime.summary_max_tokens``), or with 0 a
    tenth of the context window ``window`` (at least 16 tokens)."""
    return configured if configured > 0 else max(16, window // SUMMARY_SHARE)


def fit_summary(summary: str, budget: int) -> str:
    """Return ``summary`` whole when it fits in ``budget`` tokens, else its head cut at a word with a marker."""
    limit = budget * CHARS_PER_TOKEN
    if len(summary) <= limit:
        return summary
    head = summary[: max(0, limit - len(SUMMARY_CUT))]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip() + SUMMARY_CUT


def summary_message(summary: str) -> str:
    """The content of the system message a compression child starts with."""
    return f"{SUMMARY_HEADER}\n{summary}"


def carried_tokens(summary: str, recent: Sequence[MessageRecord], cap: int) -> int:
    """Estimate the prompt tokens of a compression child's history: the summary message, then ``recent`` (the
    protected messages it copies) capped as the model sees them."""
    chars = len(summary_message(summary))
    for message in recent:
        sent = cap_message(message, cap)
        chars += len(sent.content or "") + len(sent.tool_calls or "")
    return chars // CHARS_PER_TOKEN


def cap_text(text: str, cap: int, *, session_id: str, message_id: int) -> str:
    """Return ``text`` whole when it fits in ``cap`` characters (or ``cap`` is 0), else its head and tail around
    a cut marker, at most ``cap`` characters in all (a cap shorter than the marker keeps just the marker)."""
    if cap <= 0 or len(text) <= cap:
        return text
    # The marker's number depends on how much is kept, and the kept part on the marker's length. Sizing the
    # marker for the whole text first gives an upper bound (fewer missing characters never take more digits).
    marker = _marker(len(text), session_id, message_id)
    keep = max(0, cap - len(marker) - 2)
    marker = _marker(len(text) - keep, session_id, message_id)
    head = round(keep * HEAD_SHARE)
    tail = keep - head
    return f"{text[:head]}\n{marker}\n{text[len(text) - tail :] if tail else ''}"


def _marker(missing: int, session_id: str, message_id: int) -> str:
    return CUT_MARKER.format(missing=missing, session_id=session_id, message_id=message_id)


def is_capped(message: MessageRecord, cap: int) -> bool:
    """Whether ``message`` is cut when sent to the model under ``cap`` (0: never)."""
    return cap > 0 and len(message.content or "") > cap


def is_summary(message: MessageRecord) -> bool:
    """Whether ``message`` is the summary a compression put at the start of a continuation session."""
    return message.role == Role.SYSTEM and (message.content or "").startswith(SUMMARY_HEADER)


def cap_message(message: MessageRecord, cap: int) -> MessageRecord:
    """Return ``message`` as the model sees it: its content cut to ``cap`` (the same object when it fits).

    A message imported from the reference system with multimodal content stores its text rendering followed by
    the original ``"\x00json:"`` value (base64 images included): the model gets the text only.
    """
    if message.content is not None and HERMES_JSON_PREFIX in message.content:
        message = msgspec.structs.replace(message, content=split_content(message.content)[0])
    if not is_capped(message, cap) or message.content is None:
        return message
    content = cap_text(message.content, cap, session_id=message.session_id, message_id=message.id)
    return msgspec.structs.replace(message, content=content)


class ModelHistory:
    """The history a turn sends to the model: a transcript with each message capped, kept up to date as the
    transcript grows, with its estimated tokens.

    Give :meth:`of` and :meth:`tokens` the session's cached transcript; messages appended since the last call are
    capped and counted, so a turn costs O(new messages). A transcript that shrank or is another list is taken
    again from the start; one whose messages were replaced in place is not noticed (sessions only append). Not
    thread-safe: it belongs to the session's thread, like the transcript.
    """

    __slots__ = ("_cap", "_capped", "_chars", "_seen", "_source")

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._capped: list[MessageRecord] = []  # unused without a cap: the transcript is sent as it is
        self._chars = 0
        self._seen = 0
        self._source: Sequence[MessageRecord] | None = None

    @property
    def cap(self) -> int:
        """The per-message cap in characters (0: none)."""
        return self._cap

    def of(self, transcript: Sequence[MessageRecord]) -> Sequence[MessageRecord]:
        """Return ``transcript`` as the model sees it: every message capped, imported structured values left out."""
        self._catch_up(transcript)
        return self._capped

    def tokens(self, transcript: Sequence[MessageRecord]) -> int:
        """Estimate the prompt tokens of the capped ``transcript`` (four characters a token)."""
        self._catch_up(transcript)
        return self._chars // CHARS_PER_TOKEN

    def _catch_up(self, transcript: Sequence[MessageRecord]) -> None:
        if transcript is not self._source or len(transcript) < self._seen:
            self._source, self._capped, self._chars, self._seen = transcript, [], 0, 0
        for message in transcript[self._seen :]:
            sent = cap_message(message, self._cap)
            self._capped.append(sent)
            self._chars += len(sent.content or "") + len(sent.tool_calls or "")
        self._seen = len(transcript)
