"""The web console: ``/console`` on the API server's listener, for an operator holding the admin key.

Server-rendered pages (Jinja2 templates with autoescape on, a stylesheet and a small script shipped in this
package and served from ``/console/static``, nothing fetched from elsewhere):

- ``/console/login`` (the admin key for a login cookie, :mod:`.logins`), ``POST /console/logout``;
- ``/console/conversations``: one row per compression lineage, filtered and paginated;
- ``/console/search``: ``session_search`` discovery, snippets marked, each hit linking to its message;
- ``/console/c/<id>``: the whole lineage of ``<id>`` (segments, compression summaries, tool calls folded,
  attachments, ``#m<message id>`` anchors), with rename, end, export (``/export``) and delete (``/delete``, a
  confirmation page first);
- ``/console/live`` and ``/console/live.json``: the runtime's vitals and readiness, polled every two seconds;
- ``/console/media/<path>``: a file of the media store, only from inside the media directory;
- ``/console/approvals``: the tool calls waiting for a person's approval, each answered with Approve or Deny
  (:mod:`.approvals`);
- ``/console/jobs``: the scheduled turns, each with Pause or Resume, Run now and Delete (:mod:`.jobs`).

Everything is read and changed through :class:`~hermes_actors.operator_port.Operator`, as ``/api/sessions`` does.
Transcripts and titles are hostile input: :mod:`.text` escapes them, shows bidi controls harmlessly and links only
http(s) URLs; the pages run under their own Content-Security-Policy (:data:`~platforms.api_server.guards.CONSOLE_CSP`:
no inline script at all).
"""

from __future__ import annotations

from aiohttp import web

from platforms.api_server.config import ConsoleConfig
from platforms.api_server.console.actions import Actions
from platforms.api_server.console.approvals import ApprovalPages
from platforms.api_server.console.jobs import JobPages
from platforms.api_server.console.logins import Logins
from platforms.api_server.console.pages import Pages
from platforms.api_server.console.site import PREFIX, Site
from platforms.api_server.operator_api import Attached

__all__ = ["PREFIX", "Console"]


class Console:
    """The console of the API server whose inbox and host ``attached`` returns, set up by ``config`` (the
    ``platforms.api_server.console`` section)."""

    def __init__(
        self, attached: Attached, *, config: ConsoleConfig | None = None, logins: Logins | None = None
    ) -> None:
        secure_cookie = (config or ConsoleConfig()).secure_cookie
        self.site = Site(attached, logins or Logins(secure_cookie=secure_cookie))

    def add_to(self, app: web.Application) -> None:
        """Add every console route to ``app``."""
        self.site.add_to(app)
        Pages(self.site).add_to(app)
        Actions(self.site).add_to(app)
        ApprovalPages(self.site).add_to(app)
        JobPages(self.site).add_to(app)
