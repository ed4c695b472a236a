"""The console's logins: the admin key traded for a random server-side token in a cookie, and a CSRF token per
login.

The cookie (:data:`COOKIE`) holds the token, never the key: ``HttpOnly`` (no script reads it), ``SameSite=Strict``
(no other site's page sends it) and ``Path=/console``; ``Secure`` when the request came over HTTPS. A token lives
:data:`LOGIN_TTL_S` seconds, in this process only (a restart logs everyone out), at most :data:`MAX_LOGINS` at a
time (the oldest goes first). Every form carries the login's CSRF token, and a POST without the right one is
refused; the login form itself is covered by a double-submitted token in a short-lived cookie
(:data:`LOGIN_COOKIE`), so a page elsewhere cannot log a browser in with a key of its choosing. After
:data:`MAX_FAILURES` wrong keys within :data:`FAILURE_WINDOW_S` seconds every login is refused until the window
has passed (guessing a generated key is hopeless anyway; this keeps a script from trying).
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable

import msgspec
from aiohttp import web

__all__ = [
    "COOKIE",
    "FAILURE_WINDOW_S",
    "LOGIN_COOKIE",
    "LOGIN_TTL_S",
    "MAX_FAILURES",
    "MAX_LOGINS",
    "Login",
    "Logins",
    "same",
]

COOKIE = "hermes_console"
LOGIN_COOKIE = "hermes_console_login"
LOGIN_TTL_S = 12 * 3600.0
MAX_LOGINS = 64
MAX_FAILURES = 10  # wrong keys within FAILURE_WINDOW_S before every login is refused for the rest of it
FAILURE_WINDOW_S = 60.0
_PATH = "/console"
_LOGIN_FORM_TTL_S = 3600


class Login(msgspec.Struct, frozen=True, kw_only=True):
    """One logged-in browser: its CSRF token and when the login expires (``clock`` seconds)."""

    csrf: str
    expires_at: float


def same(given: str | None, expected: str | None) -> bool:
    """Constant-time equality of two secrets, false when either is missing or empty."""
    if not given or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


class Logins:
    """The logins of one console; ``clock`` is monotonic seconds (injectable for tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._logins: OrderedDict[str, Login] = OrderedDict()
        self._failures: deque[float] = deque()

    def failed(self) -> None:
        """Count a wrong key."""
        self._failures.append(self._clock())

    def throttled(self) -> bool:
        """Whether too many wrong keys came lately for any login to be tried now."""
        horizon = self._clock() - FAILURE_WINDOW_S
        while self._failures and self._failures[0] <= horizon:
            self._failures.popleft()
        return len(self._failures) >= MAX_FAILURES

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

    @staticmethod
    def set_cookie(request: web.Request, response: web.StreamResponse, token: str) -> None:
        """Give the browser ``token`` in the login cookie, and drop the login form's cookie."""
        response.set_cookie(
            COOKIE,
            token,
            path=_PATH,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            max_age=int(LOGIN_TTL_S),
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

    @staticmethod
    def set_login_form_cookie(request: web.Request, response: web.StreamResponse, token: str) -> None:
        """Give the browser the login form's ``token``, double-submitted by the form."""
        response.set_cookie(
            LOGIN_COOKIE,
            token,
            path=_PATH,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            max_age=_LOGIN_FORM_TTL_S,
        )
