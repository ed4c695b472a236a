"""The web console in a real headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright's Python
package without a downloaded browser), against a real ``hermesd`` on a temporary home.

The tests assert on the DOM; the screenshots they save into their temporary directory (``*.png``) are for people.
Without Chromium they skip, naming the package to install, unless ``HERMES_REQUIRE_BROWSER=1`` (CI), where they
fail instead.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest

from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import SECRET, Daemon, start_daemon
from tests.platforms.console_client import PNG
from tests.platforms.test_api_operator import PADDING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Dialog, Page

pytestmark = pytest.mark.slow

ADMIN = "hk-console-browser-admin-key-0123456789"
HOSTILE_TITLE = "<script>window.__pwned=2</script>\u202eevil"
HOSTILE_TEXT = (
    '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=3"> '
    "[click me](javascript:window.__pwned=4) javascript:alert(1) \u202etxt.exe"
)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
CONFIG = f"""
daemon:
  drain_timeout_s: 10
  admin_key: {ADMIN}
runtime:
  protected_recent_messages: 2
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
"""


def find_chromium(
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    default: Path = Path("/usr/bin/chromium"),
) -> str:
    """The system Chromium, or the test's skip naming the package (a failure when ``HERMES_REQUIRE_BROWSER=1``)."""
    found = which("chromium") or (str(default) if default.exists() else None)
    problem = None
    if found is None:
        problem = "Chromium is not installed: apt-get install chromium (Debian's package, /usr/bin/chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "Playwright's Python package is missing: pip install -e '.[test]'"
    if problem is not None:
        if environ.get("HERMES_REQUIRE_BROWSER") == "1":
            pytest.fail(f"HERMES_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(problem)
    assert found is not None
    return found


class Gateway:
    """A running ``hermesd`` and HTTP calls to its API server."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.url = daemon.api

    def call(self, method: str, path: str, body: Any = None, *, admin: bool = True) -> Any:
        headers = {"Content-Type": "application/json"}
        if admin:
            headers["Authorization"] = f"Bearer {ADMIN}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def session(self, title: str | None, *texts: str) -> str:
        session_id = str(self.call("POST", "/api/sessions", {"title": title} if title else {})["id"])
        self.talk(session_id, *texts)
        return session_id

    def talk(self, session_id: str, *texts: str) -> list[Any]:
        return [self.call("POST", f"/api/sessions/{session_id}/chat", {"message": text}) for text in texts]


class Scripted:
    """The conversations the browser looks at."""

    def __init__(self, gateway: Gateway) -> None:
        self.weather = gateway.session("Weather desk", "你好，今天天气很好", 'tool lookup_weather {"city": "北京"}')
        self.root = gateway.session("压缩的对话", "hello", "second" + PADDING, "third" + PADDING, "fourth" + PADDING)
        (reply,) = gateway.talk(self.root, "/compress")
        self.tip = str(reply["session_id"])
        assert self.tip != self.root
        self.hostile = gateway.session(HOSTILE_TITLE, HOSTILE_TEXT)
        url = "data:image/png;base64," + base64.b64encode(PNG).decode()
        content = [{"type": "text", "text": "a picture for you"}, {"type": "image_url", "image_url": {"url": url}}]
        request = urllib.request.Request(
            gateway.url + "/v1/chat/completions",
            data=json.dumps(
                {"model": "hermes-agent", "user": "picture-user", "messages": [{"role": "user", "content": content}]}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            self.picture = str(response.headers["X-Hermes-Session-Id"])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    find_chromium()
    home = tmp_path_factory.mktemp("console") / "h"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG)
    process = start_daemon(home)
    try:
        yield Gateway(Daemon(home, process))
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)


@pytest.fixture(scope="module")
def scripted(gateway: Gateway) -> Scripted:
    return Scripted(gateway)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = find_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def dialogs() -> list[str]:
    """The messages of every dialog (alert, confirm, prompt) a page of the test opened."""
    return []


@pytest.fixture
def page(browser: Browser, gateway: Gateway, dialogs: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 900}, base_url=gateway.url)
    opened = context.new_page()
    opened.set_default_timeout(10_000)

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", on_dialog)
    try:
        yield opened
    finally:
        context.close()


def _submit(page: Page, selector: str) -> None:
    """Click ``selector`` and wait for the page it leads to."""
    with page.expect_navigation():
        page.click(selector)


def _log_in(page: Page, target: str = "/console", shot: Path | None = None) -> None:
    page.goto(target)
    assert "/console/login" in page.url
    if shot is not None:
        page.screenshot(path=shot, full_page=True)
    page.fill("#key", ADMIN)
    _submit(page, "#login-form button[type=submit]")
    assert "/console/login" not in page.url, page.content()[:2000]


def test_an_operator_finds_reads_renames_and_watches_conversations_in_chromium(
    page: Page, dialogs: list[str], gateway: Gateway, scripted: Scripted, tmp_path: Path
) -> None:
    _log_in(page, shot=tmp_path / "login.png")
    assert page.url.endswith("/console/conversations")
    rows = page.locator("#conversations tbody tr")
    assert rows.count() == 4
    assert page.locator("#conversations").get_by_text("压缩的对话").count() == 1
    page.screenshot(path=tmp_path / "conversations.png", full_page=True)

    # Search by a two-character Chinese query, then follow the hit to its message.
    _submit(page, "nav >> text=Search")
    page.fill("input[name=q]", "天气")
    _submit(page, "#search-form button[type=submit]")
    hits = page.locator("#hits .hit")
    assert hits.count() == 1
    assert hits.first.locator("mark").first.inner_text() == "天气"
    page.screenshot(path=tmp_path / "search.png", full_page=True)
    href = hits.first.locator("a.title").get_attribute("href")
    assert href is not None
    assert href.startswith(f"/console/c/{scripted.weather}#m")
    with page.expect_navigation():
        hits.first.locator("a.title").click()
    anchor = href.split("#", 1)[1]
    assert page.evaluate("location.hash") == f"#{anchor}"
    target = page.locator(f"#{anchor}")
    assert target.is_visible()
    assert "天气" in target.inner_text()
    assert page.evaluate(f"document.querySelector('#{anchor}').matches(':target')")

    # Expand the tool call.
    call = page.locator("details.tool-call").first
    assert call.get_attribute("open") is None
    assert not call.locator("pre").is_visible()
    call.locator("summary").click()
    assert call.get_attribute("open") is not None
    assert "北京" in call.locator("pre").inner_text()
    page.screenshot(path=tmp_path / "transcript.png", full_page=True)

    # Rename it through the form.
    page.fill("#rename-form input[name=title]", "天气 desk (renamed)")
    _submit(page, "#rename-form button[type=submit]")
    assert page.locator("#conversation-title").inner_text() == "天气 desk (renamed)"
    assert gateway.call("GET", f"/api/sessions/{scripted.weather}")["title"] == "天气 desk (renamed)"

    # The compressed lineage: two segments, the summary shown as one.
    page.goto(f"/console/c/{scripted.root}")
    assert page.locator("section.segment").count() == 2
    assert page.locator("article.summary .role").inner_text().lower() == "compression summary"
    assert page.locator("details.carried").count() == 1
    page.screenshot(path=tmp_path / "lineage.png", full_page=True)

    # The image, inline from the media store.
    page.goto(f"/console/c/{scripted.picture}")
    image = page.locator("figure.file img")
    image.wait_for()
    # Page scripts are held to the console's CSP (no eval), so the waits poll from here rather than in the page.
    poll_until(lambda: image.evaluate("img => img.naturalWidth") == 48, what="the image to load")
    page.screenshot(path=tmp_path / "image.png", full_page=True)

    # The live page refreshes itself after a new API message.
    page.goto("/console/live")
    before = int(page.locator("[data-field=turns]").inner_text())
    assert {"api_server", "webhook"} <= set(page.locator("#platforms td[data-label=Platform]").all_inner_texts())
    gateway.talk(scripted.tip, "one more message")
    turns = page.locator("[data-field=turns]")
    poll_until(lambda: int(turns.inner_text()) > before, interval=0.1, what="the live page to count the new turn")
    page.screenshot(path=tmp_path / "live.png", full_page=True)

    # Delete the picture's conversation, through its confirmation page.
    page.goto(f"/console/c/{scripted.picture}")
    _submit(page, "#delete-link")
    assert page.locator("#delete-form button.danger").is_visible()
    page.screenshot(path=tmp_path / "delete.png", full_page=True)
    _submit(page, "#delete-form button.danger")
    assert page.url.endswith("/console/conversations")
    assert page.locator("#conversations tbody tr").count() == 3
    assert page.locator(f"a[href='/console/c/{scripted.picture}']").count() == 0
    assert dialogs == []


def test_hostile_titles_and_messages_run_nothing_in_chromium(
    page: Page, dialogs: list[str], scripted: Scripted, tmp_path: Path
) -> None:
    _log_in(page, f"/console/c/{scripted.hostile}")
    assert page.locator("#conversation-title").inner_text().startswith("<script>window.__pwned=2</script>")
    assert "\u202e" not in page.locator("#conversation-title").inner_text()
    text = page.locator("article.role-user .text").inner_text()
    assert "[U+202E]txt.exe" in text
    assert "<script>window.__pwned=1</script>" in text
    assert page.locator("a[href^='javascript:' i]").count() == 0
    page.goto("/console/conversations")
    page.goto(f"/console/search?q={quote('pwned')}")
    page.goto(f"/console/c/{scripted.hostile}")
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert dialogs == []
    page.screenshot(path=tmp_path / "hostile.png", full_page=True)


def test_the_console_fits_a_phone_screen(
    browser: Browser, gateway: Gateway, scripted: Scripted, tmp_path: Path
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, base_url=gateway.url, is_mobile=True)
    try:
        phone = context.new_page()
        _log_in(phone)
        for name, path in [
            ("phone-conversations", "/console/conversations"),
            ("phone-transcript", f"/console/c/{scripted.weather}"),
        ]:
            phone.goto(path)
            assert phone.evaluate("document.documentElement.scrollWidth") <= 390
            phone.screenshot(path=tmp_path / f"{name}.png", full_page=True)
    finally:
        context.close()


def test_hermesctl_console_prints_the_running_daemons_console_url(gateway: Gateway) -> None:
    from click.testing import CliRunner

    from hermes_actors.cli.hermesctl import main as hermesctl

    result = CliRunner().invoke(hermesctl, ["console", "--home", str(gateway.daemon.home)])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{gateway.url}/console\n"
    assert "daemon.admin_key in config.yaml" in result.stderr
    assert "not running" not in result.stderr
