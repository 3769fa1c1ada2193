"""The per-status counts under concurrent writers (orders/finding/estimates.py, migration 0004): writers
inserting, deleting and changing statuses at once on a server, one write per transaction as
the API writes, some rolled back, leave order_counts equal to COUNT(*) per status: no update lost, no deadlock
between the striped counts rows. Servers only: SQLite takes one writer at a time."""

from __future__ import annotations

import datetime as dt
import random
import threading
from collections.abc import Iterator
from decimal import Decimal

import pytest
from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.data.models import STATUSES, Order
from orders.data.seed import seed_orders
from orders.finding.estimates import estimate

from .databases import SERVERS, migrated_database

WRITERS = 4
ROUNDS = 40


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:  # type: ignore[no-untyped-def]
    with migrated_database(request.param, tmp_path, "counts") as url:
        engine = make_engine(url)
        yield engine
        engine.dispose()


def test_concurrent_writers_keep_the_counts_exact(server: Engine) -> None:
    with Session(server) as session:
        seed_orders(session, 2000)
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(ROUNDS):
                # One write per transaction, as the API writes (a transaction writing orders of
                # several statuses could deadlock with another on the counts rows; the engine
                # would roll one back).
                with Session(server) as session:
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

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a writer hung"
    with Session(server) as session:
        found = estimate(session)
        truth = dict(session.execute(select(Order.status, func.count()).group_by(Order.status)).all())
    assert found.by_status == {s: truth.get(s, 0) for s in STATUSES}
    assert found.total == sum(truth.values())
