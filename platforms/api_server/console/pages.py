"""The console's reading pages: Conversations, Search, Transcript and Live (with ``live.json``, which the Live
page polls every two seconds). Everything is read through the operator port."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlencode

import msgspec
from aiohttp import web

from hermes_actors.operator_port import AttachmentView, ConversationFilter, MessageView, SegmentView
from hermes_actors.ports import PlatformStatus
from platforms.api_server.console.site import PREFIX, ConsoleRefusal, Site

__all__ = ["PAGE_SIZE", "Pages", "tool_calls"]

PAGE_SIZE = 25
SEARCH_LIMIT = 10  # session_search's most hits
LONG_CHARS = 1500  # a longer message is folded
LONG_LINES = 25
_SORTS = ("relevance", "newest", "oldest")
_STATES = {"open": False, "ended": True}
_CHAT_TYPES = ("dm", "group", "channel", "thread")


def tool_calls(raw: str | None) -> list[tuple[str, str]]:
    """The (name, arguments) of each call in a message's ``tool_calls`` JSON (one unreadable entry: the text)."""
    if not raw:
        return []
    try:
        calls = json.loads(raw)
    except ValueError:
        return [("(unreadable tool calls)", raw)]
    found: list[tuple[str, str]] = []
    for call in calls if isinstance(calls, list) else [calls]:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        if not isinstance(function, dict):
            function = {}
        name = function.get("name") or (call.get("name") if isinstance(call, dict) else None) or "(unnamed)"
        arguments = function.get("arguments", "")
        found.append((str(name), arguments if isinstance(arguments, str) else json.dumps(arguments)))
    return found


def _day(raw: str, name: str, *, end: bool) -> float | None:
    if not raw:
        return None
    try:
        day = dt.datetime.strptime(raw, "%Y-%m-%d").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ConsoleRefusal(400, f"{name} must be a date YYYY-MM-DD, not {raw[:40]!r}") from None
    return (day + dt.timedelta(days=1)).timestamp() - 0.001 if end else day.timestamp()


def _page_number(raw: str) -> int:
    try:
        return max(1, min(int(raw or "1"), 1_000_000))
    except ValueError:
        return 1


class _Message(msgspec.Struct, kw_only=True):
    """A message as the transcript template shows it."""

    message: MessageView
    calls: list[tuple[str, str]]
    files: list[AttachmentView]
    long: bool
    summary: bool = False


def _shown(segment: SegmentView) -> tuple[list[_Message], list[_Message], list[_Message]]:
    """A segment's messages split into (the summary, those carried over, the rest)."""
    files: dict[int, list[AttachmentView]] = {}
    for attachment in segment.attachments:
        files.setdefault(attachment.message_id, []).append(attachment)

    def shown(message: MessageView) -> _Message:
        content = message.content or ""
        return _Message(
            message=message,
            calls=tool_calls(message.tool_calls),
            files=files.get(message.id, []),
            long=len(content) > LONG_CHARS or content.count("\n") > LONG_LINES,
            summary=message.id == segment.summary_id,
        )

    messages = [shown(m) for m in segment.messages]
    if segment.summary_id is None:
        return [], [], messages
    return messages[:1], messages[1 : 1 + segment.carried], messages[1 + segment.carried :]


class Pages:
    """The reading pages of the console ``site``."""

    def __init__(self, site: Site) -> None:
        self._site = site

    def add_to(self, app: web.Application) -> None:
        handled = self._site.handled
        app.router.add_get(PREFIX + "/conversations", handled(self.conversations))
        app.router.add_get(PREFIX + "/search", handled(self.search))
        app.router.add_get(PREFIX + "/c/{session_id}", handled(self.transcript))
        app.router.add_get(PREFIX + "/live", handled(self.live))
        app.router.add_get(PREFIX + "/live.json", handled(self.live_json))

    async def conversations(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        query = request.query
        chosen = {name: query.get(name, "").strip()[:200] for name in ("platform", "user", "chat_type", "state")}
        chosen.update({name: query.get(name, "").strip()[:10] for name in ("from", "to")})
        where = ConversationFilter(
            source=chosen["platform"] or None,
            user_id=chosen["user"] or None,
            chat_type=chosen["chat_type"] or None,
            ended=_STATES.get(chosen["state"]),
            active_after=_day(chosen["from"], "from", end=False),
            active_before=_day(chosen["to"], "to", end=True),
        )
        number = _page_number(query.get("page", ""))
        offset = (number - 1) * PAGE_SIZE
        page = await self._site.call(lambda op: op.conversations(where, limit=PAGE_SIZE, offset=offset))
        kept = {name: value for name, value in chosen.items() if value}

        def link(to: int) -> str:
            return f"{PREFIX}/conversations?" + urlencode({**kept, "page": str(to)})

        pages = max(1, -(-page.total // PAGE_SIZE))
        return self._site.page(
            "conversations.html",
            login=login,
            page=page,
            chosen=chosen,
            chat_types=_CHAT_TYPES,
            number=number,
            pages=pages,
            previous=link(number - 1) if number > 1 else None,
            following=link(number + 1) if number < pages else None,
        )

    async def search(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        query = request.query.get("q", "")[:1000]
        sort = request.query.get("sort", "relevance")
        if sort not in _SORTS:
            sort = "relevance"
        found = None
        if query.strip():
            found = await self._site.call(lambda op: op.search(query, sort=sort, limit=SEARCH_LIMIT))
        return self._site.page("search.html", login=login, query=query, sort=sort, sorts=_SORTS, found=found)

    async def transcript(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        session_id = request.match_info["session_id"][:256]
        view = await self._site.call(lambda op: op.transcript(session_id))
        segments = [(segment, *_shown(segment)) for segment in view.segments]
        tip = view.segments[-1].session
        return self._site.page("transcript.html", login=login, view=view, segments=segments, tip=tip)

    async def live(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        return self._site.page("live.html", login=login, live=await self._live())

    async def live_json(self, request: web.Request) -> web.Response:
        self._site.login_or_401(request)
        return web.json_response(await self._live(), headers={"Cache-Control": "no-store"})

    async def _live(self) -> dict[str, Any]:
        """What the runtime says of itself: the ApiInbox port's vitals and readiness."""
        running = self._site.attached()
        if running is None:
            raise ConsoleRefusal(503, "the API server is not started")
        inbox, host = running
        vitals = await host.blocking(inbox.vitals)
        readiness = await host.blocking(inbox.readiness)
        ends = await host.blocking(lambda: inbox.operator.recent_ends(limit=10))
        down = (PlatformStatus.FAILED, PlatformStatus.DISCONNECTED)
        return {
            "ready": readiness.ready,
            "reasons": readiness.reasons(),
            "live_actors": vitals.live_actors,
            "activations": vitals.activations,
            "turns": sum(vitals.turns.values()),
            "turns_by_outcome": vitals.turns,
            "tokens_in": vitals.tokens_in,
            "tokens_out": vitals.tokens_out,
            "inbox_pending": vitals.inbox_pending,
            "inbox_oldest_age_s": vitals.inbox_oldest_age_s,
            "outbox": [
                {
                    "platform": name,
                    "inbox_pending": vitals.inbox_by_platform.get(name, 0),
                    "inbox_oldest_age_s": vitals.inbox_oldest_by_platform_s.get(name),
                    "pending": vitals.outbox_pending.get(name, 0),
                    "oldest_age_s": vitals.outbox_oldest_age_s.get(name),
                }
                for name in sorted(set(vitals.outbox_pending) | set(vitals.inbox_by_platform))
            ],
            "platforms": [
                {
                    "name": p.name,
                    "state": str(p.state),
                    "connected": p.state not in down,
                    "last_error": p.last_error,
                    "detail": p.detail,
                }
                for p in readiness.platforms
            ],
            "recent_ends": [
                {"id": end.id, "title": end.title, "source": end.source, "reason": end.end_reason, "at": end.ended_at}
                for end in ends
            ],
            "resets": vitals.resets,
            "passivations": vitals.passivations,
            "deliveries_retried": vitals.deliveries_retried,
            "deliveries_given_up": vitals.deliveries_given_up,
            "messages_answered": vitals.messages.get("answered", 0),
            "messages_refused": vitals.messages.get("refused", 0),
            "messages_stopped": vitals.messages.get("stopped", 0),
            "messages_dead_lettered": vitals.messages.get("dead_lettered", 0),
            "dead_letters_waiting": vitals.dead_letters.get("message", 0),
            "dead_deliveries_waiting": vitals.dead_letters.get("delivery", 0),
            "duplicates": vitals.duplicates,
            "commits": vitals.commits,
        }
