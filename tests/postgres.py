"""A throw-away PostgreSQL cluster for the tests: ``initdb`` into a temporary directory, a server listening on a
Unix socket in that directory only (no TCP: ``listen_addresses=''``), one fresh database per test.

The binaries are Debian's (``/usr/lib/postgresql/<version>/bin``) or whatever ``initdb`` is on ``PATH``. PostgreSQL
refuses to run as root: as root the cluster runs as the ``postgres`` system user (Debian's package creates it) via
``runuser``, its directory owned by that user. Each test's database is a copy of a template that already holds the
schema (``CREATE DATABASE ... TEMPLATE``), so a test pays for a file copy, not for the migration. The tests' session
cluster (``spare=True``) makes that copy ahead: while one test runs, the next test's database is copied in the
background, so the next test finds it ready (a fresh copy all the same, made before anyone used it).
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

__all__ = ["REQUIRE_ENV", "Cluster", "bench_cluster", "find_bin_dir", "missing_reason"]

REQUIRE_ENV = "HERMES_REQUIRE_POSTGRES"
_TEMPLATE = "hermes_template"
_SERVER_SETTINGS = {
    "listen_addresses": "''",
    "fsync": "off",  # a throw-away cluster: durability costs time and protects nothing here
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
}


def find_bin_dir() -> Path | None:
    """The directory of PostgreSQL's server binaries (the newest Debian version first), or ``None``."""
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name or 0))
    if versions:
        return Path(versions[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def bench_cluster() -> Cluster:
    """A throw-away cluster for a bench script (the caller stops it); the script exits naming the package to install
    when the server's binaries are missing."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL server binaries are not installed: apt-get install postgresql")
    return Cluster(bin_dir)


def missing_reason() -> str:
    """Why the PostgreSQL tests cannot run here."""
    return (
        "PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql "
        f"(set {REQUIRE_ENV}=1 to make this a failure rather than a skip)"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """A running throw-away cluster; :meth:`create_database` makes a fresh database for one test.

    With ``spare``, once :meth:`prepare_template` ran, one database copied from the template is kept ready: each
    :meth:`create_database` (not ``empty``) takes it and starts copying the next one in a background thread.
    """

    def __init__(self, bin_dir: Path, *, spare: bool = False) -> None:
        self._bin = bin_dir
        self._copier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-spare") if spare else None
        self._spare: Future[str] | None = None
        self._as_root = os.geteuid() == 0
        self.directory = Path(tempfile.mkdtemp(prefix="hermes-pg-"))
        self.port = _free_port()
        self._names = itertools.count(1)
        if self._as_root:
            account = pwd.getpwnam("postgres")
            os.chown(self.directory, account.pw_uid, account.pw_gid)
        self.data = self.directory / "data"
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-N")
        options = " ".join(f"-c {k}={v}" for k, v in _SERVER_SETTINGS.items())
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.directory / "server.log"),
            "-w",
            "-o",
            f"{options} -k {self.directory} -p {self.port}",
            "start",
        )

    def _run(self, program: str, *args: str) -> None:
        command = [str(self._bin / program), *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def dsn(self, database: str = "postgres") -> str:
        """The connection string of ``database`` on this cluster (the Unix socket, user ``postgres``)."""
        return f"host={self.directory} port={self.port} user=postgres dbname={database}"

    def admin(self, sql: str) -> None:
        """Run one statement on the maintenance database, outside any transaction."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as connection:
            connection.execute(sql.encode())

    def prepare_template(self) -> None:
        """Create the template database holding the current schema."""
        from hermes_actors.store.pg import PostgresStore

        self.admin(f"CREATE DATABASE {_TEMPLATE}")
        PostgresStore.open(self.dsn(_TEMPLATE), pool_size=1).close()
        if self._copier is not None:
            self._spare = self._copier.submit(self._copy, _TEMPLATE)

    def create_database(self, *, empty: bool = False) -> str:
        """A fresh database (with the schema, unless ``empty``); its name. Never handed out before: a spare copied
        ahead is used once, and a spare whose copy failed is replaced by a copy made now."""
        template = "template0" if empty else _TEMPLATE
        if empty or self._copier is None or self._spare is None:
            return self._copy(template)
        spare, self._spare = self._spare, None
        try:
            name = spare.result()
        except Exception:  # the copy failed (say, its connection was cut): copy again, now
            name = self._copy(template)
        self._spare = self._copier.submit(self._copy, _TEMPLATE)
        return name

    def _copy(self, template: str) -> str:
        name = f"test_{os.getpid()}_{next(self._names)}"
        self.admin(f"CREATE DATABASE {name} TEMPLATE {template}")
        return name

    def drop_database(self, name: str) -> None:
        """Drop a test's database, closing whatever still holds it."""
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        if self._copier is not None:
            self._copier.shutdown(wait=True, cancel_futures=True)
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
