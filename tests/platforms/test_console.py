"""The web console (``/console``) without a browser: a real gateway and API server on 127.0.0.1, requests made the
way a browser makes them (cookies, form posts with an Origin)."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import quote

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.api_server.console.actions import media_file
from platforms.api_server.console.logins import FAILURE_WINDOW_S, MAX_FAILURES, Logins
from platforms.api_server.console.text import ago, marked, rich
from platforms.api_server.guards import CONSOLE_CSP, MEDIA_CSP
from tests.platforms.console_client import PNG, ConsoleClient
from tests.platforms.test_api_operator import ADMIN, KEY, Api
from tests.platforms.test_console_browser import find_chromium

HOSTILE_TITLE = "<script>alert('title')</script> \u202eevil\u202c"
HOSTILE_TEXT = (
    "<script>window.__pwned=1</script> <img src=x onerror=alert(1)> [click](javascript:alert(1)) "
    "javascript:alert(2) https://example.org/a?b=1&c=2 \u202etxt.exe\u2069"
)


class Console:
    """A running gateway and API server, their operator API and a console client."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.client = ConsoleClient(api.port)

    def fresh(self) -> ConsoleClient:
        return ConsoleClient(self.api.port)

    def logged_in(self) -> ConsoleClient:
        self.client.log_in(ADMIN)
        return self.client


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    with ExitStack() as stack:
        server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
        gateway = Gateway(
            tmp_path / "state.db", config=RuntimeConfig(protected_recent_messages=2), senders=server.senders()
        )
        stack.callback(gateway.stop, 10)
        server.start(GatewayInbox(gateway, admin_key=ADMIN))
        stack.callback(server.stop, 10)
        yield Console(Api(server, gateway))


def _image_turn(api: Api, text: str) -> str:
    """A chat completion carrying a PNG; the id of the session it made."""
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    body = {
        "model": "hermes-agent",
        "user": "picture-user",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}],
            }
        ],
    }
    status, headers, data = api.raw("POST", "/v1/chat/completions", body, key=KEY)
    assert status == 200, data
    return str(headers["X-Hermes-Session-Id"])


# -- logging in and out ----------------------------------------------------------------------------------------


def test_the_login_page_is_a_form_under_the_console_csp(console: Console) -> None:
    page = console.client.get("/console/login")
    assert page.status == 200
    assert page.headers["Content-Security-Policy"] == CONSOLE_CSP
    assert page.headers["X-Frame-Options"] == "DENY"
    assert '<form method="post" action="/console/login"' in page.text
    assert '<meta name="viewport"' in page.text
    assert "hermes_console_login" in console.client.cookies


def test_logging_in_sets_an_http_only_strict_cookie_holding_a_token_not_the_key(console: Console) -> None:
    answer = console.client.log_in(ADMIN)
    assert answer.location == "/console/conversations"
    (line,) = [c for c in answer.cookies() if c.startswith("hermes_console=")]
    attributes = [part.strip().lower() for part in line.split(";")]
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert "path=/console" in attributes
    token = console.client.cookies["hermes_console"]
    assert ADMIN not in line
    assert len(token) >= 40
    assert console.client.get("/console/conversations").status == 200


@pytest.mark.parametrize("key", ["wrong", KEY, ""], ids=["a wrong key", "the client key", "no key"])
def test_anything_but_the_admin_key_is_refused(console: Console, key: str) -> None:
    form = console.client.get("/console/login")
    answer = console.client.post("/console/login", {"csrf": form.csrf(), "key": key})
    assert answer.status == 401
    assert "not the admin key" in answer.text
    assert "hermes_console" not in console.client.cookies
    assert console.client.get("/console/conversations").status == 303


def test_a_login_without_the_forms_token_is_refused(console: Console) -> None:
    console.client.get("/console/login")
    answer = console.client.post("/console/login", {"csrf": "forged", "key": ADMIN})
    assert answer.status == 403
    assert "hermes_console" not in console.client.cookies


def test_after_logging_in_next_leads_back_but_never_off_the_console(console: Console) -> None:
    client = console.client
    for target, lands in [
        ("/console/live", "/console/live"),
        ("https://evil.example/", "/console/conversations"),
        ("//evil.example/console/", "/console/conversations"),
    ]:
        form = client.get("/console/login")
        answer = client.post("/console/login", {"csrf": form.csrf(), "key": ADMIN, "next": target})
        assert answer.location == lands


@pytest.mark.parametrize(
    "path", ["/console/conversations", "/console/search?q=x", "/console/c/anything", "/console/live", "/console"]
)
def test_without_a_login_pages_redirect_to_the_login_form(console: Console, path: str) -> None:
    answer = console.client.get(path)
    assert answer.status == 303
    assert answer.location.startswith("/console/")
    if path != "/console":
        assert answer.location.startswith("/console/login?next=")


@pytest.mark.parametrize("path", ["/console/live.json", "/console/media/x.png"])
def test_without_a_login_scripts_and_images_get_401(console: Console, path: str) -> None:
    assert console.client.get(path).status == 401


def test_logging_out_ends_the_login_on_the_server(console: Console) -> None:
    client = console.logged_in()
    token = client.cookies["hermes_console"]
    page = client.get("/console/conversations")
    assert client.post("/console/logout", {"csrf": "wrong"}).status == 403
    answer = client.post("/console/logout", {"csrf": page.csrf()})
    assert (answer.status, answer.location) == (303, "/console/login")
    assert "hermes_console" not in client.cookies
    client.cookies["hermes_console"] = token  # a copy of the old cookie opens nothing
    assert client.get("/console/conversations").status == 303


def test_the_console_is_off_without_an_admin_key(tmp_path: Path) -> None:
    server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    gateway = Gateway(tmp_path / "state.db", senders=server.senders())
    try:
        server.start(GatewayInbox(gateway, admin_key=None))
        client = ConsoleClient(int(server.url.rsplit(":", 1)[1]))
        assert "The console is off" in client.get("/console/login").text
        assert client.post("/console/login", {"csrf": client.cookies["hermes_console_login"], "key": ""}).status == 401
    finally:
        server.stop(10)
        gateway.stop(10)


# -- CSRF and origins ------------------------------------------------------------------------------------------


def test_a_change_without_the_csrf_token_is_refused_403_and_changes_nothing(console: Console) -> None:
    session = console.api.ok("POST", "/api/sessions", {"title": "Kept"}, status=201)["id"]
    client = console.logged_in()
    for fields in ({"title": "Changed"}, {"title": "Changed", "csrf": "forged"}):
        answer = client.post(f"/console/c/{session}/rename", fields)
        assert answer.status == 403
        assert "CSRF" in answer.text
    assert client.post(f"/console/c/{session}/end", {}).status == 403
    assert client.post(f"/console/c/{session}/delete", {"confirm": session}).status == 403
    view = console.api.ok("GET", f"/api/sessions/{session}")
    assert (view["title"], view["live"]) == ("Kept", True)


def test_a_form_posted_from_another_origin_is_refused(console: Console) -> None:
    session = console.api.ok("POST", "/api/sessions", {"title": "Kept"}, status=201)["id"]
    client = console.logged_in()
    csrf = client.get(f"/console/c/{session}").csrf()
    answer = client.post(f"/console/c/{session}/rename", {"csrf": csrf, "title": "x"}, origin="https://evil.example")
    assert answer.status == 403
    assert console.api.ok("GET", f"/api/sessions/{session}")["title"] == "Kept"


# -- the pages -------------------------------------------------------------------------------------------------


def test_every_page_renders_a_scripted_conversation(console: Console) -> None:
    api = console.api
    root, tip = api.compressed("压缩的对话")
    tool_session = api.ok("POST", "/api/sessions", {"title": "Tools"}, status=201)["id"]
    api.talk(tool_session, "你好世界，今天天气很好", "tool lookup_weather city=Paris")
    picture = _image_turn(api, "a picture for you")
    client = console.logged_in()

    listing = client.get("/console/conversations")
    assert listing.status == 200
    assert listing.text.count('<tr class="open">') == 3
    assert f'href="/console/c/{tip}"' in listing.text
    assert "压缩的对话" in listing.text
    assert re.search(r'data-label="Compressions" class="num">1<', listing.text)

    found = client.get("/console/search?q=" + quote("天气"))
    assert found.status == 200
    assert "<mark>天气</mark>" in found.text
    hit = re.search(rf'href="/console/c/{tool_session}#m(\d+)"', found.text)
    assert hit is not None
    assert "<mark>晴</mark>" not in found.text
    one = client.get("/console/search?sort=newest&q=" + quote("天"))
    assert "<mark>天</mark>" in one.text

    page = client.get(f"/console/c/{tool_session}")
    assert f'id="m{hit[1]}"' in page.text
    assert '<details class="tool-call">' in page.text
    assert "lookup_weather" in page.text
    assert '<details class="tool-result">' in page.text

    lineage = client.get(f"/console/c/{root}")  # any segment's id shows the whole lineage
    assert lineage.text.count('<section class="segment"') == 2
    assert "compression summary" in lineage.text
    assert "carried over from the previous segment" in lineage.text
    assert f'action="/console/c/{tip}/rename"' in lineage.text

    image = client.get(f"/console/c/{picture}")
    (src,) = re.findall(r'<img src="(/console/media/[^"]+)"', image.text)
    served = client.get(src)
    assert (served.status, served.data, served.headers["Content-Type"]) == (200, PNG, "image/png")
    assert served.headers["Content-Security-Policy"] == MEDIA_CSP

    live = client.get("/console/live")
    assert live.status == 200
    assert 'data-poll="/console/live.json"' in live.text
    data = client.get("/console/live.json").json()
    assert data["turns"] >= 7
    assert isinstance(data["platforms"], list)  # the daemon reports its entry points (the browser test sees them)


def test_conversations_filter_by_state_platform_and_date_and_paginate(console: Console) -> None:
    api = console.api
    ids = [api.ok("POST", "/api/sessions", {"title": f"row {n}"}, status=201)["id"] for n in range(27)]
    api.ok("PATCH", f"/api/sessions/{ids[0]}", {"end": True})
    client = console.logged_in()
    first = client.get("/console/conversations")
    assert first.text.count("<tr class=") == 25
    assert "page 1 of 2" in first.text
    second = client.get("/console/conversations?page=2")
    assert second.text.count("<tr class=") == 2
    assert client.get("/console/conversations?state=ended").text.count("<tr class=") == 1
    assert "Conversations <small>26</small>" in client.get("/console/conversations?state=open").text
    assert "No conversation matches" in client.get("/console/conversations?platform=telegram").text
    assert "No conversation matches" in client.get("/console/conversations?to=2001-01-01").text
    assert client.get("/console/conversations?from=2001-01-01&chat_type=dm").text.count("<tr class=") == 25
    bad = client.get("/console/conversations?from=yesterday")
    assert bad.status == 400
    assert "YYYY-MM-DD" in bad.text


def test_a_malformed_query_shows_the_error_and_its_suggestion(console: Console) -> None:
    client = console.logged_in()
    page = client.get("/console/search?q=%22unbalanced")
    assert 'id="search-error"' in page.text
    assert "Try:" in page.text


def test_rename_end_export_and_delete_go_through_the_operator_port(console: Console) -> None:
    api = console.api
    root, tip = api.compressed("Before")
    client = console.logged_in()
    csrf = client.get(f"/console/c/{root}").csrf()
    renamed = client.post(f"/console/c/{tip}/rename", {"csrf": csrf, "title": "After"})
    assert (renamed.status, renamed.location) == (303, f"/console/c/{tip}")
    assert api.ok("GET", f"/api/sessions/{tip}")["title"] == "After"
    taken = client.post(f"/console/c/{root}/rename", {"csrf": csrf, "title": "After"})
    assert taken.status == 409
    exported = client.get(f"/console/c/{root}/export")
    assert exported.headers["Content-Disposition"].startswith("attachment;")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [line["id"] for line in lines] == [root, tip]
    assert client.post(f"/console/c/{tip}/end", {"csrf": csrf}).status == 303
    assert api.ok("GET", f"/api/sessions/{tip}")["end_reason"] == "operator"
    confirm = client.get(f"/console/c/{tip}/delete")
    assert "Delete for good" in confirm.text
    assert "2 sessions" in confirm.text
    assert client.post(f"/console/c/{tip}/delete", {"csrf": csrf}).status == 400  # not from the confirmation page
    deleted = client.post(f"/console/c/{tip}/delete", {"csrf": csrf, "confirm": tip})
    assert (deleted.status, deleted.location) == (303, "/console/conversations")
    assert api.call("GET", f"/api/sessions/{root}")[0] == 404
    assert api.call("GET", f"/api/sessions/{tip}")[0] == 404
    assert client.get(f"/console/c/{tip}").status == 404


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


def test_after_ten_wrong_keys_a_minute_every_login_waits_until_it_has_passed(console: Console) -> None:
    client = console.client
    for _ in range(MAX_FAILURES):
        form = client.get("/console/login")
        assert client.post("/console/login", {"csrf": form.csrf(), "key": "guess"}).status == 401
    form = client.get("/console/login")
    refused = client.post("/console/login", {"csrf": form.csrf(), "key": ADMIN})
    assert refused.status == 429
    assert "hermes_console" not in client.cookies
    now = [1000.0]
    logins = Logins(clock=lambda: now[0])
    for _ in range(MAX_FAILURES):
        assert not logins.throttled()
        logins.failed()
    assert logins.throttled()
    now[0] += FAILURE_WINDOW_S
    assert not logins.throttled()


def test_a_missing_chromium_skips_the_browser_tests_and_fails_them_where_a_browser_is_required() -> None:
    def nowhere(name: str) -> str | None:
        return None

    absent = Path("/nonexistent/chromium")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        find_chromium({}, nowhere, absent)
    with pytest.raises(pytest.fail.Exception, match="HERMES_REQUIRE_BROWSER=1 but Chromium is not installed"):
        find_chromium({"HERMES_REQUIRE_BROWSER": "1"}, nowhere, absent)
