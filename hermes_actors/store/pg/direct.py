"""A statement sent through libpq itself: half the client CPU of a psycopg cursor's.

``bench/pg_client.py`` measured a one-row statement at about 120 µs of client CPU through a psycopg cursor (its query
object, its prepared-statement manager, its generators and wait loop, its result and row objects) and at about 50 µs
through libpq alone. Every message a shard host or a replica handles runs a handful of such statements, so
:class:`DirectStatements` sends them the way the cursor would, but in fewer steps:

- the same placeholders (``%s``, ``%(name)s``, ``%b``, ``%t``, ``%%``), turned into ``$n`` once per text;
- the same adapters: the connection's own :class:`~psycopg.adapt.Transformer` dumps the parameters and loads the rows;
- prepared after the same five runs as the cursor (``prepare_threshold``), at most :data:`_MAX_PREPARED` per
  connection (the rest run unnamed), under names of their own beside psycopg's;
- errors as psycopg raises them (:func:`psycopg.errors.error_from_result`), so callers still read
  ``connection.broken`` and turn them into :class:`~hermes_actors.errors.StoreError`;
- libpq's blocking calls, which let go of the interpreter lock while they wait for the server.

Statements without parameters can wait (:meth:`DirectStatements.defer`) to ride with the next statement in one
pipeline (a transaction's ``BEGIN`` with its first write: one round trip fewer); any other way of reaching the
server sends them alone first (:meth:`DirectStatements.flush`).

One instance serves one connection, and only while one thread holds that connection (a pooled connection is lent to
one borrower at a time).
"""

from __future__ import annotations

import re
import select
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.errors import error_from_result

__all__ = ["DirectStatements"]

_PREPARE_AFTER = 5  # runs of a statement (text and parameter types) before it is prepared (on the next), as psycopg
_MAX_PREPARED = 200  # prepared statements per connection; beyond them a statement runs unnamed
_MAX_COUNTED = 2000  # statements counted towards preparing; past it the counts start again
_PLACEHOLDER = re.compile(rb"%(?:\(([^)]*)\))?(.)?", re.DOTALL)
_FORMATS = {b"s": PyFormat.AUTO, b"b": PyFormat.BINARY, b"t": PyFormat.TEXT}
_TUPLES = pq.ExecStatus.TUPLES_OK
_DONE = frozenset((pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK, pq.ExecStatus.EMPTY_QUERY))
_SYNC = pq.ExecStatus.PIPELINE_SYNC


class _Query:
    """A statement's text with ``$n`` placeholders, the parameter names they take (``None``: positional) and the
    format each asks for."""

    __slots__ = ("formats", "names", "text")

    def __init__(self, sql: bytes) -> None:
        parts: list[bytes] = []
        names: dict[str, int] = {}
        formats: list[PyFormat] = []
        positional = named = False
        last = 0
        for found in _PLACEHOLDER.finditer(sql):
            parts.append(sql[last : found.start()])
            last = found.end()
            name, kind = found.group(1), found.group(2)
            if kind == b"%" and name is None:
                parts.append(b"%")
                continue
            if kind not in _FORMATS:
                got = found.group(0).decode(errors="replace")
                raise psycopg.ProgrammingError(f"only '%s', '%b', '%t' are allowed as placeholders, got {got!r}")
            if name is None:
                positional = True
                formats.append(_FORMATS[kind])
                parts.append(b"$%d" % len(formats))
                continue
            named = True
            key = name.decode()
            if key not in names:
                formats.append(_FORMATS[kind])
                names[key] = len(formats)
            parts.append(b"$%d" % names[key])
        if positional and named:
            raise psycopg.ProgrammingError("positional and named placeholders cannot be mixed")
        parts.append(sql[last:])
        self.text = b"".join(parts)
        self.names: tuple[str, ...] | None = tuple(names) if named else None
        self.formats = formats

    def ordered(self, params: Sequence[Any] | Mapping[str, Any] | None) -> Sequence[Any]:
        """``params`` in the order of the placeholders, checked against them as psycopg checks them."""
        if self.names is not None:
            if not isinstance(params, Mapping):
                raise psycopg.ProgrammingError("named placeholders require a mapping of parameters")
            try:
                return [params[name] for name in self.names]
            except KeyError as exc:
                raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None
        if params is None or (isinstance(params, Mapping) and not self.formats):
            return ()  # no placeholders: an empty mapping is as good as no parameters, as psycopg takes it
        if isinstance(params, Mapping):
            raise psycopg.ProgrammingError("positional placeholders require a sequence of parameters")
        if len(params) != len(self.formats):
            raise psycopg.ProgrammingError(
                f"the query has {len(self.formats)} placeholders but {len(params)} parameters were passed"
            )
        return params


class DirectStatements:
    """The statements of one psycopg connection, sent through its libpq connection (see the module)."""

    __slots__ = ("_ahead", "_connection", "_counts", "_names", "_pgconn", "_queries", "_transformer", "started")

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._connection = connection
        self._pgconn = connection.pgconn
        self._transformer = Transformer(connection)
        self._queries: dict[bytes, _Query] = {}
        self._names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}  # prepared: (text, types) -> name
        self._counts: dict[tuple[bytes, tuple[int, ...]], int] = {}  # runs of statements not prepared yet
        self._ahead: tuple[bytes, ...] = ()  # deferred statements, sent with the next one (defer)
        self.started: pq.abc.PGresult | None = None  # the last deferred statement's result, once sent

    def defer(self, statements: tuple[bytes, ...]) -> None:
        """Send ``statements`` (each one statement without parameters) with the next statement :meth:`run` sends,
        in one pipeline: one round trip for all of them. The last one's result is then :attr:`started`; the first
        error among them is raised as the next statement's would be. Any other statement (:meth:`simple`, or one
        sent another way after :meth:`flush`) sends them alone first."""
        self._ahead = statements
        self.started = None

    @property
    def deferring(self) -> bool:
        """Whether deferred statements wait to be sent (nothing reached the server since :meth:`defer`)."""
        return bool(self._ahead)

    def cancel(self) -> None:
        """Forget the deferred statements unsent (what they began is not needed: nothing followed them)."""
        self._ahead = ()

    def flush(self) -> None:
        """Send the deferred statements now, alone, one round trip (a statement is about to go another way)."""
        ahead, self._ahead = self._ahead, ()
        if ahead:
            self.started = self._checked(self._pgconn.exec_(b"; ".join(ahead)))

    def rows(self, sql: bytes, params: Sequence[Any] | Mapping[str, Any] | None) -> list[tuple[Any, ...]]:
        """Run one statement; its rows as tuples (none for a statement that returns none)."""
        result = self.run(sql, params)
        if result.status != _TUPLES:
            return []
        transformer = self._transformer
        transformer.set_pgresult(result)
        try:
            return transformer.load_rows(0, result.ntuples, tuple)
        finally:
            transformer.set_pgresult(None)

    def changed(self, sql: bytes, params: Sequence[Any] | Mapping[str, Any] | None) -> int:
        """Run one statement; how many rows it changed (or returned)."""
        result = self.run(sql, params)
        return int(result.command_tuples or 0)

    def run(self, sql: bytes, params: Sequence[Any] | Mapping[str, Any] | None) -> pq.abc.PGresult:
        """Run one statement; its result, or the error psycopg would raise for it. Without ``params`` the text goes
        as it is, unprepared, by the simple protocol (:meth:`simple`), as psycopg sends it."""
        if params is None:
            return self.simple(sql)
        query = self._queries.get(sql)
        if query is None:
            if len(self._queries) >= _MAX_COUNTED:
                self._queries.clear()
            query = self._queries[sql] = _Query(sql)
        values = query.ordered(params)
        text = query.text
        transformer = self._transformer
        dumped: Any  # NULL parameters are None, which libpq takes (the stubs of exec_prepared do not say so)
        if values:
            dumped = transformer.dump_sequence(values, query.formats)
            types = tuple(transformer.types or ())
            formats = transformer.formats
        else:
            dumped, types, formats = None, (), None
        key = (sql, types)
        name = self._names.get(key)
        pgconn = self._pgconn
        if name is None:
            name = self._prepare(key, text)
        if self._ahead:
            return self._pipelined(name, text, dumped, types, formats)
        if name is None:
            result = pgconn.exec_params(text, dumped, types or None, formats)
        else:
            result = pgconn.exec_prepared(name, dumped, formats)
        return self._checked(result)

    def simple(self, sql: bytes) -> pq.abc.PGresult:
        """Run ``sql``, one or more statements without parameters; the last one's result, or the first error."""
        self.flush()
        return self._checked(self._pgconn.exec_(sql))

    def _pipelined(
        self, name: bytes | None, text: bytes, dumped: Any, types: tuple[int, ...], formats: Any
    ) -> pq.abc.PGresult:
        """The deferred statements and this one in one pipeline (one ``Sync``): this one's result."""
        ahead, self._ahead = self._ahead, ()
        pgconn = self._pgconn
        pgconn.enter_pipeline_mode()
        try:
            for statement in ahead:
                pgconn.send_query_params(statement, None)
            if name is None:
                pgconn.send_query_params(text, dumped, types or None, formats)
            else:
                pgconn.send_query_prepared(name, dumped, formats)
            pgconn.pipeline_sync()  # sends everything
            results = self._until_sync()
        finally:
            self._leave_pipeline()
        for result in results[: len(ahead)]:  # a deferred statement's error aborted the rest of the pipeline
            self._checked(result)
        self.started = results[len(ahead) - 1]
        return self._checked(results[len(ahead)])

    def _leave_pipeline(self) -> None:
        """Back to one statement at a time; a connection left with results unread is closed (the pool drops it)."""
        if self._connection.broken:
            return
        try:
            self._pgconn.exit_pipeline_mode()
        except psycopg.Error:
            self._connection.close()

    def _until_sync(self) -> list[pq.abc.PGresult]:
        """The results of a pipeline up to its ``Sync``, waiting for the server with the interpreter lock let go."""
        pgconn = self._pgconn
        results: list[pq.abc.PGresult] = []
        poller: select.poll | None = None
        while True:
            if pgconn.is_busy():
                if poller is None:
                    poller = select.poll()
                    poller.register(pgconn.socket, select.POLLIN)
                poller.poll()
                pgconn.consume_input()  # reads what arrived; a lost connection raises here
                continue
            result = pgconn.get_result()
            if result is None:  # between two statements' results
                if pgconn.status == pq.ConnStatus.BAD:
                    raise psycopg.OperationalError("the connection to the server was lost inside a pipeline")
                continue
            if result.status == _SYNC:
                return results
            results.append(result)

    def _prepare(self, key: tuple[bytes, tuple[int, ...]], text: bytes) -> bytes | None:
        """The name of ``key``'s prepared statement once it has run often enough, prepared now; else ``None``."""
        runs = self._counts.get(key, 0) + 1
        if runs <= _PREPARE_AFTER or len(self._names) >= _MAX_PREPARED:
            if len(self._counts) >= _MAX_COUNTED:
                self._counts.clear()
            self._counts[key] = runs
            return None
        name = b"_hermes_%d" % len(self._names)
        self._checked(self._pgconn.prepare(name, text, key[1] or None))
        self._counts.pop(key, None)
        self._names[key] = name
        return name

    def _checked(self, result: pq.abc.PGresult) -> pq.abc.PGresult:
        status = result.status
        if status in _DONE:
            return result
        if status == pq.ExecStatus.FATAL_ERROR:
            raise error_from_result(result, encoding=self._connection.info.encoding)
        raise psycopg.InterfaceError(f"unexpected result of a statement: {pq.ExecStatus(status).name}")
