"""What every console page shares: the templates, the login check, the form and CSRF checks, the operator call,
the login and logout routes and the static files.

A page asked for without a login redirects (303) to ``/console/login?next=<page>``; ``live.json`` and the media
route answer 401 instead (a script or an ``<img>`` cannot follow a login form). A posted form is read only as a
browser sends one (:func:`read_form`: URL-encoded UTF-8, no ``Content-Encoding``, within 64 KiB; anything else is
400, or 413); a POST whose ``csrf`` field is not the login's token is refused 403. After a login, ``next`` leads
only to a console page of this server (:func:`safe_next`). Errors of the operator port come back as an HTML page
with the operator API's status and message.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import jinja2
from aiohttp import web
from multidict import MultiDict, MultiDictProxy

from platforms.api_server.console import text
from platforms.api_server.console.logins import LOGIN_COOKIE, Login, Logins, same
from platforms.api_server.operator_api import Attached, operator_call
from platforms.api_server.wire import ApiError
from platforms.support.http_body import Refused, read_body

if TYPE_CHECKING:
    from hermes_actors.operator_port import Operator

__all__ = ["PREFIX", "ConsoleRefusal", "Route", "Site", "read_form", "redirect", "safe_next"]

T = TypeVar("T")
Route = Callable[[web.Request], Awaitable[web.StreamResponse]]
PREFIX = "/console"
_STATIC = {"console.css": "text/css", "console.js": "text/javascript"}
_MAX_FORM_BYTES = 64 * 1024
_MAX_FORM_FIELDS = 64
_FORM_TYPE = "application/x-www-form-urlencoded"
_NEXT = re.compile(r"/console/[!-~]*")  # printable ASCII, no space: what a browser's own link to a page looks like


class ConsoleRefusal(Exception):
    """A console request ends with an error page of ``status`` saying ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("platforms.api_server.console", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        rich=text.rich,
        marked=text.marked,
        neutral=text.neutral,
        size=text.size,
        stamp=text.stamp,
        pretty_json=text.pretty_json,
        q=lambda value: quote(str(value), safe=""),
        qpath=lambda value: quote(str(value), safe="/"),
    )
    env.globals["ago"] = text.ago
    return env


class Site:
    """The shared parts of one console on the API server whose inbox ``attached`` returns."""

    def __init__(self, attached: Attached, logins: Logins | None = None) -> None:
        self.attached = attached
        self.logins = logins or Logins()
        self._env = _environment()

    # -- rendering -------------------------------------------------------------------------------------------

    def page(self, name: str, *, login: Login | None, status: int = 200, **context: Any) -> web.Response:
        """The template ``name`` rendered with ``context`` (and the login's CSRF token as ``csrf``)."""
        context.setdefault("section", "")
        body = self._env.get_template(name).render(
            csrf=login.csrf if login is not None else "", logged_in=login is not None, now=time.time(), **context
        )
        return web.Response(
            text=body, status=status, content_type="text/html", charset="utf-8", headers={"Cache-Control": "no-store"}
        )

    def refusal(self, error: ConsoleRefusal, login: Login | None) -> web.Response:
        """The error page of ``error``."""
        return self.page("error.html", login=login, status=error.status, message=error.message)

    # -- checks ----------------------------------------------------------------------------------------------

    def admin_key(self) -> str | None:
        """The operator's key (``None``: not started, or no key: the console is off)."""
        running = self.attached()
        return running[0].operator.admin_key if running is not None else None

    def login_of(self, request: web.Request) -> Login:
        """The request's login; a redirect to the login form when there is none."""
        login = self.logins.find(request)
        if login is None or self.admin_key() is None:
            target = request.path_qs if request.method == "GET" else f"{PREFIX}/conversations"
            raise web.HTTPSeeOther(
                f"{PREFIX}/login?next={quote(target, safe='')}", headers={"Cache-Control": "no-store"}
            )
        return login

    def login_or_401(self, request: web.Request) -> Login:
        """The request's login; 401 when there is none (for scripts and images)."""
        login = self.logins.find(request)
        if login is None or self.admin_key() is None:
            raise web.HTTPUnauthorized(text="log in at /console/login", content_type="text/plain")
        return login

    async def form(self, request: web.Request, login: Login) -> MultiDictProxy[str]:
        """The posted form (:func:`read_form`), once its ``csrf`` field is the login's token (403 otherwise)."""
        fields = await read_form(request)
        if not same(fields.get("csrf"), login.csrf):
            raise ConsoleRefusal(403, "the form's CSRF token is missing or stale: reload the page and try again")
        return fields

    async def call(self, call: Callable[[Operator], T]) -> T:
        """``call(inbox.operator)`` off the event loop; the port's refusals become error pages."""
        try:
            return await operator_call(self.attached, call)
        except ApiError as error:
            raise ConsoleRefusal(error.status, str(error)) from None

    # -- routes ----------------------------------------------------------------------------------------------

    def handled(self, route: Route) -> Route:
        """``route`` with its :class:`ConsoleRefusal` answered as an error page and its redirects returned (on the
        shared port the guards' response hook does not run, and a raised redirect would leave without the headers)."""

        async def answer(request: web.Request) -> web.StreamResponse:
            try:
                return await route(request)
            except ConsoleRefusal as error:
                return self.refusal(error, self.logins.find(request))
            except web.HTTPSeeOther as moved:  # returned, not raised: the guards stamp returned responses
                return redirect(str(moved.location) or f"{PREFIX}/login")

        return answer

    def add_to(self, app: web.Application) -> None:
        """Add the login, logout and static routes."""
        handled = self.handled
        app.router.add_get(PREFIX, handled(self.home))
        app.router.add_get(PREFIX + "/", handled(self.home))
        app.router.add_get(PREFIX + "/login", handled(self.login_form))
        app.router.add_post(PREFIX + "/login", handled(self.login))
        app.router.add_post(PREFIX + "/logout", handled(self.logout))
        app.router.add_get(PREFIX + "/static/{name}", handled(self.static))

    async def home(self, request: web.Request) -> web.StreamResponse:
        return redirect(f"{PREFIX}/conversations")

    def _login_page(
        self, request: web.Request, *, status: int = 200, error: str | None = None, target: str | None = None
    ) -> web.Response:
        token = self.logins.login_form_token(request)
        response = self.page(
            "login.html",
            login=None,
            status=status,
            error=error,
            off=self.admin_key() is None,
            login_token=token,
            next=safe_next(target if target is not None else request.query.get("next")),
        )
        self.logins.set_login_form_cookie(request, response, token)
        return response

    async def login_form(self, request: web.Request) -> web.Response:
        return self._login_page(request)

    async def login(self, request: web.Request) -> web.StreamResponse:
        fields = await read_form(request)
        token, key, target = (fields.get(name, "") for name in ("csrf", "key", "next"))
        if not same(token, request.cookies.get(LOGIN_COOKIE)):
            return self._login_page(request, status=403, error="the login form expired: try again", target=target)
        admin_key = self.admin_key()
        guesser = self.logins.guesser(request, admin_key)
        if self.logins.throttle.throttled(guesser):  # before the key is looked at: the refusal tells nothing of it
            return self._login_page(
                request, status=429, error="too many wrong keys lately: wait a minute, then try again", target=target
            )
        if admin_key is None or not same(key.strip(), admin_key):
            self.logins.throttle.failed(guesser)
            return self._login_page(
                request, status=401, error="that is not the admin key ('hermesctl admin-key' prints it)", target=target
            )
        cookie, _ = self.logins.open()
        response = redirect(safe_next(target))
        self.logins.set_cookie(request, response, cookie, admin_key)
        return response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        login = self.logins.find(request)
        if login is not None:
            await self.form(request, login)
            self.logins.close(request)
        response = redirect(f"{PREFIX}/login")
        self.logins.clear_cookie(response)
        return response

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        kind = _STATIC.get(name)
        if kind is None:
            raise web.HTTPNotFound()
        data = resources.files("platforms.api_server.console").joinpath("static", name).read_bytes()
        return web.Response(body=data, content_type=kind, charset="utf-8", headers={"Cache-Control": "no-cache"})


def redirect(location: str) -> web.Response:
    """A 303 to ``location`` (a path of this server)."""
    return web.Response(status=303, headers={"Location": location, "Cache-Control": "no-store"})


async def read_form(request: web.Request) -> MultiDictProxy[str]:
    """The form ``request`` posts, read as a browser sends one: ``application/x-www-form-urlencoded`` UTF-8, without
    a ``Content-Encoding``, at most 64 KiB and 64 fields. Anything else is a :class:`ConsoleRefusal` (400 naming
    what is wrong; 413 when too large)."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise ConsoleRefusal(400, "a console form is sent without a Content-Encoding; post it as the page does")
    if request.content_type != _FORM_TYPE or (request.charset or "utf-8").lower() not in ("utf-8", "utf8"):
        raise ConsoleRefusal(400, f"a console form is {_FORM_TYPE} in UTF-8; post it as the page does")
    try:
        body = await read_body(request, _MAX_FORM_BYTES, "the limit of a console form")
    except Refused as refused:
        raise ConsoleRefusal(refused.status, refused.reason) from None
    try:
        pairs = parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, errors="strict", max_num_fields=_MAX_FORM_FIELDS
        )
    except ValueError:  # UnicodeDecodeError included: raw or percent-escaped bytes that are not UTF-8
        raise ConsoleRefusal(
            400,
            f"the form is not URL-encoded UTF-8 text of at most {_MAX_FORM_FIELDS} fields; post it as the page does",
        ) from None
    return MultiDictProxy(MultiDict(pairs))


def safe_next(target: str | None) -> str:
    """Where to go after logging in: ``target`` when it is a console page of this server (a path under
    ``/console/`` in printable ASCII, no backslash, no ``.`` or ``..`` segment, no control character once
    unescaped, not the login form), else the conversations page."""
    fallback = f"{PREFIX}/conversations"
    if target is None or not _NEXT.fullmatch(target) or "\\" in target:
        return fallback
    path = unquote(urlsplit(target).path, errors="replace")
    if path.startswith(PREFIX + "/login") or "\\" in path or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return fallback
    if any(segment in (".", "..") for segment in path.split("/")):
        return fallback
    return target
