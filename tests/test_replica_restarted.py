"""A replica that came back behind where it had been: what the router knew of its position before
the restart says nothing now.

A standby killed and started again opens for reads once it is consistent, which can be well
behind the position it had replayed before (it replays on from its last restartpoint); a replica
URL can also be served by another standby after a restore. The router took positions as only
growing, so a cursor stamped on the replica was read there again at the older position: a walk
that ended early (tests/test_failover.py's reader, in CI, missed the oldest rows).

Built for real with throwaway PostgreSQL servers: the replica URL's server is stopped and a
standby made from an older base backup starts on its port, in recovery and behind.
"""

from __future__ import annotations

import time
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


def _backup(source: Server, target: Server) -> None:
    target._run("pg_basebackup", "-D", str(target.data), "-h", "127.0.0.1", "-p", str(source.port),
                "-U", "postgres", "-X", "stream", "--no-sync")  # fmt: skip
    (target.data / "standby.signal").touch()


def _replayed(server: Server) -> str:
    engine = make_engine(server.url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(text("SELECT pg_last_wal_replay_lsn()")).scalar())
    finally:
        engine.dispose()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server, Server]]:
    """(primary, standby streaming from it, an older backup of it made a standby, not started)."""
    primary, bindir = own_postgresql("restarted-pg-")
    with (
        primary,
        Server(bindir, prefix="restarted-pg-") as older,
        Server(bindir, prefix="restarted-pg-") as standby,
    ):
        engine = make_engine(primary.url)
        try:
            migrate(engine)
            seed(engine, 30)
            _backup(primary, older)  # holds these 30 orders, and no primary to stream from
            seed(engine, 50)
        finally:
            engine.dispose()
        _backup(primary, standby)
        with (standby.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = 'host=127.0.0.1 port={primary.port} user=postgres'\n")
        standby.start()
        yield primary, standby, older


def test_a_cursor_is_not_read_on_a_replica_that_came_back_behind_it(
    servers: tuple[Server, Server, Server],
) -> None:
    primary, standby, older = servers
    engine = make_engine(primary.url)
    try:
        with Session(engine) as session:
            expected = list(session.scalars(select(Order.id).order_by(*LIBRARY_SORTS["newest"].order_by())))
    finally:
        engine.dispose()
    app = make_app(primary.url, DATABASE_REPLICA_URLS=standby.url, REPLICA_MAX_LAG_MS=600_000)
    client = app.test_client()
    try:
        first = client.get("/api/orders?limit=20")
        assert first.status_code == 200, first.get_data(as_text=True)
        assert "replica1" in first.headers["Server-Timing"], "the case was not made: the primary read it"
        walked = [int(item["id"]) for item in first.get_json()["items"]]
        cursor = first.get_json()["next_cursor"]
        # The replica's server stops; an older copy, behind the cursor's position, starts on its port.
        standby.stop()
        older.port, older.url = standby.port, standby.url
        older.start()
        assert _replayed(older) < _replayed(primary)
        # The router finds the replica URL answering again (its pooled and probe connections to
        # the stopped server fail first, which takes it out of rotation for a while).
        router = app.extensions["router"]
        replica = router.replicas[0]
        replica.engine.dispose()  # its pooled connections to the stopped server, as a recycle would
        deadline = time.monotonic() + 30
        while True:
            router.refresh(force=True)
            if replica.up(time.monotonic()) and replica.down_until == 0.0:
                break
            assert time.monotonic() < deadline, "the replica URL never answered the router again"
            time.sleep(0.1)
        nodes = set()
        while cursor:
            page = client.get(f"/api/orders?limit=20&after={cursor}")
            assert page.status_code == 200, page.get_data(as_text=True)
            nodes.add(page.headers["Server-Timing"])
            walked += [int(item["id"]) for item in page.get_json()["items"]]
            cursor = page.get_json()["next_cursor"]
        assert walked == expected, f"pages read on: {nodes}"
    finally:
        app.extensions["router"].dispose()
        app.extensions["engine"].dispose()
