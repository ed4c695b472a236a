"""The console's logins: the admin key traded for a random server-side token in a cookie, and a CSRF token per
login.

The cookie (:data:`COOKIE`) holds the token, never the key: ``HttpOnly`` (no script reads it), ``SameSite=Strict``
(no other site's page sends it) and ``Path=/console``; ``Secure`` when the request came over HTTPS (directly, or by
the word of a trusted proxy: :mod:`platforms.api_server.proxies`), or always with ``console.secure_cookie:
always``. A token lives :data:`LOGIN_TTL_S` seconds, in this process only (a restart logs everyone out), at most
:data:`MAX_LOGINS` at a time (the oldest goes first). Every form carries the login's CSRF token, and a POST without
the right one is refused; the login form itself is covered by a double-submitted token in a short-lived cookie
(:data:`LOGIN_COOKIE`), so a page elsewhere cannot log a browser in with a key of its choosing.

Wrong keys are throttled per guesser (:mod:`.throttle`), before the key is looked at. A browser that logged in
holds :data:`BROWSER_COOKIE` (a random id and its HMAC under the admin key, kept :data:`BROWSER_TTL_S` seconds,
across restarts, until the key changes): its logins count against a budget of its own, so wrong keys from its
address (a NAT, or a proxy that is not trusted) never keep it out, while a browser without one (an attacker's)
is bounded by its address's budget.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

import msgspec
from aiohttp import web

from platforms.api_server.console.throttle import Throttle, guesser_of

__all__ = [
    "BROWSER_COOKIE",
    "BROWSER_TTL_S",
    "COOKIE",
    "LOGIN_COOKIE",
    "LOGIN_TTL_S",
    "MAX_LOGINS",
    "Login",
    "Logins",
    "same",
]

COOKIE = "hermes_console"
LOGIN_COOKIE = "hermes_console_login"
BROWSER_COOKIE = "hermes_console_browser"
LOGIN_TTL_S = 12 * 3600.0
BROWSER_TTL_S = 180 * 86400
MAX_LOGINS = 64
_PATH = "/console"
_LOGIN_PATH = "/console/login"
_LOGIN_FORM_TTL_S = 3600


class Login(msgspec.Struct, frozen=True, kw_only=True):
    """One logged-in browser: its CSRF token and when the login expires (``clock`` seconds)."""

    csrf: str
    expires_at: float


def same(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two secrets, false when either is missing or empty."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def _browser_mac(admin_key: str, browser: str) -> str:
    digest = hmac.new(
        admin_key.encode(), b"hermes console browser " + browser.encode("utf-8", "surrogatepass"), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Logins:
    """The logins of one console; ``clock`` is monotonic seconds (injectable for tests); ``secure_cookie`` is
    ``console.secure_cookie``."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, secure_cookie: Literal["auto", "always"] = "auto"
    ) -> None:
        self._clock = clock
        self._logins: OrderedDict[str, Login] = OrderedDict()
        self._always_secure = secure_cookie == "always"
        self.throttle = Throttle(clock)

    def guesser(self, request: web.Request, admin_key: str | None) -> str:
        """Whom a login attempt of ``request`` counts against: the browser's own id when it holds a valid
        :data:`BROWSER_COOKIE`, else its client's network."""
        browser = self._browser(request, admin_key)
        return f"browser {browser}" if browser is not None else guesser_of(request.remote)

    def _browser(self, request: web.Request, admin_key: str | None) -> str | None:
        """The id in ``request``'s browser cookie, when its HMAC is right under ``admin_key``."""
        value = request.cookies.get(BROWSER_COOKIE, "")
        browser, _, mac = value.partition(".")
        if not admin_key or not browser or len(value) > 200 or not same(mac, _browser_mac(admin_key, browser)):
            return None
        return browser

    def open(self) -> tuple[str, Login]:
        """A new login: its token (the cookie's value) and record."""
        while len(self._logins) >= MAX_LOGINS:
            self._logins.popitem(last=False)
        token = secrets.token_urlsafe(32)
        login = Login(csrf=secrets.token_urlsafe(32), expires_at=self._clock() + LOGIN_TTL_S)
        self._logins[token] = login
        return token, login

    def find(self, request: web.Request) -> Login | None:
        """The login whose token ``request``'s cookie holds, if it has not expired."""
        token = request.cookies.get(COOKIE)
        if not token:
            return None
        login = self._logins.get(token)
        if login is None:
            return None
        if login.expires_at <= self._clock():
            del self._logins[token]
            return None
        return login

    def close(self, request: web.Request) -> None:
        """End the login of ``request``'s cookie (nothing when there is none)."""
        token = request.cookies.get(COOKIE)
        if token:
            self._logins.pop(token, None)

    def secure(self, request: web.Request) -> bool:
        """Whether cookies set in answer to ``request`` are ``Secure``."""
        return self._always_secure or request.secure

    def set_cookie(self, request: web.Request, response: web.StreamResponse, token: str, admin_key: str) -> None:
        """Give the browser ``token`` in the login cookie and its browser cookie (kept, or new), and drop the login
        form's cookie."""
        secure = self.secure(request)
        response.set_cookie(
            COOKIE, token, path=_PATH, httponly=True, samesite="Strict", secure=secure, max_age=int(LOGIN_TTL_S)
        )
        browser = self._browser(request, admin_key) or secrets.token_urlsafe(16)
        response.set_cookie(
            BROWSER_COOKIE,
            f"{browser}.{_browser_mac(admin_key, browser)}",
            path=_LOGIN_PATH,
            httponly=True,
            samesite="Strict",
            secure=secure,
            max_age=BROWSER_TTL_S,
        )
        response.del_cookie(LOGIN_COOKIE, path=_PATH)

    @staticmethod
    def clear_cookie(response: web.StreamResponse) -> None:
        """Tell the browser to forget its login cookie."""
        response.del_cookie(COOKIE, path=_PATH)

    @staticmethod
    def login_form_token(request: web.Request) -> str:
        """The token the login form submits: the browser's form cookie, or a new one."""
        token = request.cookies.get(LOGIN_COOKIE)
        return token if token and len(token) <= 100 else secrets.token_urlsafe(32)

    def set_login_form_cookie(self, request: web.Request, response: web.StreamResponse, token: str) -> None:
        """Give the browser the login form's ``token``, double-submitted by the form."""
        response.set_cookie(
            LOGIN_COOKIE,
            token,
            path=_PATH,
            httponly=True,
            samesite="Strict",
            secure=self.secure(request),
            max_age=_LOGIN_FORM_TTL_S,
        )
