"""Where a side's statements go, for ``bench/cluster_cost.py --profile``: the SQL trace files the processes wrote
(``HERMES_SQL_TRACE``, one ``sql-<pid>.trace`` per process, see :class:`hermes_actors.store.sql.TraceFile`) and,
on the cluster, PostgreSQL's own view: its log of every statement a client sent (``log_statement = all``), each
line one round trip, by the client's ``application_name`` (the bench gives each process group its own through
``PGAPPNAME``), and its counters (``pg_stat_statements``, ``pg_stat_database``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cost_procs import Group

__all__ = [
    "LOG_LINE_PREFIX",
    "Statements",
    "backend_waits",
    "pg_counters",
    "pg_statements",
    "read_pg_log",
    "read_traces",
    "waits_between",
]

_TRANSACTIONS = {"BEGIN": "transactions", "SAVEPOINT": "savepoints"}
LOG_LINE_PREFIX = "%n|%a|"  # epoch seconds with milliseconds, the client's application_name
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_NUMBER = re.compile(r"(?<![$\w])\d+(?:\.\d+)?\b")
_SENT = re.compile(r"^(\d+\.\d+)\|([^|]*)\|LOG:  (?:statement|execute [^:]*): (.*)$")


@dataclass
class Statements:
    """Statements of one group of processes (or of the whole database) over a window: how often each ran and its
    seconds; ``kinds``: counts that are not statements (transactions, savepoints, PostgreSQL's own counters)."""

    runs: dict[str, tuple[int, float]] = field(default_factory=dict)
    kinds: dict[str, float] = field(default_factory=dict)
    plans: dict[str, tuple[int, float]] = field(default_factory=dict)  # pg_stat_statements: plans made, seconds

    def add(self, sql: str, seconds: float, calls: int = 1) -> None:
        kind = _TRANSACTIONS.get(sql)
        if kind is not None:
            self.kinds[kind] = self.kinds.get(kind, 0) + calls
            return
        count, total = self.runs.get(sql, (0, 0.0))
        self.runs[sql] = (count + calls, total + seconds)

    @property
    def count(self) -> int:
        return sum(count for count, _ in self.runs.values())

    def top(self, n: int) -> list[tuple[str, int, float]]:
        """The ``n`` statements run most often: text, count, total seconds."""
        ranked = sorted(self.runs.items(), key=lambda item: (-item[1][0], -item[1][1]))
        return [(sql, count, total) for sql, (count, total) in ranked[:n]]


def read_traces(directory: Path, groups: dict[str, Group], since: float, until: float) -> dict[str, Statements]:
    """The statements each group's processes ran between wall-clock times ``since`` and ``until``."""
    found: dict[str, Statements] = {}
    for path in sorted(directory.glob("sql-*.trace")):
        pid = int(path.stem.removeprefix("sql-"))
        name = next((n for n, group in groups.items() if pid in group.pids), "other")
        statements = found.setdefault(name, Statements())
        texts: dict[str, str] = {}
        for line in path.read_text(errors="replace").splitlines():
            first, number, rest = line.split("\t", 2)
            if first == "S":
                texts[number] = rest
            elif since <= float(first) <= until:
                statements.add(texts[number], float(rest))
    return found


def pg_counters(sql: Any) -> dict[str, float]:
    """PostgreSQL's counters of the ``hermes`` database so far: transactions committed and rolled back, and rows
    returned, fetched and written (they lag up to a second: backends report at most once a second)."""
    sql("SELECT pg_stat_clear_snapshot()")
    ((commits, rollbacks, returned, fetched, written),) = sql(
        "SELECT xact_commit, xact_rollback, tup_returned, tup_fetched, tup_inserted + tup_updated + tup_deleted "
        "FROM pg_stat_database WHERE datname = 'hermes'"
    )
    return {
        "xacts": float(commits + rollbacks),
        "rollbacks": float(rollbacks),
        "tuples_returned": float(returned),
        "tuples_fetched": float(fetched),
        "tuples_written": float(written),
    }


def pg_statements(sql: Any) -> Statements:
    """Every statement ``pg_stat_statements`` counted in the ``hermes`` database since its last reset (normalized:
    parameters as ``$1``), ``BEGIN``, ``COMMIT`` and the other utility statements included, and how often each was
    planned (``track_planning``: a prepared statement on a generic plan is not)."""
    rows = sql(
        "SELECT s.query, s.calls, s.total_exec_time, s.plans, s.total_plan_time FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'hermes'"
    )
    found = Statements()
    for query, calls, milliseconds, plans, plan_ms in rows:
        text = " ".join(str(query).split())
        if "pg_stat_statements" in text:
            continue
        found.runs[text] = (int(calls), float(milliseconds) / 1000)
        found.plans[text] = (int(plans), float(plan_ms) / 1000)
    return found


def read_pg_log(path: Path, groups: dict[str, str], since: float, until: float) -> dict[str, Statements]:
    """The statements PostgreSQL logged between ``since`` and ``until`` (one ``statement:`` or ``execute`` line
    each: a simple-protocol list of statements is one, each statement of a pipeline one of its own), by group:
    ``groups`` maps an ``application_name`` to its group (others are left out). One that opens a transaction
    (``BEGIN...``) also counts as one of its ``transactions``."""
    found: dict[str, Statements] = {}
    with path.open(errors="replace") as log:
        for line in log:
            sent = _SENT.match(line.rstrip("\n"))
            if sent is None or not since <= float(sent[1]) <= until:
                continue
            if sent[2] not in groups:
                continue  # the bench's own statements
            statements = found.setdefault(groups[sent[2]], Statements())
            text = _NUMBER.sub("N", _LITERAL.sub("'?'", " ".join(sent[3].split())))
            statements.runs[text] = (statements.runs.get(text, (0, 0.0))[0] + 1, 0.0)
            if text.upper().startswith("BEGIN"):
                statements.kinds["transactions"] = statements.kinds.get("transactions", 0) + 1
    return found


def backend_waits(sql: Any) -> dict[int, tuple[str, int]]:
    """Each backend of the ``hermes`` database: its client's ``application_name`` and how often it has waited so
    far (its voluntary context switches: a backend blocks once per round trip its client makes, waiting for the
    next request, a pipeline's statements arriving together; a LISTEN connection's backend also wakes for each
    notification it delivers)."""
    found = {}
    for pid, application in sql("SELECT pid, application_name FROM pg_stat_activity WHERE datname = 'hermes'"):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        switches = next(line for line in status.splitlines() if line.startswith("voluntary_ctxt_switches"))
        found[int(pid)] = (str(application), int(switches.split()[1]))
    return found


def waits_between(
    before: dict[int, tuple[str, int]], after: dict[int, tuple[str, int]], groups: dict[str, str]
) -> dict[str, int]:
    """The waits of each group's backends from ``before`` to ``after`` (a backend connected in between counts
    from zero; one that ended in between is not counted; backends of no group are left out)."""
    found: dict[str, int] = {}
    for pid, (application, switches) in after.items():
        if application not in groups:
            continue
        then = before.get(pid)
        name = groups[application]
        found[name] = found.get(name, 0) + switches - (then[1] if then and then[0] == application else 0)
    return found
