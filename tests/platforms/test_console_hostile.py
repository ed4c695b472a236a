"""Hostile text in the console's pages, and the media route's confinement, without a browser (the browser's own
check is in :mod:`tests.platforms.test_console_browser`)."""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from pathlib import Path
from urllib.parse import urlencode

import pytest

from platforms.api_server.console.actions import media_file
from platforms.api_server.console.text import ago, marked, rich
from tests.platforms.console_client import PNG, Console, ConsoleClient, console
from tests.platforms.test_api_operator import ADMIN

__all__ = ["console"]  # the fixture

HOSTILE_TITLE = "<script>alert('title')</script> \u202eevil\u202c"
HOSTILE_TEXT = (
    "<script>window.__pwned=1</script> <img src=x onerror=alert(1)> [click](javascript:alert(1)) "
    "javascript:alert(2) https://example.org/a?b=1&c=2 \u202etxt.exe\u2069"
)


# -- hostile text ----------------------------------------------------------------------------------------------


def _assert_harmless(html: str) -> None:
    assert "<script>window" not in html
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert 'href="javascript:' not in html.lower()
    assert "\u202e" not in html
    assert "\u202c" not in html
    assert "\u2069" not in html


def test_scripts_javascript_links_and_bidi_controls_in_titles_and_messages_are_harmless(console: Console) -> None:
    api = console.api
    session = api.ok("POST", "/api/sessions", {"title": HOSTILE_TITLE[:100]}, status=201)["id"]
    api.talk(session, HOSTILE_TEXT)
    client = console.logged_in()
    pages = [
        client.get("/console/conversations"),
        client.get(f"/console/c/{session}"),
        client.get("/console/search?q=pwned"),
        client.get(f"/console/c/{session}/delete"),
    ]
    for page in pages:
        assert page.status == 200
        _assert_harmless(page.text)
    transcript = pages[1].text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in transcript
    assert "[U+202E]" in transcript
    assert '<a href="https://example.org/a?b=1&amp;c=2" rel="noopener noreferrer nofollow"' in transcript
    assert "<mark>" in pages[2].text


def test_the_text_filters_escape_before_marking_and_linking() -> None:
    assert str(marked("a >>><b>x</b><<< c")) == "a <mark>&lt;b&gt;x&lt;/b&gt;</mark> c"
    assert str(marked(">>>open")) == "<mark>open</mark>"
    assert str(marked("<<<x")) == "&lt;&lt;&lt;x"
    assert str(rich("see javascript:alert(1)")) == "see javascript:alert(1)"
    assert str(rich("go https://a.example/x). ok")).startswith('go <a href="https://a.example/x"')
    assert str(rich('https://a.example/"onmouseover="x')).endswith("</a>&#34;onmouseover=&#34;x")
    assert ago(100.0, 100.0 + 3 * 3600) == "3 h ago"


# -- the media route -------------------------------------------------------------------------------------------


def test_the_media_route_serves_only_files_inside_the_media_directory(console: Console, tmp_path: Path) -> None:
    media = console.api.gateway.media.directory
    media.mkdir(parents=True, exist_ok=True)
    (media / "inside.png").write_bytes(PNG)
    secret = tmp_path / "secret.txt"
    secret.write_text("the secret")
    os.symlink(secret, media / "link.png")
    client = console.logged_in()
    assert client.get("/console/media/inside.png").data == PNG
    for path in [
        "../secret.txt",
        "..%2Fsecret.txt",
        "%2E%2E/secret.txt",
        "link.png",
        "/etc/passwd",
        "%2Fetc%2Fpasswd",
        "nothing.png",
    ]:
        answer = client.get("/console/media/" + path)
        assert answer.status == 404, path
        assert b"the secret" not in answer.data
    assert media_file(media, "../secret.txt") is None
    assert media_file(media, str(secret)) is None
    assert media_file(media, "inside.png") == (media / "inside.png").resolve()


# -- hostile forms ---------------------------------------------------------------------------------------------

FORMS = ["login", "logout", "rename", "end", "delete"]


def _form_route(console: Console, form: str) -> tuple[ConsoleClient, str, str]:
    """A client ready to post ``form`` (logged in, except for the login form), the form's path and CSRF token."""
    if form == "login":
        client = console.fresh()
        return client, "/console/login", client.get("/console/login").csrf()
    session = console.api.ok("POST", "/api/sessions", {"title": "Kept"}, status=201)["id"]
    client = console.fresh()
    client.log_in(ADMIN)
    csrf = client.get(f"/console/c/{session}").csrf()
    return client, "/console/logout" if form == "logout" else f"/console/c/{session}/{form}", csrf


@pytest.mark.parametrize("form", FORMS)
def test_a_form_body_that_is_not_utf8_or_is_compressed_is_a_400_without_an_error_line(
    console: Console, form: str, caplog: pytest.LogCaptureFixture
) -> None:
    client, path, csrf = _form_route(console, form)
    plain = urlencode({"csrf": csrf, "key": ADMIN, "title": "x", "confirm": "x"}).encode()
    url_form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": client.origin}
    for body, extra in [
        (plain + b"&title=\xff\xfe&key=\xc3", {}),  # raw bytes that are not UTF-8
        (plain + b"&title=%FF%FE&key=%C3", {}),  # percent-escaped ones
        (gzip.compress(plain), {"Content-Encoding": "gzip"}),
        (zlib.compress(plain), {"Content-Encoding": "deflate"}),
        (b"\x1f\x8b garbage", {"Content-Encoding": "gzip"}),
        (plain, {"Content-Type": "application/x-www-form-urlencoded; charset=latin-1"}),
        (plain, {"Content-Type": "application/json"}),
    ]:
        answer = client.request("POST", path, body, {**url_form, **extra})
        assert answer.status == 400, (form, body[:40], extra, answer.text[:300])
        assert "hermes_console" in client.cookies or form == "login"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert console.api.ok("GET", "/api/sessions")["total"] == (0 if form == "login" else 1)  # nothing deleted


@pytest.mark.parametrize(
    "target",
    [
        "/console/live\r\nSet-Cookie: planted=1",
        "\r\n",
        "/console/live\n",
        "/console/\x00",
        "https://evil.example/console/",
        "//evil.example/console/",
        "/\\evil.example/console/",
        "/console/\\..\\..\\api",
        "/console/../api/sessions",
        "/console/%2e%2e/api/sessions",
        "/console/%2E%2E%2Fapi",
        "/console/x%0d%0aSet-Cookie:%20planted=1",
        " /console/live",
        "/console/caf\u00e9",
        "javascript:alert(1)",
        "/console/login?next=https://evil.example/",
        "/consoles",
        "",
    ],
)
def test_after_logging_in_an_unsafe_next_lands_on_the_conversations_page(
    console: Console, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = console.fresh()
    form = client.get("/console/login?next=" + urlencode({"n": target})[2:])
    answer = client.post("/console/login", {"csrf": form.csrf(), "key": ADMIN, "next": target})
    assert (answer.status, answer.location) == (303, "/console/conversations")
    assert "planted" not in client.cookies
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_same_site_console_path_in_next_is_kept(console: Console) -> None:
    for target in ["/console/live", "/console/c/abc?x=1&y=%2F#m5", "/console/search?q=%E5%A4%A9"]:
        client = console.fresh()
        form = client.get("/console/login")
        answer = client.post("/console/login", {"csrf": form.csrf(), "key": ADMIN, "next": target})
        assert (answer.status, answer.location) == (303, target)
