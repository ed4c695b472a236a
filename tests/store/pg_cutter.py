"""A proxy between psycopg and the test PostgreSQL that can cut a connection right after the server took its
``COMMIT``: the server commits, the client sees its connection drop without an answer, and cannot know which.

It listens on a Unix socket of its own (``host=<directory> port=<port>``) and relays every connection to the real
server's socket. :meth:`CommitCutter.arm` makes the next ``COMMIT`` sent as a simple query the one cut: it is
relayed, the server's answer is waited for and dropped, and both sides are closed.
"""

from __future__ import annotations

import os
import select
import socket
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["CommitCutter"]


class CommitCutter:
    """The proxy (a context manager); ``dsn(database)`` connects through it."""

    def __init__(self, server_directory: Path, port: int) -> None:
        self._server = str(server_directory / f".s.PGSQL.{port}")
        self.port = port
        self.directory = Path(tempfile.mkdtemp(prefix="hermes-cut-"))
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.directory / f".s.PGSQL.{port}"))
        self._listener.listen(16)
        self._armed = threading.Event()
        self.cut = threading.Event()  # set once a COMMIT was cut
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def dsn(self, database: str) -> str:
        return f"host={self.directory} port={self.port} user=postgres dbname={database}"

    def arm(self) -> None:
        """Cut the next ``COMMIT`` after the server took it."""
        self.cut.clear()
        self._armed.set()

    def __enter__(self) -> CommitCutter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        self._listener.close()
        for entry in self.directory.iterdir():
            entry.unlink()
        os.rmdir(self.directory)

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(self._server)
            threading.Thread(target=self._relay, args=(client, server), daemon=True).start()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        pending = b""  # client bytes not yet relayed as whole messages (after the startup message)
        started = False
        try:
            while True:
                readable, _, _ = select.select([client, server], [], [])
                if server in readable:
                    data = server.recv(65536)
                    if not data:
                        return
                    client.sendall(data)
                if client in readable:
                    data = client.recv(65536)
                    if not data:
                        return
                    pending += data
                    pending, started, cut = self._forward(pending, started, server)
                    if cut:
                        return
        except OSError:
            return
        finally:
            client.close()
            server.close()

    def _forward(self, pending: bytes, started: bool, server: socket.socket) -> tuple[bytes, bool, bool]:
        """Relay the whole messages in ``pending``; the rest, whether the startup message has gone, and whether
        this connection's ``COMMIT`` was the one to cut."""
        while True:
            if not started:
                if len(pending) < 4:
                    return pending, started, False
                size = int.from_bytes(pending[:4], "big")
                if len(pending) < size:
                    return pending, started, False
                server.sendall(pending[:size])
                pending, started = pending[size:], True
                continue
            if len(pending) < 5:
                return pending, started, False
            size = 1 + int.from_bytes(pending[1:5], "big")
            if len(pending) < size:
                return pending, started, False
            message, pending = pending[:size], pending[size:]
            server.sendall(message)
            if message[:1] == b"Q" and message[5:11] == b"COMMIT" and self._armed.is_set():
                self._armed.clear()
                time.sleep(0.3)  # the server commits; its answer is never relayed
                self.cut.set()
                return b"", started, True
