"""What the outbound-fetch tests of every adapter share: a canary server and a fixed hosts mapping.

:class:`Canary` is an HTTP server on 127.0.0.1 that records every request: a URL on it stands for anything inside
the host (``/metrics``, a metadata service, an admin panel), so a test that names it in a payload proves by
``canary.hits`` whether the adapter fetched it. ``/redirect?to=<url>`` answers 302 to ``url``; every other path
answers 200 with a few bytes of text. :func:`use_hosts` makes :func:`platforms.support.http_client.open_session`
resolve names from a mapping (``{"smba.trafficmanager.net": "127.0.0.1"}``) instead of DNS, so a platform host
can be pointed at loopback (DNS rebinding) and a test never resolves a real name.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from platforms.support import fetch_policy

__all__ = ["CANARY_BODY", "Canary", "HostsResolver", "running_canary", "use_hosts"]

CANARY_BODY = b"canary: internal metrics\n"


class Canary:
    """An HTTP server on 127.0.0.1 that records the path of every request in :attr:`hits`."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        self._lock = threading.Lock()
        canary = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with canary._lock:
                    canary.hits.append(self.path)
                parts = urlsplit(self.path)
                if parts.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", parse_qs(parts.query)["to"][0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(CANARY_BODY)))
                self.end_headers()
                self.wfile.write(CANARY_BODY)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="canary", daemon=True)

    def url(self, path: str = "/metrics", *, host: str = "127.0.0.1") -> str:
        """``path`` on the canary, under ``host`` (a name :func:`use_hosts` maps to 127.0.0.1, or the address)."""
        return f"http://{host}:{self.port}{path}"

    def redirect(self, to: str, *, host: str = "127.0.0.1") -> str:
        """A URL on the canary (under ``host``) that redirects to ``to``."""
        return self.url(f"/redirect?to={quote(to, safe='')}", host=host)

    def secret_hits(self) -> list[str]:
        """The requests for anything but a redirect: what the adapter must never have fetched."""
        with self._lock:
            return [hit for hit in self.hits if not hit.startswith("/redirect")]

    def redirect_hits(self) -> list[str]:
        with self._lock:
            return [hit for hit in self.hits if hit.startswith("/redirect")]


@contextmanager
def running_canary() -> Iterator[Canary]:
    canary = Canary()
    canary._thread.start()
    try:
        yield canary
    finally:
        canary._server.shutdown()
        canary._server.server_close()


class HostsResolver(AbstractResolver):
    """Answers from ``mapping`` (name to address); any other name fails as an unknown one would."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self._mapping = mapping

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        address = self._mapping.get(host)
        if address is None:
            raise OSError(f"{host} is not in the test's hosts mapping")
        kind = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": kind,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        pass


def use_hosts(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Make fetch-policy sessions resolve names from the returned mapping (empty: every name fails) until the
    test ends."""
    mapping: dict[str, str] = {}
    monkeypatch.setattr(fetch_policy, "base_resolver", lambda: HostsResolver(mapping))
    return mapping
