"""The per-status counts under concurrent writers (orders/finding/estimates.py, migration 0004): writers
inserting, deleting and changing statuses at once on a server, one write per transaction as
the API writes, some rolled back, leave order_counts equal to COUNT(*) per status: no update lost, no deadlock
between the striped counts rows. Servers only: SQLite takes one writer at a time."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from orders.core.errors import conflicted
from orders.data.db import make_engine
from orders.data.models import STATUSES, STRIPES, Order
from orders.data.seed import seed_orders
from orders.finding.estimates import estimate

from .databases import SERVERS, migrated_database
from .fixtures import CLIENT_LIMITS, make_app

WRITERS = 4
ROUNDS = 40


@pytest.fixture(params=SERVERS)
def server_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    with migrated_database(request.param, tmp_path, "counts") as url:
        yield url


@pytest.fixture
def server(server_url: str) -> Iterator[Engine]:
    engine = make_engine(server_url)
    yield engine
    engine.dispose()


def assert_counts_exact(server: Engine) -> None:
    with Session(server) as session:
        found = estimate(session)
        truth = dict(session.execute(select(Order.status, func.count()).group_by(Order.status)).all())
    assert found.by_status == {s: truth.get(s, 0) for s in STATUSES}
    assert found.total == sum(truth.values())


def test_concurrent_writers_keep_the_counts_exact(server: Engine) -> None:
    with Session(server) as session:
        seed_orders(session, 2000)
    errors: list[BaseException] = []
    undone: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(ROUNDS):
                # Several orders of several statuses in one transaction, or a status changed:
                # writers may take the counts' rows in other orders, a deadlock the engine ends
                # by undoing one writer whole (conflicted): counted for nothing, as a rollback.
                with Session(server) as session, suppress_conflicts(undone):
                    kind = rng.choice(["insert", "delete", "update"])
                    if kind == "insert":
                        session.add_all(
                            Order(
                                customer=f"Writer {seed}",
                                amount=Decimal(1),
                                status=rng.choice(STATUSES),
                                created_at=dt.datetime.now(dt.UTC),
                            )
                            for _ in range(rng.randint(1, 3))
                        )
                        session.flush()
                    elif kind == "delete":
                        session.execute(delete(Order).where(Order.id == rng.randint(1, 2000)))
                    else:
                        new = rng.choice(STATUSES)
                        session.execute(
                            update(Order).where(Order.id == rng.randint(1, 2000)).values(status=new)
                        )
                    if rng.random() < 0.2:
                        session.rollback()  # counted for nothing
                    else:
                        session.commit()
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    run_writers(writer)
    assert not errors, errors
    assert len(undone) < WRITERS * ROUNDS / 4, f"{len(undone)} writes undone as deadlock victims"
    assert_counts_exact(server)


def test_an_api_write_undone_by_a_deadlock_is_sent_again(
    server_url: str, server: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A deadlock on the counts' rows (kept by the engine's triggers) is the app's to resolve,
    not the client's: made here for certain, the API's write is its victim, is sent again
    (orders/web/write_retry.py) and answered 201, never a 503.

    The API's INSERT takes its status's order_counts row, then its rail_counts rows (the
    triggers' order on both engines). Another transaction first takes the amount bucket's
    rail rows, waits until the API's write waits for one, then asks for the status's counts
    rows: a cycle. PostgreSQL undoes the writer whose wait began first (the API's); InnoDB the
    one that wrote fewer rows, so the other transaction first writes a ballast of rows."""
    app = make_app(server_url, **CLIENT_LIMITS)
    with Session(server) as session:
        seed_orders(session, 200)
        # Sixteen pending orders of consecutive ids: a row of order_counts for every stripe of
        # the status, which the API's write will take (its id's), and the amount bucket's row.
        now = dt.datetime.now(dt.UTC)
        session.add_all(
            Order(customer="Bruno Sá", amount=Decimal("512.30"), status="pending", created_at=now)
            for _ in range(STRIPES)
        )
        session.commit()
    body = {"customer": "Ana Lima", "amount": "512.30", "status": "pending"}  # amount bucket "0551"
    answers: list[int] = []
    with server.connect() as other:
        if server.dialect.name == "postgresql":
            # PostgreSQL undoes the transaction whose deadlock check runs first: each waiter's
            # after its own deadlock_timeout (1 s). Under load the two checks, begun a few ms
            # apart, could run the other way round (a full run saw the other undone): the other's
            # check is put well after the API's, so the API's write is the victim.
            other.execute(text("SET deadlock_timeout = '10s'"))
        # InnoDB's ballast: rows written (its victim is the transaction that wrote fewer).
        other.execute(text("CREATE TABLE deadlock_ballast (id INTEGER PRIMARY KEY)"))
        other.commit()
        other.execute(text("INSERT INTO deadlock_ballast (id) VALUES (:i)"), [{"i": i} for i in range(2000)])
        taken = other.execute(
            text(
                "UPDATE rail_counts SET n = n "
                "WHERE family = 'amount' AND status = 'pending' AND bucket = '0551' "
                f"AND stripe < {STRIPES}"  # the writers' stripes (the seed's are folded in another)
            )
        )
        assert taken.rowcount == STRIPES  # the bucket's rows exist, every stripe (the orders above)

        def post() -> None:
            answers.append(app.test_client().post("/api/orders", json=body).status_code)

        poster = threading.Thread(target=post)
        poster.start()
        wait_for_a_lock_wait(server)
        other.execute(text("SELECT n FROM order_counts WHERE status = 'pending' FOR UPDATE")).all()
        other.rollback()
    poster.join(timeout=30)
    app.extensions["engine"].dispose()
    assert answers == [201]
    assert "a deadlock's victim" in caplog.text  # the cycle was made, and the API's write was its victim
    assert_counts_exact(server)


def wait_for_a_lock_wait(server: Engine) -> None:
    """Until the API's write waits for the bucket's row (at most 10 s). On MariaDB, by its
    statement on rail_counts running for 0.2 s: information_schema.INNODB_TRX did not list its
    transaction while it waited (MariaDB 10.11)."""
    waits = (
        "SELECT count(*) FROM pg_locks WHERE NOT granted"
        if server.dialect.name == "postgresql"
        else "SELECT count(*) FROM information_schema.PROCESSLIST "
        "WHERE INFO LIKE 'INSERT INTO rail_counts%' AND TIME_MS > 200"
    )
    deadline = time.monotonic() + 10
    with server.connect() as watcher:
        while not watcher.execute(text(waits)).scalar():
            assert time.monotonic() < deadline, "the API's write never waited for the bucket's row"
            time.sleep(0.02)
            watcher.rollback()


def run_writers(writer: Any) -> None:
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a writer hung"


@contextmanager
def suppress_conflicts(undone: list[BaseException]) -> Iterator[None]:
    """A write the engine undid as a deadlock's victim, noted in `undone`; any other error raised."""
    try:
        yield
    except DBAPIError as err:
        if not conflicted(err):
            raise
        undone.append(err)
