"""Hostile text in the console's pages, and the media route's confinement, without a browser (the browser's own
check is in :mod:`tests.platforms.test_console_browser`)."""

from __future__ import annotations

import os
from pathlib import Path

from platforms.api_server.console.actions import media_file
from platforms.api_server.console.text import ago, marked, rich
from tests.platforms.console_client import PNG, Console, console

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
