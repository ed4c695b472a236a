"""A gateway in a process of its own, behind a platform made of two pipes and a file, for the crash tests.

Run ``python -m tests.runtime.crash_worker --db PATH --log PATH``. Each stdin line is one inbound message,
``{"chat": ..., "user": ..., "id": ..., "text": ...}``; the worker commits it through ``Gateway.accept`` and only
then acknowledges it on stdout with ``ACK <id>`` (``DUP <id>`` for a redelivery it had already committed). Every
reply the gateway delivers is appended to the log as one JSON line and fsync'ed before the send returns, then
announced as ``SENT <reply_to>`` so a test can kill the worker between a delivery and its ``mark_sent``; a line left
half-written by a kill is cut at the next start, as a platform drops a request cut mid-way. The worker
prints ``READY`` once the gateway has started (recovery included) and, at stdin EOF, waits for the gateway to be
idle, stops it, prints ``DONE`` and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import msgspec

from hermes_actors.config import RuntimeConfig
from hermes_actors.messages import OutboundMessage
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakePlatform

__all__ = ["PLATFORM", "Delivered", "LogSender", "Posted", "discard_torn_tail", "main"]

PLATFORM = "crashfake"


class Posted(msgspec.Struct, frozen=True, kw_only=True):
    """One inbound message as the test's platform writes it to the worker's stdin."""

    chat: str
    user: str
    id: str
    text: str


class Delivered(msgspec.Struct, frozen=True, kw_only=True):
    """One reply as the platform received it: a line of the delivery log."""

    reply_to: str | None
    session_id: str | None
    chat_id: str | None
    text: str
    possible_duplicate: bool


class _Stdout:
    """Whole lines to stdout from the reading thread and the outbox thread, flushed one by one."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()


class LogSender:
    """The ``ReplySender`` of the fake platform: a reply counts as received once its log line is on disk."""

    platform = PLATFORM
    idempotent_sends = False

    def __init__(self, log: Path, stdout: _Stdout) -> None:
        self._fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._stdout = stdout
        self._encoder = msgspec.json.Encoder()
        self._lock = threading.Lock()
        self._chats_lock = threading.Lock()
        self._chats: set[str | None] = set()  # chats with a send in progress
        self._count = 0

    def send(self, message: OutboundMessage) -> str | None:
        """Append ``message`` to the log in one write and fsync it, then announce it on stdout."""
        line = Delivered(
            reply_to=message.reply_to,
            session_id=message.session_id,
            chat_id=message.chat_id,
            text=message.text,
            possible_duplicate=message.possible_duplicate,
        )
        data = self._encoder.encode(line) + b"\n"
        with self._chats_lock:
            if message.chat_id in self._chats:
                # The runtime promises one send at a time per chat; say so loudly if it breaks that.
                print(f"crash_worker: concurrent send of the reply to {message.reply_to}", file=sys.stderr, flush=True)
            self._chats.add(message.chat_id)
        self._lock.acquire()  # one write to the log at a time (sends to other chats run at once)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"short write to the delivery log: {written} of {len(data)} bytes")
            os.fsync(self._fd)
            self._count += 1
            count = self._count
        finally:
            self._lock.release()
            with self._chats_lock:
                self._chats.discard(message.chat_id)
        self._stdout.line(f"SENT {message.reply_to}")
        return f"{PLATFORM}-{os.getpid()}-{count}"

    def close(self) -> None:
        """Close the log (after the gateway has stopped)."""
        os.close(self._fd)


def discard_torn_tail(path: Path) -> bytes:
    """Cut the half-written last line a killed worker may leave (its platform never got it); return what was cut.

    A ``write`` of a line that crosses a page boundary can stop half-way when SIGKILL arrives.
    """
    if not path.exists():
        return b""
    with path.open("r+b") as log:
        data = log.read()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):
            log.truncate(keep)
    return data[keep:]


def _serve(gateway: Gateway, stdin: TextIO, stdout: _Stdout) -> None:
    platform = FakePlatform(PLATFORM)
    decoder = msgspec.json.Decoder(Posted)
    for raw in stdin:
        if not raw.strip():
            continue
        posted = decoder.decode(raw)
        inbound = platform.message(posted.text, chat_id=posted.chat, user_id=posted.user, message_id=posted.id)
        result = gateway.accept(inbound)
        stdout.line(f"{'DUP' if result.duplicate else 'ACK'} {posted.id}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the worker until stdin ends; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--db", type=Path, required=True, help="the gateway's database file")
    parser.add_argument("--log", type=Path, required=True, help="the delivery log the fake platform appends to")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(threadName)s %(message)s")
    stdout = _Stdout(sys.stdout)
    torn = discard_torn_tail(args.log)
    if torn:
        print(f"crash_worker: discarded a torn delivery line: {torn!r}", file=sys.stderr)
    config = RuntimeConfig(lease_wait_s=1.0, outbox_retry_base_s=0.05, outbox_retry_max_s=1.0, ask_timeout_s=10.0)
    sender = LogSender(args.log, stdout)
    try:
        gateway = Gateway(args.db, config=config, senders=[sender], tick_interval_s=0.5)
        try:
            stdout.line("READY")
            _serve(gateway, sys.stdin, stdout)
            if not gateway.wait_idle(30.0):
                print("crash_worker: the gateway did not become idle within 30 s", file=sys.stderr)
                return 1
        finally:
            gateway.stop()
    finally:
        sender.close()
    stdout.line("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
