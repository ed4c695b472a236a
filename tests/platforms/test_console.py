"""The web console (``/console``) without a browser: a real gateway and API server on 127.0.0.1, requests made the
way a browser makes them (cookies, form posts with an Origin)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.api_server.config import ConsoleConfig
from platforms.api_server.console.logins import BROWSER_COOKIE
from platforms.api_server.console.throttle import FAILURE_WINDOW_S, MAX_FAILURES, Throttle, guesser_of
from platforms.api_server.guards import CONSOLE_CSP, MEDIA_CSP
from tests.platforms.console_client import PNG, Answer, Console, ConsoleClient, console, image_turn, open_console
from tests.platforms.test_api_operator import ADMIN, KEY
from tests.platforms.test_console_browser import find_chromium

__all__ = ["console"]  # the fixture


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
    assert answer.headers["Content-Security-Policy"] == CONSOLE_CSP
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
    picture = image_turn(api, "a picture for you")
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


def test_after_ten_wrong_keys_a_minute_from_one_address_a_new_browser_there_waits_until_it_has_passed(
    console: Console,
) -> None:
    client = console.client
    for _ in range(MAX_FAILURES):
        form = client.get("/console/login")
        assert client.post("/console/login", {"csrf": form.csrf(), "key": "guess"}).status == 401
    form = client.get("/console/login")
    refused = client.post("/console/login", {"csrf": form.csrf(), "key": ADMIN})
    assert refused.status == 429
    assert "hermes_console" not in client.cookies
    now = [1000.0]
    throttle = Throttle(clock=lambda: now[0])
    for _ in range(MAX_FAILURES):
        assert not throttle.throttled("client 203.0.113.7")
        throttle.failed("client 203.0.113.7")
    assert throttle.throttled("client 203.0.113.7")
    now[0] += FAILURE_WINDOW_S
    assert not throttle.throttled("client 203.0.113.7")


# -- the login throttle is per address -------------------------------------------------------------------------

PROXIED = ApiServerConfig(port=0, key=KEY, trusted_proxies=("127.0.0.1",))
ATTACKER, ADMINS = "203.0.113.7", "198.51.100.2"


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Console]:
    """A console behind a reverse proxy on 127.0.0.1 (trusted): each client's address comes in X-Forwarded-For."""
    with open_console(tmp_path, PROXIED) as running:
        yield running


def _try_key(client: ConsoleClient, key: str) -> int:
    form = client.get("/console/login")
    return client.post("/console/login", {"csrf": form.csrf(), "key": key}).status


def test_wrong_keys_from_anywhere_else_never_keep_the_admin_out(proxied: Console) -> None:
    attacker = proxied.fresh(headers={"X-Forwarded-For": ATTACKER})
    assert [_try_key(attacker, "guess") for _ in range(MAX_FAILURES + 2)] == [401] * MAX_FAILURES + [429, 429]
    admin = proxied.fresh(headers={"X-Forwarded-For": ADMINS})
    assert _try_key(admin, ADMIN) == 303
    assert admin.get("/console/conversations").status == 200
    # the attacker's budget stays spent: the admin's login gave it nothing back
    assert _try_key(attacker, "guess") == 429


def test_a_browser_that_logged_in_before_gets_in_while_its_address_is_throttled(proxied: Console) -> None:
    shared = {"X-Forwarded-For": ATTACKER}  # the admin and the attacker behind one NAT
    admin = proxied.fresh(headers=shared)
    assert _try_key(admin, ADMIN) == 303
    assert BROWSER_COOKIE in admin.cookies
    admin.post("/console/logout", {"csrf": admin.get("/console/conversations").csrf()})
    attacker = proxied.fresh(headers=shared)
    assert [_try_key(attacker, "guess") for _ in range(MAX_FAILURES + 1)][-1] == 429
    assert _try_key(attacker, ADMIN) == 429  # a new browser there learns nothing, the right key included
    assert _try_key(admin, ADMIN) == 303  # the admin's browser has a budget of its own
    forged = proxied.fresh(headers=shared)
    forged.cookies[BROWSER_COOKIE] = "someone." + "A" * 43  # a made-up one counts as no browser cookie
    assert _try_key(forged, "guess") == 429


def test_without_a_trusted_proxy_x_forwarded_for_changes_nothing(console: Console) -> None:
    statuses = [
        _try_key(console.fresh(headers={"X-Forwarded-For": f"203.0.113.{n}"}), "guess") for n in range(MAX_FAILURES + 1)
    ]
    assert statuses == [401] * MAX_FAILURES + [429]


def test_the_throttle_counts_an_ipv6_client_by_its_slash_64_and_keeps_a_bounded_table() -> None:
    assert guesser_of("2001:db8:1:2:aaaa::1") == guesser_of("2001:db8:1:2:ffff::9") == "client 2001:db8:1:2::/64"
    assert guesser_of("2001:db8:1:3::1") != guesser_of("2001:db8:1:2::1")
    assert guesser_of("::ffff:203.0.113.7") == guesser_of("203.0.113.7") == "client 203.0.113.7"
    assert guesser_of(None) == "client unknown"
    now = [0.0]
    throttle = Throttle(clock=lambda: now[0], capacity=100)
    for n in range(MAX_FAILURES):
        throttle.failed(guesser_of(f"2001:db8:1:2::{n:x}"))
    assert throttle.throttled(guesser_of("2001:db8:1:2::abcd"))
    for n in range(10_000):  # an attacker with many addresses
        now[0] += 0.001
        throttle.failed(guesser_of(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"))
        assert len(throttle) <= 100
    for _ in range(MAX_FAILURES):
        throttle.failed("client 192.0.2.1")
    assert throttle.throttled("client 192.0.2.1")  # the newest guessers are the ones kept


# -- behind a reverse proxy ------------------------------------------------------------------------------------

PUBLIC = "https://chat.example.org"
THROUGH_TLS = {"X-Forwarded-For": ADMINS, "X-Forwarded-Proto": "https", "X-Forwarded-Host": "chat.example.org"}


def _secure(answer: Answer, name: str) -> bool:
    (line,) = [c for c in answer.cookies() if c.startswith(name + "=")]
    return "secure" in [part.strip().lower() for part in line.split(";")]


def test_behind_a_trusted_tls_proxy_the_cookies_are_secure_and_the_public_origins_forms_pass(proxied: Console) -> None:
    session = proxied.api.ok("POST", "/api/sessions", {"title": "Before"}, status=201)["id"]
    client = proxied.fresh(headers=THROUGH_TLS, origin=PUBLIC)
    assert _secure(client.get("/console/login"), "hermes_console_login")
    answer = client.log_in(ADMIN)
    assert _secure(answer, "hermes_console")
    assert _secure(answer, BROWSER_COOKIE)
    csrf = client.get(f"/console/c/{session}").csrf()
    renamed = client.post(f"/console/c/{session}/rename", {"csrf": csrf, "title": "After"})
    assert (renamed.status, renamed.location) == (303, f"/console/c/{session}")
    assert proxied.api.ok("GET", f"/api/sessions/{session}")["title"] == "After"


def test_the_standard_forwarded_header_is_read_as_well(proxied: Console) -> None:
    forwarded = {"Forwarded": 'for="[2001:db8::7]:4711";proto=https;host=chat.example.org'}
    client = proxied.fresh(headers=forwarded, origin=PUBLIC)
    assert _secure(client.log_in(ADMIN), "hermes_console")


def test_forwarded_headers_from_a_peer_that_is_not_a_trusted_proxy_are_ignored(console: Console) -> None:
    client = console.fresh(headers=THROUGH_TLS)  # posts from http://127.0.0.1:<port>, as the server sees it
    assert not _secure(client.get("/console/login"), "hermes_console_login")
    assert not _secure(client.log_in(ADMIN), "hermes_console")
    spoofed = console.fresh(headers=THROUGH_TLS, origin=PUBLIC)
    form = spoofed.get("/console/login")
    assert spoofed.post("/console/login", {"csrf": form.csrf(), "key": ADMIN}).status == 403  # a foreign origin


def test_secure_cookie_always_marks_the_cookies_secure_over_plain_http(tmp_path: Path) -> None:
    config = ApiServerConfig(port=0, key=KEY, console=ConsoleConfig(secure_cookie="always"))
    with open_console(tmp_path, config) as running:
        assert _secure(running.client.get("/console/login"), "hermes_console_login")
        answer = running.client.log_in(ADMIN)
        assert _secure(answer, "hermes_console")
        assert _secure(answer, BROWSER_COOKIE)


def test_a_missing_chromium_skips_the_browser_tests_and_fails_them_where_a_browser_is_required() -> None:
    def nowhere(name: str) -> str | None:
        return None

    absent = Path("/nonexistent/chromium")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        find_chromium({}, nowhere, absent)
    with pytest.raises(pytest.fail.Exception, match="HERMES_REQUIRE_BROWSER=1 but Chromium is not installed"):
        find_chromium({"HERMES_REQUIRE_BROWSER": "1"}, nowhere, absent)


def test_a_document_is_shown_by_path_and_size_and_a_long_message_is_folded(console: Console) -> None:
    gateway = console.api.gateway
    document = gateway.media.save(b"%PDF-1.4 a small report\n" * 40, mime_type="application/pdf", name="report.pdf")
    source = SessionSource(platform="api_server", chat_id="files", user_id="filer")
    inbox = GatewayInbox(gateway, admin_key=ADMIN)
    inbox.accept(
        InboundMessage(source=source, text="the report " + "x" * 2000, message_id="m1", attachments=(document,))
    )
    assert gateway.wait_idle(30)
    client = console.logged_in()
    listing = client.get("/console/conversations?user=filer")
    (session,) = re.findall(r'<a class="title" href="/console/c/([^"]+)"', listing.text)
    page = client.get(f"/console/c/{session}")
    assert "<img" not in page.text
    assert document.path is not None
    relative = Path(document.path).relative_to(gateway.media.directory).as_posix()
    assert f"<code>{relative}</code> · 960 B · application/pdf" in page.text
    assert '<details class="long">' in page.text
    served = client.get(f"/console/media/{relative}")
    assert (served.status, served.headers["Content-Disposition"]) == (200, "attachment")


def test_the_live_page_lists_the_sessions_that_ended_last(console: Console) -> None:
    api = console.api
    first, second = (api.ok("POST", "/api/sessions", {"title": name}, status=201)["id"] for name in ("one", "two"))
    api.ok("PATCH", f"/api/sessions/{first}", {"end": True})
    api.ok("PATCH", f"/api/sessions/{second}", {"end": True})
    client = console.logged_in()
    ends = client.get("/console/live.json").json()["recent_ends"]
    assert [(e["id"], e["title"]) for e in ends[:2]] == [(second, "two"), (first, "one")]  # newest end first
    assert ends[0]["reason"]
    assert ends[0]["at"] >= ends[1]["at"]
    page = client.get("/console/live").text
    assert 'id="ends"' in page
    assert "two" in page
