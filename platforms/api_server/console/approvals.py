"""The console's Approvals page: the requests for approval nobody has answered, each with Approve and Deny.

``GET /console/approvals`` lists them (through the approvals port, as ``GET /api/approvals``); ``POST
/console/approvals/<id>`` (the login's CSRF token, ``decision`` approve or deny, an optional ``reason``) answers one
as the operator, as ``POST /api/approvals/<id>`` does, and comes back to the list.
"""

from __future__ import annotations

from aiohttp import web

from platforms.api_server.console.site import PREFIX, ConsoleRefusal, Site, redirect
from platforms.api_server.operator_approvals import approval_call, approval_in_path
from platforms.api_server.wire import ApiError

__all__ = ["ApprovalPages"]

_MAX_REASON = 500


class ApprovalPages:
    """The Approvals page and its answers, on the console ``site``."""

    def __init__(self, site: Site) -> None:
        self._site = site

    def add_to(self, app: web.Application) -> None:
        handled = self._site.handled
        app.router.add_get(PREFIX + "/approvals", handled(self.listing))
        app.router.add_post(PREFIX + "/approvals/{approval_id}", handled(self.decide))

    async def listing(self, request: web.Request) -> web.Response:
        login = self._site.login_of(request)
        try:
            waiting = await approval_call(self._site.attached, lambda desk: desk.pending())
        except ApiError as error:
            raise ConsoleRefusal(error.status, str(error)) from None
        return self._site.page("approvals.html", login=login, waiting=waiting)

    async def decide(self, request: web.Request) -> web.StreamResponse:
        login = self._site.login_of(request)
        fields = await self._site.form(request, login)
        decision = fields.get("decision")
        if decision not in ("approve", "deny"):
            raise ConsoleRefusal(400, "an answer is Approve or Deny: nothing was changed")
        reason = (fields.get("reason") or "").strip()[:_MAX_REASON] or None
        try:
            approval_id = approval_in_path(request)
            await approval_call(
                self._site.attached,
                lambda desk: desk.decide(approval_id, approved=decision == "approve", reason=reason),
            )
        except ApiError as error:
            raise ConsoleRefusal(error.status, str(error)) from None
        return redirect(f"{PREFIX}/approvals")
