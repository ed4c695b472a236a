"""``/api/jobs``: the scheduled turns on the API server's listener, behind the admin key as ``/api/sessions`` is.

Everything goes through :class:`~hermes_actors.job_port.JobBook` (``inbox.jobs``), off the event loop, as the
operator (who sees every job):

- ``GET /api/jobs?limit=``: the jobs, newest first.
- ``POST /api/jobs`` ``{"prompt", one of "in" | "at" | "every" | "cron" (with "tz"), "session_id" and/or "chat",
  "fresh", "missed"}`` (:class:`~hermes_actors.job_port.JobSpec`): 201 and the job.
- ``GET``, ``DELETE /api/jobs/{id}``; ``POST /api/jobs/{id}/pause``, ``/resume``, ``/run`` (once now, beside its
  schedule): the job as it stands after.

A job the port refuses is a 400 naming the field (``param``), an unknown one a 404 (``job_not_found``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import msgspec
from aiohttp import web

from hermes_actors.errors import HermesError
from hermes_actors.job_port import JobBook, JobError, JobNotFoundError, JobSpec, JobView
from platforms.api_server.operator_api import Attached, decode_body
from platforms.api_server.wire import ApiError, json_response
from platforms.support.http_host import read_decoded

__all__ = ["JobsApi"]

T = TypeVar("T")
Route = Callable[[web.Request], Awaitable[web.StreamResponse]]

_spec = msgspec.json.Decoder(JobSpec)
_FIELDS = frozenset({"prompt", "in", "at", "every", "cron", "tz", "session_id", "chat", "missed", "schedule", "target"})
_MAX_LIMIT = 500


def _refusal(exc: HermesError) -> ApiError:
    """The HTTP answer to what the jobs port raised."""
    text = str(exc)
    if isinstance(exc, JobNotFoundError):
        return ApiError(404, text, code="job_not_found")
    if isinstance(exc, JobError):
        field = text.split(":", 1)[0]
        return ApiError(400, text, code="invalid_value", param=field if field in _FIELDS else None)
    return ApiError(503, text, type="server_error", code="service_unavailable")


class JobsApi:
    """The ``/api/jobs`` routes; ``guarded`` puts a route behind the admin key (the operator API's guard)."""

    def __init__(self, attached: Attached, max_body_bytes: int, guarded: Callable[[Route], Route]) -> None:
        self._attached = attached
        self._max_body = max_body_bytes
        self._guarded = guarded

    def add_to(self, app: web.Application) -> None:
        """Add the routes, each behind the admin key."""
        guarded = self._guarded
        app.router.add_get("/api/jobs", guarded(self.listing))
        app.router.add_post("/api/jobs", guarded(self.create))
        app.router.add_get("/api/jobs/{job_id}", guarded(self.get))
        app.router.add_delete("/api/jobs/{job_id}", guarded(self.delete))
        for action in ("pause", "resume", "run"):
            app.router.add_post(f"/api/jobs/{{job_id}}/{action}", guarded(partial(self.change, action)))

    async def _call(self, call: Callable[[JobBook], T]) -> T:
        running = self._attached()
        if running is None:
            raise ApiError(503, "the API server is not started", type="server_error", code="service_unavailable")
        inbox, host = running
        try:
            return await host.blocking(partial(call, inbox.jobs))
        except HermesError as exc:
            raise _refusal(exc) from None

    async def listing(self, request: web.Request) -> web.Response:
        raw = request.query.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= _MAX_LIMIT:
            raise ApiError(400, f"limit must be an integer 1..{_MAX_LIMIT}, not {raw[:50]!r}", param="limit")
        listed = await self._call(lambda book: book.listed(limit=int(raw)))
        return json_response({"object": "list", "data": listed})

    async def create(self, request: web.Request) -> web.Response:
        spec = decode_body(_spec, await read_decoded(request, self._max_body) or b"{}")
        return json_response(await self._call(lambda book: book.add(spec, created_by="api")), status=201)

    async def get(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        return json_response(await self._call(lambda book: book.get(job_id)))

    async def delete(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        if not await self._call(lambda book: book.delete(job_id)):
            raise ApiError(404, f"no job {job_id[:100]!r}", code="job_not_found")
        return json_response({"id": job_id, "object": "job.deleted", "deleted": True})

    async def change(self, action: str, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]

        def change(book: JobBook) -> JobView:
            if action == "pause":
                return book.pause(job_id)
            return book.resume(job_id) if action == "resume" else book.run(job_id)

        return json_response(await self._call(change))
