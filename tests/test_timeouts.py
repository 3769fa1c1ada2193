"""A runaway query cannot hold a worker: the statement timeout turns it into a quick 503.

make_engine() sets PostgreSQL's statement_timeout and MariaDB's max_statement_time from
STATEMENT_TIMEOUT_MS. Here the list query is made slow for real, two ways, on both engines:

- blocked: another connection holds a table lock (PostgreSQL: LOCK TABLE ... ACCESS EXCLUSIVE
  in an open transaction; MariaDB: LOCK TABLES ... WRITE), so the query waits on the lock.
  statement_timeout counts lock waits. MariaDB's max_statement_time is often said not to cover
  lock waits; on MariaDB 10.11 it does interrupt both this table-lock wait and an InnoDB
  row-lock wait with ER_STATEMENT_TIMEOUT (1969), which the test relies on and so re-checks.
- slow: the `orders` table is swapped for a view that sleeps on every row it reads
  (pg_sleep / SLEEP() per row), so the query itself runs long, not waiting on anything.

With a 50 ms timeout the API must answer 503 `unavailable` with Retry-After in well under a
second, and the same app must serve 200 again once the lock is gone, without leaking a connection.
A control with a long timeout shows the 503 comes from the timeout: there the request waits.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import pytest
import requests
from flask import Flask
from sqlalchemy import create_engine, text

from orders.data.db import make_engine
from orders.data.models import STATUSES

from .databases import SERVERS, family, migrated_database
from .fixtures import make_app
from .helpers import BASE, add_orders
from .live import LiveServer

TIMEOUT_MS = 50
FAST_ENOUGH = 5.0  # seconds: 100 times the timeout, a third of a hang (SAFETY_RELEASE); 1.5 left a loaded
# run (load 18: the export, the HTML page, a 500 logging its trace) too little room
SAFETY_RELEASE = 15  # seconds: a lock is released by then even if the app does hang


@pytest.fixture(scope="module", params=SERVERS)
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with migrated_database(request.param, tmp_path_factory.mktemp("timeouts"), "timeouts") as url:
        engine = make_engine(url)
        add_orders(
            engine,
            [(BASE - dt.timedelta(minutes=i // 3), f"c{i}", Decimal(i), STATUSES[i % 4]) for i in range(60)],
        )
        engine.dispose()
        yield family(request.param), url


def timed_app(url: str, timeout_ms: int = TIMEOUT_MS) -> Flask:
    return make_app(url, STATEMENT_TIMEOUT_MS=timeout_ms)


@contextmanager
def table_locked(kind: str, url: str) -> Iterator[None]:
    """Another session holds a lock that blocks every read and write of `orders`."""
    engine = create_engine(url)  # no statement timeout: this one must hold on
    conn = engine.connect()
    if kind == "postgresql":
        conn.exec_driver_sql("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")  # until rollback
        release = conn.rollback
    else:
        conn.exec_driver_sql("LOCK TABLES orders WRITE")

        def release() -> None:
            conn.exec_driver_sql("UNLOCK TABLES")

    safety = threading.Timer(SAFETY_RELEASE, lambda: conn.invalidate())
    safety.start()
    try:
        yield
    finally:
        safety.cancel()
        if not conn.invalidated:
            release()
        conn.close()
        engine.dispose()


@contextmanager
def reads_sleep_per_row(kind: str, url: str) -> Iterator[None]:
    """`orders` becomes a view that sleeps 20 ms on each row it reads: a really slow query."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if kind == "postgresql":
            conn.exec_driver_sql("ALTER TABLE orders RENAME TO orders_data")
            conn.exec_driver_sql(
                "CREATE FUNCTION slow_row(bigint) RETURNS boolean LANGUAGE plpgsql VOLATILE AS "
                "$$ BEGIN PERFORM pg_sleep(0.02); RETURN true; END $$"
            )
            conn.exec_driver_sql("CREATE VIEW orders AS SELECT * FROM orders_data WHERE slow_row(id)")
        else:
            conn.exec_driver_sql("RENAME TABLE orders TO orders_data")
            conn.exec_driver_sql("CREATE VIEW orders AS SELECT * FROM orders_data WHERE SLEEP(0.02) = 0")
    try:
        yield
    finally:
        with engine.connect() as conn:
            conn.exec_driver_sql("DROP VIEW orders")
            if kind == "postgresql":
                conn.exec_driver_sql("DROP FUNCTION slow_row(bigint)")
                conn.exec_driver_sql("ALTER TABLE orders_data RENAME TO orders")
            else:
                conn.exec_driver_sql("RENAME TABLE orders_data TO orders")
        engine.dispose()


def timed_get(client, path: str, **kwargs):
    started = time.perf_counter()
    response = client.get(path, **kwargs)
    response.get_data()
    response.close()
    return response, time.perf_counter() - started


def assert_unavailable(response, elapsed: float) -> None:
    assert response.status_code == 503, response.get_data()[:300]
    assert int(response.headers["Retry-After"]) > 0
    assert elapsed < FAST_ENOUGH, f"took {elapsed:.2f} s with a {TIMEOUT_MS} ms statement timeout"


# What each engine's driver says when the timeout fires (logged by errors.py, never sent).
TIMEOUT_MESSAGES = {
    "postgresql": "canceling statement due to statement timeout",
    "mysql": "(1969, 'Query execution was interrupted (max_statement_time exceeded)')",
}


@pytest.mark.parametrize("slowness", ["blocked", "slow"])
def test_slow_list_query_is_a_quick_503_and_the_app_recovers(
    db: tuple[str, str], slowness: str, caplog: pytest.LogCaptureFixture
) -> None:
    kind, url = db
    app = timed_app(url)
    client = app.test_client()
    assert client.get("/api/orders").status_code == 200  # warm: a pooled connection exists
    caplog.set_level(logging.WARNING, logger="orders.web.errors")
    slow = table_locked(kind, url) if slowness == "blocked" else reads_sleep_per_row(kind, url)
    with slow:
        response, elapsed = timed_get(client, "/api/orders", query_string={"limit": 50})
        assert_unavailable(response, elapsed)
        assert response.json["error"]["code"] == "unavailable"
        # The HTML list, its fragments and the CSV export run the same query: same answer.
        for path, headers in [
            ("/orders", {}),
            ("/orders?page=2", {"HX-Request": "true"}),
            ("/orders/export.csv", {}),
        ]:
            response, elapsed = timed_get(client, path, headers=headers)
            assert_unavailable(response, elapsed)
        if slowness == "blocked":  # writes wait on the lock too
            started = time.perf_counter()
            response = client.post("/api/orders", json={"customer": "Ana", "amount": "1.00"})
            assert_unavailable(response, time.perf_counter() - started)
    # It was the timeout, as the driver reported it, that made every one of them a 503.
    messages = [r.getMessage() for r in caplog.records if r.name == "orders.web.errors"]
    assert len(messages) >= 4 and all(TIMEOUT_MESSAGES[kind] in m for m in messages), messages
    # Lock released / table back: the very same app (and pool) answers normally again.
    response = client.get("/api/orders", query_string={"limit": 50})
    assert response.status_code == 200 and len(response.json["items"]) == 50
    assert app.extensions["engine"].pool.checkedout() == 0
    app.extensions["engine"].dispose()


def test_without_a_short_timeout_the_request_waits_for_the_lock(db: tuple[str, str]) -> None:
    """The control: with a 10 s timeout the same blocked request waits, then succeeds."""
    kind, url = db
    app = timed_app(url, timeout_ms=10_000)
    client = app.test_client()
    client.get("/api/orders")
    with table_locked(kind, url):
        result: dict[str, object] = {}

        def request() -> None:
            result["response"], result["elapsed"] = timed_get(client, "/api/orders")

        worker = threading.Thread(target=request)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), "the request did not wait for the lock"
    worker.join(SAFETY_RELEASE)
    assert result["response"].status_code == 200
    assert result["elapsed"] >= 0.5
    app.extensions["engine"].dispose()


def test_a_burst_of_blocked_requests_does_not_pile_up(db: tuple[str, str]) -> None:
    """Twelve clients at once on a live, threaded server while the table is locked: each gets
    its 503 quickly, so no request thread is held by the lock."""
    kind, url = db
    app = timed_app(url)
    with LiveServer(app) as server, table_locked(kind, url):
        answers: list[tuple[int, float]] = []

        def client() -> None:
            started = time.perf_counter()
            response = requests.get(f"{server.url}/api/orders", timeout=SAFETY_RELEASE)
            answers.append((response.status_code, time.perf_counter() - started))

        threads = [threading.Thread(target=client) for _ in range(12)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(SAFETY_RELEASE)
        total = time.perf_counter() - started
    assert [status for status, _ in answers] == [503] * 12
    assert total < 2 * FAST_ENOUGH, f"12 blocked requests took {total:.2f} s in all"
    assert app.extensions["engine"].pool.checkedout() == 0
    app.extensions["engine"].dispose()


# Real database errors, raised by real statements on each engine, and what the client is told:
# 503 (retry later) for a database that cannot answer now, a 500 for a value the database
# refuses, which fails the same way every time (a 503 would have the client retry it forever).
TOO_LONG = (
    "INSERT INTO orders (customer, amount, status, created_at) VALUES (REPEAT('x', 65), 1, 'paid', NOW())"
)
ERROR_CASES = {
    "postgresql": [
        ("SELECT pg_sleep(1)", 503),  # statement_timeout: QueryCanceled
        ("SELECT 1 / 0", 500),  # DataError
        (TOO_LONG, 500),  # DataError: value too long for varchar(64)
        # A table or column the code needs but the database lacks (a deploy that forgot its
        # migration) fails the same way every time: a bug, 500 with its trace, not "retry later".
        ("SELECT * FROM no_such_table", 500),  # UndefinedTable 42P01
    ],
    "mysql": [
        ("SELECT SLEEP(1)", 503),  # max_statement_time: ER_STATEMENT_TIMEOUT 1969
        ("SELECT * FROM orders WHERE SLEEP(1) = 0", 503),  # the same, while reading the table
        (TOO_LONG, 500),  # DataError 1406 (strict mode)
        ("SELECT * FROM no_such_table", 500),  # ER_NO_SUCH_TABLE 1146
    ],
}


def test_database_errors_map_to_503_only_when_retrying_can_help(db: tuple[str, str]) -> None:
    kind, url = db
    app = timed_app(url)

    @app.get("/api/test-only/sql/<int:n>")
    def run_sql(n: int):
        from orders.data.db import get_session

        get_session().execute(text(ERROR_CASES[kind][n][0]))
        return "ran"

    client = app.test_client()
    for n, (sql, expected) in enumerate(ERROR_CASES[kind]):
        response, elapsed = timed_get(client, f"/api/test-only/sql/{n}")
        assert response.status_code == expected, (sql, response.status_code)
        assert response.json["error"]["code"] == ("unavailable" if expected == 503 else "internal_error")
        assert ("Retry-After" in response.headers) == (expected == 503)
        assert elapsed < FAST_ENOUGH, (sql, elapsed)
    assert app.extensions["engine"].pool.checkedout() == 0
    app.extensions["engine"].dispose()
