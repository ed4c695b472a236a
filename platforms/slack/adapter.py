"""The Slack adapter: one Request URL per app, verified, committed before it is answered 200."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from hermes_actors.errors import PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.slack.actions import press_to_inbound
from platforms.slack.config import ResolvedApp, SlackConfig, resolve_app
from platforms.slack.events import PLATFORM, Skipped, decode_envelope, to_inbound, verify
from platforms.slack.files import SlackFile, attach_files, downloadable
from platforms.slack.sender import SlackSender
from platforms.support.credentials import fetch_json
from platforms.support.http_client import open_session, shown
from platforms.support.http_host import HttpAdapter, Refused

__all__ = ["SlackAdapter"]

_log = logging.getLogger(__name__)


def _answer(status: int, body: Mapping[str, Any], *, no_retry: bool = False) -> web.Response:
    # X-Slack-No-Retry: a payload we refused once will be refused again; Slack need not resend it.
    headers = {"X-Slack-No-Retry": "1"} if no_retry else None
    return web.json_response(dict(body), status=status, headers=headers)


class SlackAdapter(HttpAdapter[SlackConfig]):
    """The Slack entry point: an Events API server for the apps of a :class:`SlackConfig`, and their sender.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here, so a missing one is
    a :class:`ConfigError` before anything starts. ``clock`` checks request timestamps.
    """

    platform = PLATFORM
    server_name = "slack"

    def __init__(
        self,
        config: SlackConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        self._apps = {name: resolve_app(name, app, env) for name, app in config.apps.items()}
        self._clock = clock
        self.capabilities = Capabilities(threads=True, max_message_chars=config.max_message_chars)
        self.sender = SlackSender(self._apps, config)
        # Messages whose files are being fetched -> whether that copy was then stored (on the server's loop only).
        self._fetching: dict[tuple[str, str], asyncio.Future[bool]] = {}

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """``auth.test`` with every app's bot token: one line per app naming its bot user and workspace;
        :class:`PlatformError` for a token Slack refuses."""
        seen = []
        for name, app in self._apps.items():
            what = f"slack app {name!r}: auth.test"
            url = self.config.api_base_url.rstrip("/") + "/auth.test"
            headers = {"Authorization": f"Bearer {app.bot_token}"}
            status, body = fetch_json(url, what=what, headers=headers, method="POST", timeout_s=timeout_s)
            if status != 200 or not isinstance(body, dict) or body.get("ok") is not True:
                said = body.get("error") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no error named'}); check the bot token")
            seen.append(f"app {name!r} is {body.get('user')} in workspace {body.get('team_id')}")
        return seen

    def senders(self) -> Sequence[ReplySender]:
        """The ``chat.postMessage`` sender (it also opens handoff threads)."""
        return [self.sender]

    def _add_routes(self, app: web.Application) -> None:
        """Serve ``POST /slack/events/<app>`` and the buttons' ``POST /slack/actions/<app>``."""
        app.router.add_post("/slack/events/{app}", self._receive)
        app.router.add_post("/slack/actions/{app}", self._press)

    async def _press(self, request: web.Request) -> web.Response:
        """An Interactivity request (a button of a question for approval), signed like an event."""
        name = request.match_info["app"]
        try:
            app = self._apps.get(name)
            if app is None:
                raise Refused(404, f"no Slack app {name!r}; add it under platforms.slack.apps")
            body = await self._read_body(request)
            verify(app.signing_key, request.headers, body, self._clock())
            read = press_to_inbound(app, body, received_at=self._clock())
        except Refused as exc:
            _log.info("slack app %r: refused an interactivity request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason})
        if isinstance(read, Skipped):
            _log.info("slack app %r: ignored an interactivity request: %s", name, read.reason)
            return _answer(200, {"ok": True, "ignored": read.reason})
        return await self._accept(read)

    def describe(self) -> list[str]:
        """One banner line per app: its Request URL, where its secrets come from and where replies go."""
        if not self._apps:
            return [
                f"Slack: {self.url} has no apps; add one under platforms.slack.apps in config.yaml "
                "(signing_secret and bot_token from api.slack.com/apps)"
            ]
        api = shown(self.config.api_base_url.rstrip("/") + "/chat.postMessage")
        threads = "top-level channel messages answered in a thread" if self.config.reply_in_thread else "no threads"
        return [
            f"Slack app '{app.name}': Events API Request URL POST {self.url}/slack/events/{app.name} "
            f"(signed, {app.origin}); Interactivity Request URL POST {self.url}/slack/actions/{app.name} (approval "
            f"buttons); replies via {api} ({threads}); files are downloaded with the bot token (files:read scope) as "
            "attachments"
            for app in self._apps.values()
        ]

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["app"]
        retry = request.headers.get("X-Slack-Retry-Num")
        try:
            app = self._apps.get(name)
            if app is None:
                raise Refused(404, f"no Slack app {name!r}; add it under platforms.slack.apps")
            body = await self._read_body(request)
            verify(app.signing_key, request.headers, body, self._clock())
            envelope = decode_envelope(body)
            if envelope.type == "url_verification":
                _log.info("slack app %r: answered the url_verification challenge", name)
                return web.json_response({"challenge": envelope.challenge or ""})
            if envelope.type == "app_rate_limited":
                _log.warning("slack app %r: Slack dropped events over the Events API rate limit", name)
            if envelope.type != "event_callback":
                _log.info("slack app %r: ignored a %r request", name, envelope.type[:40])
                return _answer(200, {"ok": True, "ignored": envelope.type[:40]})
            read = to_inbound(app, envelope, reply_in_thread=self.config.reply_in_thread, received_at=self._clock())
        except Refused as exc:
            _log.info("slack app %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason}, no_retry=exc.status != 401)
        event_id = (envelope.event_id or "without id")[:40]
        if isinstance(read, Skipped):
            level = logging.DEBUG if read.quiet else logging.INFO
            _log.log(level, "slack app %r: skipped event %s: %s", name, event_id, read.reason)
            return _answer(200, {"ok": True, "ignored": read.reason})
        if retry is not None:
            reason = request.headers.get("X-Slack-Retry-Reason", "unknown")
            _log.info("slack app %r: event %s is Slack's retry %r (%r)", name, event_id, retry[:8], reason[:40])
        inbound, files = read
        if not any(downloadable(file) for file in files):
            return await self._accept(inbound)
        return await self._accept_with_files(app, inbound, files)

    async def _accept_with_files(
        self, app: ResolvedApp, inbound: InboundMessage, files: list[SlackFile]
    ) -> web.Response:
        """Download ``files`` as attachments, then accept; a copy arriving meanwhile waits for this one."""
        key = (app.name, inbound.message_id)
        first = self._fetching.get(key)
        if first is not None:
            _log.info("slack app %r: message %s is being fetched already; waiting for it", app.name, inbound.message_id)
            if await asyncio.shield(first):
                return await self._accept(inbound)  # stored by the first copy: recognised as a duplicate
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._fetching[key] = done
        stored = False
        try:
            inbound = await self._attach(app, inbound, files)
            answer = await self._accept(inbound)
            stored = answer.status == 200
            return answer
        finally:
            if self._fetching.get(key) is done:
                del self._fetching[key]
            done.set_result(stored)

    async def _attach(self, app: ResolvedApp, inbound: InboundMessage, files: list[SlackFile]) -> InboundMessage:
        inbox = self._inbox
        if inbox is None:  # pragma: no cover - the server runs only after start()
            return inbound
        async with open_session() as session:
            return await attach_files(
                inbound,
                files,
                app_name=app.name,
                bot_token=app.bot_token,
                api_base_url=self.config.api_base_url,
                media=inbox.media,
                session=session,
                fetch=self.config.fetch_policy,
                timeout_s=self.config.http_timeout_s,
            )

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        result = await self._accept_inbound(inbound, _log, "slack app %r: could not accept message %s")
        if result is None:  # not stored: a 5xx makes Slack deliver the event again
            return _answer(503, {"error": "the event could not be stored; Slack will retry it"})
        if result.duplicate:
            _log.info("slack app %r: message %s was already stored", inbound.source.account_id, inbound.message_id)
        return _answer(200, {"ok": True, "duplicate": result.duplicate, "routing_key": result.routing_key})
