"""A former primary restarted as a standby before anyone rewound it: it is in recovery, on a
timeline of its own, past the new primary's position, and holds none of the new primary's writes.
Compared by position alone it looked caught up and read pages from the old data: a walk that
missed rows (a failover test in CI met it, the node Patroni had not yet rewound).

Built for real with two throwaway PostgreSQL servers, as a failover leaves them: `old` writes WAL
its standby never receives, stops; the standby is promoted (`new`); `old` starts again as a
standby of `new`, which it cannot follow. The app reads with `new` as primary and every node
(also `old`) as a replica URL, as devtools/patroni.py's clusters configure it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from devtools.pgserver import Server
from orders.data.db import make_engine, migrate
from orders.data.models import Order
from orders.finding.sorts import LIBRARY_SORTS

from .databases import own_postgresql
from .fixtures import make_app
from .helpers import seed


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Server, Server]]:
    """(old, new) as a failover left them, `old` not rewound."""
    old, bindir = own_postgresql("diverged-pg-")
    with old, Server(bindir, prefix="diverged-pg-") as new:
        engine = make_engine(old.url)
        try:
            migrate(engine)
            seed(engine, 60)
        finally:
            engine.dispose()
        new._run("pg_basebackup", "-D", str(new.data), "-h", "127.0.0.1", "-p", str(old.port),
                 "-U", "postgres", "-R", "-X", "stream", "--no-sync")  # fmt: skip
        new.start()
        new.stop()  # it has every seeded order; from here on it receives nothing from `old`
        engine = make_engine(old.url)
        try:
            seed(engine, 40)  # committed on `old` only: lost in the failover
            with engine.begin() as conn:  # WAL enough to put `old` well past `new`'s position
                conn.execute(text("CREATE TABLE ballast AS SELECT g FROM generate_series(1, 300000) g"))
        finally:
            engine.dispose()
        old.stop()
        new.start()
        new._run("pg_ctl", "-D", str(new.data), "promote", "-w")
        (old.data / "standby.signal").touch()
        with (old.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={new.port} user=postgres'\n")
        old.start()
        yield old, new


def test_a_standby_past_the_primarys_position_reads_nothing(
    servers: tuple[Server, Server], caplog: pytest.LogCaptureFixture
) -> None:
    old, new = servers
    primary = make_engine(new.url)
    try:
        seed(primary, 30)  # on the new primary only
        with Session(primary) as session:
            expected = list(session.scalars(select(Order.id).order_by(*LIBRARY_SORTS["newest"].order_by())))
        with primary.connect() as conn:
            new_lsn = conn.execute(text("SELECT pg_current_wal_lsn()")).scalar()
    finally:
        primary.dispose()
    old_engine = make_engine(old.url)
    try:
        with old_engine.connect() as conn:
            in_recovery, past = conn.execute(
                text(f"SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() > '{new_lsn}'::pg_lsn")
            ).one()
    finally:
        old_engine.dispose()
    assert in_recovery and past, "the case was not made: `old` is not a standby past the primary"

    app = make_app(new.url, DATABASE_REPLICA_URLS=f"{old.url},{new.url}", REPLICA_MAX_LAG_MS=600_000)
    client = app.test_client()
    walked: list[int] = []
    nodes: set[str] = set()
    url = "/api/orders?limit=25"
    with caplog.at_level(logging.WARNING, logger="orders.data.replicas.router"):
        while url:
            page = client.get(url)
            assert page.status_code == 200, page.get_data(as_text=True)
            nodes.add(page.headers["Server-Timing"])
            walked += [int(item["id"]) for item in page.get_json()["items"]]
            cursor = page.get_json()["next_cursor"]
            url = cursor and f"/api/orders?limit=25&after={cursor}"
    app.extensions["router"].dispose()
    app.extensions["engine"].dispose()
    assert walked == expected
    assert not any("replica1" in timing for timing in nodes), nodes
    warnings = [r.getMessage() for r in caplog.records]
    assert any("replica1 out of rotation" in w and "another timeline" in w for w in warnings), warnings
