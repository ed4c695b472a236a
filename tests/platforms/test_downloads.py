"""The shared bounded download against a real loopback server: limits, errors, redirects and the media store."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest
from aiohttp import web

from hermes_actors.media import MediaConfig, MediaStore
from hermes_actors.messages import Attachment, AttachmentKind
from platforms.support.downloads import DownloadFailed, Fetched, download, fetch
from platforms.support.http_host import HttpHost

T = TypeVar("T")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


@dataclass
class Files:
    """A file server on loopback that records who asked for what, with which Authorization."""

    host: HttpHost
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"{self.host.url}{path}"


def serve(files_seen: list[tuple[str, str | None]], release: threading.Event, other: str = "") -> web.Application:
    async def record(request: web.Request) -> None:
        files_seen.append((request.path, request.headers.get("Authorization")))

    async def png(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(body=PNG, headers={"Content-Type": "image/png; charset=binary"})

    async def octets(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(body=b"plain words\n", headers={"Content-Type": "application/octet-stream"})

    async def chunked(request: web.Request) -> web.StreamResponse:
        await record(request)
        response = web.StreamResponse(headers={"Content-Type": "video/mp4"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for _ in range(8):
                await response.write(bytes(512))
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client stopped reading at its limit
        return response

    async def bomb(request: web.Request) -> web.Response:
        await record(request)
        body = gzip.compress(bytes(64 * 1024))  # a few hundred bytes that decode to 64 KB
        return web.Response(body=body, headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"})

    async def refused(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"code": 99991663, "msg": "Invalid access token" + "!" * 10_000}, status=400)

    async def stall(request: web.Request) -> web.Response:
        await record(request)
        await asyncio.to_thread(release.wait, 10)
        return web.Response(body=b"late")

    async def moved(request: web.Request) -> web.Response:
        await record(request)
        raise web.HTTPFound(other + "/png")

    app = web.Application()
    for path, handler in (
        ("/png", png),
        ("/octets", octets),
        ("/chunked", chunked),
        ("/bomb", bomb),
        ("/refused", refused),
        ("/stall", stall),
        ("/moved", moved),
    ):
        app.router.add_get(path, handler)
    return app


@pytest.fixture
def files() -> Iterator[Files]:
    seen: list[tuple[str, str | None]] = []
    release = threading.Event()
    host = HttpHost(serve(seen, release), name="files")
    host.start()
    yield Files(host=host, requests=seen, release=release)
    release.set()
    host.stop()


@pytest.fixture
def elsewhere(files: Files) -> Iterator[Files]:
    """A second server (another origin) whose /moved redirects to the first."""
    seen: list[tuple[str, str | None]] = []
    release = threading.Event()
    host = HttpHost(serve(seen, release, other=files.host.url), name="elsewhere")
    host.start()
    yield Files(host=host, requests=seen, release=release)
    release.set()
    host.stop()


def run(call: Callable[[aiohttp.ClientSession], Awaitable[T]]) -> T:
    async def main() -> T:
        async with aiohttp.ClientSession() as session:
            return await call(session)

    return asyncio.run(main())


def failure(call: Callable[[aiohttp.ClientSession], Awaitable[object]]) -> DownloadFailed:
    with pytest.raises(DownloadFailed) as raised:
        run(call)
    return raised.value


# -- fetch --------------------------------------------------------------------------------------------------------


def test_fetch_reads_the_body_and_names_its_media_type_without_parameters(files: Files) -> None:
    fetched = run(lambda s: fetch(s, files.url("/png"), limit=1024, headers={"Authorization": "Bearer t"}))
    assert (fetched.data, fetched.content_type, fetched.headers["content-length"]) == (PNG, "image/png", "208")
    assert files.requests == [("/png", "Bearer t")]
    plain = run(lambda s: fetch(s, files.url("/octets"), limit=1024))
    assert plain.content_type is None  # octet-stream says nothing: the caller's type or the file name decides


def test_a_declared_length_over_the_limit_is_refused_before_the_body_is_read(files: Files) -> None:
    failed = failure(lambda s: fetch(s, files.url("/png"), limit=100))
    assert (failed.problem, failed.size, failed.too_large, failed.status) == (
        "it is 208 bytes, over the 100 bytes limit",
        208,
        True,
        None,
    )


def test_a_body_without_a_length_is_cut_off_once_it_passes_the_limit(files: Files) -> None:
    failed = failure(lambda s: fetch(s, files.url("/chunked"), limit=1024))
    assert (failed.problem, failed.size, failed.too_large) == ("it is over the 1 KB limit", None, True)
    assert len(run(lambda s: fetch(s, files.url("/chunked"), limit=4096)).data) == 4096


def test_the_limit_counts_decoded_bytes_so_a_compressed_bomb_is_refused(files: Files) -> None:
    failed = failure(lambda s: fetch(s, files.url("/bomb"), limit=8 * 1024))
    assert failed.problem == "it is over the 8 KB limit"


def test_an_error_answer_keeps_its_status_and_the_start_of_its_body(files: Files) -> None:
    failed = failure(lambda s: fetch(s, files.url("/refused"), limit=1024))
    assert (failed.problem, failed.status, failed.too_large) == ("its download failed (HTTP 400)", 400, False)
    assert failed.body.startswith(b'{"code": 99991663')
    assert len(failed.body) == 4096  # bounded: an error page is not read whole
    assert "answered HTTP 400" in failed.detail


def test_unreachable_and_stalled_servers_are_failures_that_say_which(files: Files) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens once the probe is closed
    unreachable = failure(lambda s: fetch(s, f"http://127.0.0.1:{closed}/x?token=secret", limit=10))
    assert unreachable.problem == "the server holding it could not be reached"
    assert "secret" not in unreachable.detail
    stalled = failure(lambda s: fetch(s, files.url("/stall"), limit=10, timeout_s=0.2))
    assert stalled.problem == "its download timed out"


def test_a_redirect_to_another_origin_does_not_carry_the_token(files: Files, elsewhere: Files) -> None:
    fetched = run(lambda s: fetch(s, elsewhere.url("/moved"), limit=1024, headers={"Authorization": "Bearer t"}))
    assert fetched.data == PNG
    assert elsewhere.requests == [("/moved", "Bearer t")]
    assert files.requests == [("/png", None)]


# -- download into the media store --------------------------------------------------------------------------------


@pytest.fixture
def media(tmp_path: Path) -> MediaStore:
    return MediaStore(tmp_path / "media", MediaConfig(max_bytes=1024, allowed_kinds=("image", "document")))


def test_download_saves_the_file_once_named_by_its_sha256_and_keeps_no_url(files: Files, media: MediaStore) -> None:
    saved = run(lambda s: download(media, s, files.url("/png"), kind="image", name="plot.png", size=len(PNG)))
    digest = hashlib.sha256(PNG).hexdigest()
    assert saved == Attachment(
        kind=AttachmentKind.IMAGE,
        mime_type="image/png",
        name="plot.png",
        size=len(PNG),
        path=str(media.directory / digest[:2] / f"{digest}.png"),
        sha256=digest,
    )
    assert Path(saved.path or "").read_bytes() == PNG
    text = run(lambda s: download(media, s, files.url("/octets"), kind="document", name="notes.txt"))
    assert (text.mime_type, text.description) == ("text/plain", "Its text:\nplain words\n")  # guessed from the name


def test_download_refuses_what_the_limits_forbid_without_asking(files: Files, media: MediaStore) -> None:
    too_big = run(lambda s: download(media, s, files.url("/png"), kind="image", name="big.png", size=4096))
    not_allowed = run(lambda s: download(media, s, files.url("/png"), kind="video", name="clip.mp4"))
    assert too_big.error == "it is 4 KB, over the 1 KB limit"
    assert not_allowed.error == "video files are not accepted here (media.allowed_kinds: image, document)"
    assert files.requests == []
    assert not media.directory.exists()


def test_download_turns_every_failure_into_a_refused_record(files: Files, media: MediaStore) -> None:
    def sign_in_page(fetched: Fetched) -> str | None:
        return "the server sent a sign-in page" if fetched.content_type == "image/png" else None

    refused = run(lambda s: download(media, s, files.url("/refused"), kind="image", name="a.png"))
    cut_off = run(lambda s: download(media, s, files.url("/chunked"), kind="document", name="b.bin", size=10))
    checked = run(lambda s: download(media, s, files.url("/png"), kind="image", name="c.png", check=sign_in_page))
    assert [(a.error, a.size, a.path) for a in (refused, cut_off, checked)] == [
        ("its download failed (HTTP 400)", None, None),
        ("it is over the 1 KB limit", None, None),  # not the 10 bytes the platform claimed
        ("the server sent a sign-in page", len(PNG), None),
    ]
    assert not media.directory.exists()
