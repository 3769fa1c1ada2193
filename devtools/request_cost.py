"""What one request costs, counted, not timed: the database statements it sends, its round trips
to the server, and the Python function calls the app makes for it.

Counts are the same on every run of the same code (a timing is not), so a budget of counts
catches a regression on a loaded machine too (tests/test_cost_budget.py), and the stage profile
(bench/stages.py) reads the same requests.

- statements: the SQL statements the driver runs, transaction control (BEGIN, COMMIT, ROLLBACK)
  and the pool's pings (PostgreSQL's empty `;`, SQLite's `SELECT 1`) left out, on every
  connection of the app's engine (every thread: the export's read-ahead too), whether
  SQLAlchemy sent them or a raw DBAPI cursor did. PostgreSQL: each Bind (a statement of the
  extended protocol, prepared or not) and each simple Query in libpq's own trace of the
  connection (PQtrace, psycopg's `pgconn.trace`); SQLite: its trace callback.
- round trips (PostgreSQL): one per `ReadyForQuery` the server sends in that trace: every
  exchange the client waits for, including psycopg's implicit BEGIN, the ROLLBACK of a session's
  close and a pool ping. SQLite runs in the process: it has none.
- calls: cProfile's count of Python (and builtin) function calls in the app's WSGI call and
  its body's iteration (the test client's own work around it left out), on this thread only.
"""

from __future__ import annotations

import cProfile
import pstats
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from flask import Flask
from sqlalchemy import event

# Transaction control: counted as round trips where it is one, never as a statement.
_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"})
_SQLITE_PING = "SELECT 1"  # SQLAlchemy's do_ping on SQLite; the app itself never sends it


@dataclass(frozen=True)
class Cost:
    statements: int
    round_trips: int | None  # None: the engine has no server (SQLite)
    calls: int


class CostMeter:
    """Installed once on an app (before its first request): counts what each request costs.

    `measure(send)` runs `send()` (a test client request) and returns its Cost. The engine's pool
    is emptied on install, so every connection it opens afterwards is traced."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        engine = app.extensions["engine"]
        self._lock = threading.Lock()
        self._statements = 0
        self._profile: cProfile.Profile | None = None
        self._server = engine.dialect.name == "postgresql"
        # Open while the meter is (close() closes it): every connection writes its trace there.
        self._trace = tempfile.TemporaryFile() if self._server else None  # noqa: SIM115
        event.listen(engine, "connect", self._traced if self._server else self._sqlite_traced)
        engine.dispose()  # every connection from now on is opened here, so traced
        inner = app.wsgi_app
        app.wsgi_app = self._profiled(inner)  # type: ignore[method-assign]  # as Flask's docs wrap it

    def close(self) -> None:
        if self._trace is not None:
            self.app.extensions["engine"].dispose()  # untraced as they close
            self._trace.close()

    def _sqlite_traced(self, dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.set_trace_callback(self._sqlite_statement)

    def _sqlite_statement(self, sql: str) -> None:
        if sql != _SQLITE_PING and sql.split(None, 1)[0].upper() not in _CONTROL:
            with self._lock:
                self._statements += 1

    def _traced(self, dbapi_conn: Any, _record: Any) -> None:
        from psycopg import pq

        assert self._trace is not None
        dbapi_conn.pgconn.trace(self._trace.fileno())
        dbapi_conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)

    def _server_counts(self) -> tuple[int, int]:
        """(statements, round trips) in the trace so far."""
        assert self._trace is not None
        self._trace.seek(0)
        statements = trips = 0
        for line in self._trace.read().decode(errors="replace").splitlines():
            parts = line.split("\t", 3)
            if len(parts) < 3:
                continue  # a message's text that went on past a line break
            direction, _length, message, *rest = parts
            if direction == "B" and message == "ReadyForQuery":
                trips += 1
            elif direction == "F" and message == "Bind":
                statements += 1
            elif direction == "F" and message == "Query":
                sql = rest[0].strip().strip('"').strip()
                statements += sql.split(None, 1)[0].upper() not in _CONTROL if sql.strip(";") else 0
        return statements, trips

    def _profiled(self, inner: Any) -> Any:
        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            profile = self._profile
            if profile is None:
                return inner(environ, start_response)  # type: ignore[no-any-return]  # WSGI apps are typed Any
            profile.enable()
            try:
                body = inner(environ, start_response)
                try:
                    chunks = list(body)
                finally:
                    if hasattr(body, "close"):
                        body.close()
            finally:
                profile.disable()
            return chunks

        return app

    @contextmanager
    def _counting(self) -> Iterator[dict[str, int]]:
        counted: dict[str, int] = {}
        statements, trips = self._server_counts() if self._server else (self._statements, 0)
        self._profile = cProfile.Profile()
        try:
            yield counted
        finally:
            profile, self._profile = self._profile, None
        counted["calls"] = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]  # pstats sets it
        if self._server:
            after, after_trips = self._server_counts()
            counted["statements"], counted["round_trips"] = after - statements, after_trips - trips
        else:
            counted["statements"] = self._statements - statements

    def measure(self, send: Any) -> Cost:
        """What `send()` (one request) cost; its response must be read inside it."""
        with self._counting() as counted:
            send()
        return Cost(counted["statements"], counted.get("round_trips"), counted["calls"])

    def profile(self, send: Any, profile: cProfile.Profile | None = None) -> cProfile.Profile:
        """`send()` run under `profile` (a new cProfile.Profile by default) in the same scope as
        `measure`, for a stage table."""
        profile = profile or cProfile.Profile()
        self._profile = profile
        try:
            send()
        finally:
            self._profile = None
        return profile
