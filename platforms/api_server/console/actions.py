"""The console's changes, each through the operator port as ``hermesctl sessions`` and ``/api/sessions`` make them:
rename and end a conversation's newest session, export its whole lineage as a JSONL download, delete the whole
lineage after a confirmation page; and the media route that shows attachments.

``GET /console/media/<path>`` serves a file of the media store only when ``<path>`` resolves (links followed)
inside the media directory; anything else is 404. Images are served inline (the page shows them with ``<img>``),
every other kind as a download, all under the sandboxing ``MEDIA_CSP`` of :mod:`platforms.api_server.guards`.
"""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from aiohttp import web

from platforms.api_server.console.site import PREFIX, ConsoleRefusal, Site, redirect

__all__ = ["Actions", "media_file"]

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_INLINE = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def media_file(directory: Path, relative: str) -> Path | None:
    """The file ``relative`` names inside ``directory``, or ``None`` when it lies outside it (``..``, an absolute
    path, a link out) or is not a regular file."""
    if not relative or "\x00" in relative or relative.startswith(("/", "\\")):
        return None
    root = directory.resolve()
    try:
        target = (root / relative).resolve()
        target.relative_to(root)
    except (ValueError, OSError, RuntimeError):
        return None
    return target if target.is_file() else None


class Actions:
    """The changing routes and the media route of the console ``site``."""

    def __init__(self, site: Site) -> None:
        self._site = site

    def add_to(self, app: web.Application) -> None:
        handled = self._site.handled
        app.router.add_post(PREFIX + "/c/{session_id}/rename", handled(self.rename))
        app.router.add_post(PREFIX + "/c/{session_id}/end", handled(self.end))
        app.router.add_get(PREFIX + "/c/{session_id}/export", handled(self.export))
        app.router.add_get(PREFIX + "/c/{session_id}/delete", handled(self.confirm_delete))
        app.router.add_post(PREFIX + "/c/{session_id}/delete", handled(self.delete))
        app.router.add_get(PREFIX + "/media/{path:.+}", handled(self.media))

    @staticmethod
    def _session(request: web.Request) -> str:
        return request.match_info["session_id"][:256]

    async def rename(self, request: web.Request) -> web.StreamResponse:
        login = self._site.login_of(request)
        fields = await self._site.form(request, login)
        session_id = self._session(request)
        title = fields.get("title", "").strip() or None
        renamed = await self._site.call(lambda op: op.rename(session_id, title))
        return redirect(f"{PREFIX}/c/{renamed.id}")

    async def end(self, request: web.Request) -> web.StreamResponse:
        login = self._site.login_of(request)
        await self._site.form(request, login)
        session_id = self._session(request)
        ended = await self._site.call(lambda op: op.end(session_id))
        return redirect(f"{PREFIX}/c/{ended.id}")

    async def export(self, request: web.Request) -> web.StreamResponse:
        self._site.login_of(request)
        session_id = self._session(request)
        lines = await self._site.call(lambda op: op.export_lineage(session_id))
        name = _UNSAFE_NAME.sub("_", session_id)[:100] or "session"
        return web.Response(
            body=lines,
            content_type="application/x-ndjson",
            headers={
                "Content-Disposition": f'attachment; filename="hermes-{name}.jsonl"',
                "Cache-Control": "no-store",
            },
        )

    async def confirm_delete(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        session_id = self._session(request)
        view = await self._site.call(lambda op: op.transcript(session_id))
        return self._site.page("delete.html", login=login, view=view, tip=view.segments[-1].session)

    async def delete(self, request: web.Request) -> web.StreamResponse:
        login = self._site.login_of(request)
        fields = await self._site.form(request, login)
        session_id = self._session(request)
        if fields.get("confirm") != session_id:
            raise ConsoleRefusal(400, "deleting needs the confirmation page's button: nothing was deleted")
        view = await self._site.call(lambda op: op.transcript(session_id))
        members = [segment.session.id for segment in reversed(view.segments)]  # the tip first
        for member in members:
            await self._site.call(lambda op, member=member: op.delete(member))  # type: ignore[misc]
        return redirect(f"{PREFIX}/conversations")

    async def media(self, request: web.Request) -> web.StreamResponse:
        self._site.login_or_401(request)
        running = self._site.attached()
        if running is None:
            raise web.HTTPServiceUnavailable()
        found = media_file(running[0].media.directory, request.match_info["path"])
        if found is None:
            raise web.HTTPNotFound(text="no such media file", content_type="text/plain")
        kind = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
        disposition = "inline" if kind in _INLINE else "attachment"
        return web.FileResponse(
            found,
            headers={
                "Content-Type": kind,
                "Content-Disposition": disposition,
                "Cache-Control": "private, max-age=3600",
            },
        )
