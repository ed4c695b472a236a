"""The console's Jobs page: the scheduled turns, each with Pause or Resume, Run now and Delete.

``GET /console/jobs`` lists them (through the jobs port, as ``GET /api/jobs``: every job, as the operator);
``POST /console/jobs/<id>`` (the login's CSRF token, ``action`` pause, resume, run or delete) changes one as
``/api/jobs`` does and comes back to the list. A job is made with ``hermesctl jobs add``, ``POST /api/jobs`` or the
agent's ``schedule`` tool.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from aiohttp import web

from hermes_actors.errors import HermesError
from hermes_actors.job_port import JobBook, JobNotFoundError
from platforms.api_server.console.site import PREFIX, ConsoleRefusal, Site, redirect

__all__ = ["JobPages"]

T = TypeVar("T")
_LISTED = 500
_ACTIONS = ("pause", "resume", "run", "delete")


class JobPages:
    """The Jobs page and its changes, on the console ``site``."""

    def __init__(self, site: Site) -> None:
        self._site = site

    def add_to(self, app: web.Application) -> None:
        handled = self._site.handled
        app.router.add_get(PREFIX + "/jobs", handled(self.listing))
        app.router.add_post(PREFIX + "/jobs/{job_id}", handled(self.change))

    async def _call(self, call: Callable[[JobBook], T]) -> T:
        running = self._site.attached()
        if running is None:
            raise ConsoleRefusal(503, "the API server is not started")
        inbox, host = running
        try:
            return await host.blocking(partial(call, inbox.jobs))
        except JobNotFoundError as exc:
            raise ConsoleRefusal(404, str(exc)) from None
        except HermesError as exc:
            raise ConsoleRefusal(400, str(exc)) from None

    async def listing(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        jobs = await self._call(lambda book: book.listed(limit=_LISTED))
        return self._site.page("jobs.html", login=login, jobs=jobs)

    async def change(self, request: web.Request) -> web.StreamResponse:
        login = self._site.login_of(request)
        fields = await self._site.form(request, login)
        action = fields.get("action")
        if action not in _ACTIONS:
            raise ConsoleRefusal(400, "a job's change is Pause, Resume, Run now or Delete: nothing was changed")
        job_id = request.match_info["job_id"][:100]

        def apply(book: JobBook) -> object:
            match action:
                case "pause":
                    return book.pause(job_id)
                case "resume":
                    return book.resume(job_id)
                case "run":
                    return book.run(job_id)
            return book.delete(job_id)

        await self._call(apply)
        return redirect(f"{PREFIX}/jobs")
