"""Attachments as turn-scoped inputs: the media store, the turn's stand-ins and rows, limits, deletion and export.

Files go through the real media store under ``tmp_path / "media"`` (beside the test database), turns through a real
gateway, and the 30 MB upload through the real API server on loopback.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import apsw
import msgspec
import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.errors import ConfigError
from hermes_actors.media import MediaConfig, MediaStore, format_size, stand_in
from hermes_actors.messages import Attachment, AttachmentKind, InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import SCHEMA_VERSION, EndReason, NewMessage, Role, Store, open_connection
from hermes_actors.store.attachments import media_dir_for
from hermes_actors.store.export import decode_export_line, encode_export_line, iter_exports
from hermes_actors.store.migrations import migrate, schema_version
from hermes_actors.store.prune import PruneFilter, prune_sessions
from hermes_actors.testing import FakeClock, FakePlatform
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
MB = 1024 * 1024
DAY = 86_400.0


@pytest.fixture
def media(db_path: Path) -> MediaStore:
    """A media store where a gateway or store on ``db_path`` keeps its files."""
    directory = media_dir_for(db_path)
    assert directory is not None
    return MediaStore(directory)


@pytest.fixture
def gateway(db_path: Path) -> Iterator[tuple[Gateway, FakePlatform]]:
    fake = FakePlatform()
    running = Gateway(db_path, senders=[fake], media=MediaConfig(max_bytes=1024, excerpt_bytes=16))
    fake.attach(running)
    try:
        yield running, fake
    finally:
        running.stop(timeout=10)


def inbound(text: str, *attachments: Attachment, chat_id: str = "chat-1", message_id: str = "m1") -> InboundMessage:
    source = SessionSource(platform="fake", chat_type="dm", chat_id=chat_id, user_id="user-1")
    return InboundMessage(source=source, text=text, message_id=message_id, attachments=attachments)


def files_under(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


# -- the media store ----------------------------------------------------------------------------------------------


def test_the_same_bytes_are_written_once_named_by_their_sha256(media: MediaStore) -> None:
    first = media.save(PNG, name="cat.png")
    again = media.save(PNG, name="same-cat.PNG", mime_type="image/png")
    digest = hashlib.sha256(PNG).hexdigest()
    assert first.path == again.path == str(media.directory / digest[:2] / f"{digest}.png")
    assert (first.kind, first.mime_type, first.size, first.sha256, first.error) == (
        "image",
        "image/png",
        72,
        digest,
        None,
    )
    assert files_under(media.directory) == [Path(str(first.path))]
    assert Path(str(first.path)).read_bytes() == PNG
    assert not list(media.directory.rglob(".incoming-*"))  # no temporary file left behind


def test_limits_refuse_an_attachment_without_writing_it(tmp_path: Path) -> None:
    media = MediaStore(tmp_path / "media", MediaConfig(max_bytes=100, allowed_kinds=("image", "document")))
    big = media.save(bytes(101), name="big.png")
    assert (big.error, big.path, big.size) == ("it is 101 bytes, over the 100 bytes limit", None, 101)
    voice = media.save(b"ogg", name="voice.ogg", mime_type="audio/ogg")
    assert voice.error == "audio files are not accepted here (media.allowed_kinds: image, document)"
    # Base64 over the limit is refused from its length, before it is decoded; bad base64 says so.
    encoded = media.save_base64(base64.b64encode(bytes(300)).decode(), mime_type="image/png")
    assert encoded.error == "it is 300 bytes, over the 100 bytes limit"
    assert media.save_base64("not base64!", mime_type="image/png").error == "it is not valid base64"
    assert media.save_base64(base64.b64encode(b"tiny").decode(), mime_type="image/png").size == 4
    assert (format_size(30 * MB), format_size(1536)) == ("30 MB", "1.5 KB")
    assert len(files_under(tmp_path / "media")) == 1  # only the small image that was accepted


def test_a_text_document_gets_its_first_bytes_as_its_stand_in(tmp_path: Path) -> None:
    media = MediaStore(tmp_path / "media", MediaConfig(excerpt_bytes=12))
    whole = media.save(b"a,b\n1,2\n", name="data.csv")
    assert whole.description == "Its text:\na,b\n1,2\n"
    cut = media.save("ünïcödéé goes on".encode(), name="notes.txt")
    assert cut.description == "Its first 12 bytes:\nünïcödé"  # a character is never cut in half
    assert media.save(b"\x00\x01binary", name="x.txt").description is None
    assert stand_in(whole) == (
        f"[attached document data.csv (text/csv, 8 bytes), saved at {whole.path}]\nIts text:\na,b\n1,2\n"
    )


def test_a_configured_describe_step_describes_saved_files_and_its_failure_is_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    media = MediaStore(tmp_path / "media", MediaConfig(describe="tests.runtime.media_steps:describe_by_size"))
    described = media.save(PNG, name="cat.png")
    assert described.description == "A image of 72 bytes named cat.png."
    assert stand_in(described).endswith("\nA image of 72 bytes named cat.png.")
    failing = MediaStore(tmp_path / "media", MediaConfig(describe="tests.runtime.media_steps:describe_failing"))
    with caplog.at_level(logging.ERROR):
        saved = failing.save(PNG, name="cat.png")
    assert (saved.path, saved.description) == (described.path, None)
    assert "the describe step failed" in caplog.text


@pytest.mark.parametrize(
    ("fields", "path", "fragment"),
    [
        ({"max_bytes": 0}, "media.max_bytes", "positive number of bytes"),
        ({"allowed_kinds": ["image", "pdf"]}, "media.allowed_kinds", "'pdf' is not a kind"),
        ({"excerpt_bytes": -1}, "media.excerpt_bytes", "0 (no text excerpts)"),
        ({"describe": "no colon"}, "media.describe", "module:function"),
    ],
)
def test_a_bad_media_setting_names_its_field(fields: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as error:
        msgspec.convert(fields, MediaConfig)
    assert error.value.path == path
    assert fragment in str(error.value)


@pytest.mark.parametrize(
    ("reference", "fragment"),
    [
        ("tests.runtime.no_such_module:describe", "cannot load"),
        ("tests.runtime.media_steps:missing", "cannot load"),
        ("tests.runtime.media_steps:NOT_A_FUNCTION", "is not a function"),
    ],
)
def test_a_describe_step_that_cannot_be_loaded_stops_the_gateway_from_starting(
    db_path: Path, reference: str, fragment: str
) -> None:
    with pytest.raises(ConfigError, match=fragment) as error:
        Gateway(db_path, media=MediaConfig(describe=reference))
    assert error.value.path == "media.describe"
    assert not db_path.exists()  # refused before anything was opened


# -- turns --------------------------------------------------------------------------------------------------------


def test_a_turn_stores_the_stand_in_and_commits_the_attachment_rows_with_the_message(
    gateway: tuple[Gateway, FakePlatform],
) -> None:
    running, fake = gateway
    image = running.media.save(PNG, name="cat.png")
    notes = running.media.save(b"first line\nsecond line\n", name="notes.txt")
    running.accept(inbound("what are these?", image, notes))
    reply = fake.pop()
    expected = (
        "what are these?\n"
        f"[attached image cat.png (image/png, 72 bytes), saved at {image.path}]\n"
        f"[attached document notes.txt (text/plain, 23 bytes), saved at {notes.path}]\n"
        "Its first 16 bytes:\nfirst line\nsecon"
    )
    assert reply.text == "echo: " + expected
    assert reply.session_id is not None
    with running.read() as store:
        user, answer = store.load_transcript(reply.session_id)
        rows = store.attachments.for_session(reply.session_id)
    assert (user.role, user.content, answer.content) == ("user", expected, "echo: " + expected)
    assert [(r.message_id, r.kind, r.name, r.size, r.error) for r in rows] == [
        (user.id, "image", "cat.png", 72, None),
        (user.id, "document", "notes.txt", 23, None),
    ]
    digest = hashlib.sha256(PNG).hexdigest()
    assert rows[0].path == f"{digest[:2]}/{digest}.png"  # relative to the media directory
    assert rows[0].sha256 == digest


def test_merged_messages_keep_their_own_attachment_rows(gateway: tuple[Gateway, FakePlatform]) -> None:
    running, fake = gateway
    first = running.media.save(PNG, name="one.png")
    second = running.media.save(PNG[::-1], name="two.png")
    turns = [inbound(f"image {n}", image, message_id=f"m{n}") for n, image in enumerate((first, second), 1)]
    for message in turns:
        running.accept(message)
    assert running.wait_idle()
    session = fake.sent[0].session_id
    assert session is not None
    with running.read() as store:
        users = [m for m in store.load_transcript(session) if m.role == "user"]
        rows = store.attachments.for_session(session)
    assert [(r.message_id, r.name) for r in rows] == [(users[0].id, "one.png"), (users[1].id, "two.png")]


def test_an_oversized_attachment_gets_a_clear_reply_and_the_text_still_runs(
    gateway: tuple[Gateway, FakePlatform],
) -> None:
    running, fake = gateway
    too_big = running.media.save(bytes(4096), name="scan.pdf")
    running.accept(inbound("please summarise", too_big))
    reply = fake.pop()
    assert reply.text == (
        "I could not read scan.pdf: it is 4 KB, over the 1 KB limit.\n\n"
        "echo: please summarise\n[document scan.pdf was not read: it is 4 KB, over the 1 KB limit]"
    )
    assert reply.session_id is not None
    with running.read() as store:
        (row,) = store.attachments.for_session(reply.session_id)
        assert store.load_transcript(reply.session_id)[-1].content == (
            "echo: please summarise\n[document scan.pdf was not read: it is 4 KB, over the 1 KB limit]"
        )
    assert (row.path, row.size, row.error) == (None, 4096, "it is 4 KB, over the 1 KB limit")
    assert files_under(running.media.directory) == []


# -- the 30 MB upload --------------------------------------------------------------------------------------------


def post(server: ApiServer, body: bytes) -> tuple[int, Any, str | None]:
    connection = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=30)
    try:
        connection.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read()), response.headers.get(SESSION_HEADER)
    finally:
        connection.close()


def chat_body(text: str, *image_urls: str | bytes) -> bytes:
    """A chat-completions body with one user message: ``text`` and an image part per URL (bytes kept as bytes)."""
    parts = [
        b'{"type":"image_url","image_url":{"url":"' + (url if isinstance(url, bytes) else url.encode()) + b'"}}'
        for url in image_urls
    ]
    text_part = json.dumps({"type": "text", "text": text}).encode()
    return b'{"messages":[{"role":"user","content":[' + b",".join([text_part, *parts]) + b"]}]}"


@pytest.fixture
def api(db_path: Path) -> Iterator[tuple[ApiServer, Gateway]]:
    """The API server with a 64 MB body limit in front of a gateway with the default 20 MB media limit."""
    with ExitStack() as stack:
        server = ApiServer(ApiServerConfig(port=0, max_body_bytes=64 * MB), environ={})
        running = Gateway(db_path, config=RuntimeConfig(), senders=server.senders())
        stack.callback(running.stop, 10)
        server.start(GatewayInbox(running))
        stack.callback(server.stop, 10)
        yield server, running


@pytest.mark.slow
def test_a_30_mb_upload_over_the_limit_gets_a_clear_reply_and_the_text_still_runs(
    api: tuple[ApiServer, Gateway],
) -> None:
    server, running = api
    # One real 30 MB image as a base64 data URL (40 MB of JSON) through the API server; nothing is decoded or saved.
    encoded = b"data:image/png;base64," + base64.b64encode(bytes(30 * MB))
    status, body, session = post(server, chat_body("what is in this picture?", encoded))
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == (
        "I could not read the image: it is 30 MB, over the 20 MB limit.\n\n"
        "echo: what is in this picture?\n[image was not read: it is 30 MB, over the 20 MB limit]"
    )
    assert session is not None
    with running.read() as store:
        (row,) = store.attachments.for_session(session)
    assert (row.kind, row.mime_type, row.size, row.path) == ("image", "image/png", 30 * MB, None)
    assert files_under(running.media.directory) == []


def test_api_images_are_saved_from_data_urls_and_http_urls_are_recorded_without_fetching(
    api: tuple[ApiServer, Gateway],
) -> None:
    server, running = api
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    status, body, session = post(server, chat_body("", data_url, "https://images.example.com/cat.jpg"))
    assert status == 200, body
    digest = hashlib.sha256(PNG).hexdigest()
    saved = running.media.directory / digest[:2] / f"{digest}.png"
    assert saved.read_bytes() == PNG
    assert body["choices"][0]["message"]["content"] == (
        f"echo: [attached image (image/png, 72 bytes), saved at {saved}]\n"
        "[attached image (unknown type), at https://images.example.com/cat.jpg (not downloaded)]"
    )
    assert session is not None
    with running.read() as store:
        rows = store.attachments.for_session(session)
    assert [(r.path, r.source_url) for r in rows] == [
        (f"{digest[:2]}/{digest}.png", None),
        (None, "https://images.example.com/cat.jpg"),
    ]


# -- deletion, prune and export ----------------------------------------------------------------------------------


def _session_with(store: Store, session_id: str, *attachments: Attachment, ended_at: float | None = None) -> int:
    store.create_session("fake", session_id=session_id, started_at=0.0)
    with store.transaction():
        (message_id, _) = store.append_messages(
            session_id,
            [
                NewMessage(role=Role.USER, content=f"files for {session_id}"),
                NewMessage(role=Role.ASSISTANT, content="ok"),
            ],
        )
        for attachment in attachments:
            store.attachments.add(message_id, attachment)
    if ended_at is not None:
        store.end_session(session_id, EndReason.IDLE, at=ended_at)
    return message_id


def test_deleting_a_session_removes_its_media_files_but_keeps_one_another_session_names(
    store: Store, media: MediaStore
) -> None:
    shared = media.save(PNG, name="shared.png")
    own = media.save(b"only mine", name="mine.txt")
    refused = media.refuse("it is too big", kind="video", name="film.mp4")
    _session_with(store, "s-delete", shared, own, refused)
    _session_with(store, "s-keep", shared)
    assert len(files_under(media.directory)) == 2
    assert store.delete_session("s-delete")
    assert files_under(media.directory) == [Path(str(shared.path))]
    assert not Path(str(own.path)).parent.exists()  # its emptied shard directory went too
    assert store._connection.execute("SELECT count(*) FROM attachments").get == 1
    assert store.delete_session("s-keep")
    assert files_under(media.directory) == []


def test_a_deletion_inside_an_open_transaction_leaves_the_files_until_it_has_committed(
    store: Store, media: MediaStore
) -> None:
    own = media.save(b"only mine", name="mine.txt")
    assert own.sha256 is not None
    _session_with(store, "s1", own)
    with store.transaction():
        assert store.delete_session("s1")
        assert Path(str(own.path)).exists()  # the deletion could still roll back
    assert Path(str(own.path)).exists()
    assert store.attachments.remove_unreferenced([f"{own.sha256[:2]}/{own.sha256}.txt"]) == 1
    assert files_under(media.directory) == []


def test_only_files_inside_the_media_directory_are_ever_removed(store: Store, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(PNG)
    attachment = Attachment(kind=AttachmentKind.IMAGE, path=str(outside), name="elsewhere.png")
    _session_with(store, "s1", attachment)
    assert store.attachments.for_session("s1")[0].path == str(outside)  # kept absolute: not in the media directory
    assert store.delete_session("s1")
    assert outside.read_bytes() == PNG
    assert store.attachments.remove_unreferenced(["../state.db", "/etc/passwd", ""]) == 0


def test_pruning_removes_the_media_files_of_pruned_sessions_only(
    store: Store, media: MediaStore, clock: FakeClock
) -> None:
    shared = media.save(PNG, name="shared.png")
    old = media.save(b"old notes", name="old.txt")
    recent = media.save(b"recent notes", name="recent.txt")
    now = clock()
    _session_with(store, "s-old", shared, old, ended_at=now - 100 * DAY)
    _session_with(store, "s-older", shared, ended_at=now - 200 * DAY)
    _session_with(store, "s-recent", shared, recent, ended_at=now - DAY)
    result = prune_sessions(store, PruneFilter(older_than_days=90), now=now, batch_size=1)
    assert (result.sessions_deleted, result.files_deleted) == (2, 1)
    assert files_under(media.directory) == sorted([Path(str(shared.path)), Path(str(recent.path))])
    result = prune_sessions(store, PruneFilter(older_than_days=0), now=now)
    assert (result.sessions_deleted, result.files_deleted) == (1, 2)
    assert files_under(media.directory) == []


def test_export_lists_each_message_s_attachments(store: Store, media: MediaStore) -> None:
    image = media.save(PNG, name="cat.png")
    refused = media.refuse("it is 30 MB, over the 20 MB limit", kind="image", name="big.png", size=30 * MB)
    message_id = _session_with(store, "s-files", image, refused)
    _session_with(store, "s-plain")
    exports = {e.session.id: e for e in iter_exports(store)}
    files = exports["s-files"].attachments
    assert [(a.message_id, a.name, a.size, a.error) for a in files] == [
        (message_id, "cat.png", 72, None),
        (message_id, "big.png", 30 * MB, "it is 30 MB, over the 20 MB limit"),
    ]
    line = encode_export_line(exports["s-files"])
    # In the line each message lists its own files (without the row ids, which a store of its own reassigns).
    messages = json.loads(line)["messages"]
    assert [len(m.get("attachments", [])) for m in messages] == [2, 0]
    assert messages[0]["attachments"][0]["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert [a.name for a in decode_export_line(line).messages[0].attachments] == ["cat.png", "big.png"]
    assert all("attachments" not in m for m in json.loads(encode_export_line(exports["s-plain"]))["messages"])


# -- migration ----------------------------------------------------------------------------------------------------


def _shape(connection: apsw.Connection) -> dict[str, object]:
    shape: dict[str, object] = {}
    for kind, name, sql in connection.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
    ):
        if kind == "table":
            shape[f"table {name}"] = connection.execute(f"SELECT * FROM pragma_table_xinfo('{name}')").fetchall()
            shape[f"keys {name}"] = connection.execute(f"SELECT * FROM pragma_foreign_key_list('{name}')").fetchall()
        elif kind == "index":
            shape[f"index {name}"] = (connection.execute(f"SELECT * FROM pragma_index_xinfo('{name}')").fetchall(), sql)
        else:
            shape[f"{kind} {name}"] = True
    return shape


def test_a_version_3_database_gains_the_attachments_table_and_keeps_its_rows(tmp_path: Path) -> None:
    with Store.open(tmp_path / "old.db") as old:
        old.create_session("cli", session_id="s1")
        old.append_messages("s1", [NewMessage(role=Role.USER, content="before attachments")])
        # What version 3 was: the same schema without the attachments table (and versions 5's, 7's, 8's and 9's
        # additions).
        old._connection.execute("DROP TABLE attachments")
        old._connection.execute("ALTER TABLE leases DROP COLUMN epoch")
        old._connection.execute("ALTER TABLE inbox DROP COLUMN kind")
        old._connection.execute("ALTER TABLE inbox DROP COLUMN owner")
        old._connection.execute("DROP TABLE api_responses")
        old._connection.execute("ALTER TABLE sessions DROP COLUMN agent")
        old._connection.execute("PRAGMA user_version = 3")
    connection = open_connection(tmp_path / "old.db")
    assert migrate(connection) == 3
    assert schema_version(connection) == SCHEMA_VERSION == 14
    fresh = open_connection(tmp_path / "fresh.db")
    migrate(fresh)
    assert _shape(connection) == _shape(fresh)
    assert connection.execute("SELECT content FROM messages").fetchall() == [("before attachments",)]
    connection.execute("INSERT INTO attachments (message_id, kind, created_at) VALUES (1, 'image', 0)")
    connection.execute("DELETE FROM messages")  # the rows go with their message
    assert connection.execute("SELECT count(*) FROM attachments").get == 0
    connection.close()
    fresh.close()


def test_the_media_section_of_config_yaml_reaches_the_gateway(db_path: Path) -> None:
    settings = decode_settings({"media": {"max_bytes": 2048, "allowed_kinds": ["image"], "excerpt_bytes": 0}})
    assert settings.media == MediaConfig(max_bytes=2048, allowed_kinds=("image",), excerpt_bytes=0)
    assert decode_settings(None).media == MediaConfig()
    with pytest.raises(ConfigError) as error:
        decode_settings({"media": {"max_size": 1}})
    assert error.value.path == "media.max_size"
    with Gateway(db_path, media=settings.media) as running:
        assert running.media.config.max_bytes == 2048
        assert running.media.directory == db_path.parent.resolve() / "media"
