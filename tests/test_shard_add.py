"""Growing without stopping: `flask add-shard URL` (orders/data/shards.py) under a reader walking
the list and two writers inserting, on a coordinator, two shard servers and a spare one
(devtools/shards.py, wal_level = logical).

The largest partition splits in two (MODULUS 2, REMAINDER 0 becomes MODULUS 4, REMAINDER 0 on the
old shard and MODULUS 4, REMAINDER 2 on the new one): half of that shard's rows are copied by
logical replication while the list serves, then one coordinator transaction switches the
partitions. Checked: every walk shows every row that existed throughout exactly once and in
order, no acknowledged write is lost, every row sits on exactly one shard and on the one its hash
names, a cursor issued before the switch continues after it, and init-db afterwards keeps the
new layout. The write pause is printed (the command reports it; the writers see it).

Without initdb/pg_ctl or postgres_fdw this skips loudly (fails under CI=true).
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from devtools.shards import Topology, topology
from orders.data.db import make_engine
from orders.data.models import Order
from orders.finding.sorts import LIBRARY_SORTS

from .fixtures import authorized_client, make_app, with_token
from .helpers import BASE, MISPLACED_ROWS, add_orders, partitions_watched, require_shard_topology

pytestmark = pytest.mark.slow
SEED, LIMIT = 3000, 20


APPS: list[Flask] = []


def _app(top: Topology, shards: int, **config: Any) -> Flask:
    urls = ",".join(s.url() for s in [*top.shards, *top.spare][:shards])
    app = with_token(make_app(top.url, **{"DATABASE_SHARD_URLS": urls, "PAGE_SIZE": LIMIT, **config}))
    APPS.append(app)
    return app


def _cli(app: Flask, *args: str) -> str:
    result = app.test_cli_runner().invoke(args=list(args))
    assert result.exit_code == 0, result.output
    return str(result.output)


@pytest.fixture(scope="module")
def grown() -> Iterator[Topology]:
    require_shard_topology()
    with topology(2, spare=1) as top:
        try:
            yield top
        finally:
            for app in APPS:
                app.extensions["engine"].dispose()


class Reader(threading.Thread):
    """Walks /api/orders newest first until stopped (a walk ends only at its last page); on a
    503 asks the same page again after Retry-After seconds."""

    def __init__(self, app: Flask):
        super().__init__(daemon=True)
        self.client = app.test_client()
        self.stop = threading.Event()
        self.walks: list[tuple[float, float, list[int]]] = []
        self.answers: list[tuple[float, int]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            started, ids, cursor = time.monotonic(), [], None
            while True:
                args = {"limit": LIMIT, **({"after": cursor} if cursor else {})}
                response = self.client.get("/api/orders", query_string=args)
                self.answers.append((time.monotonic(), response.status_code))
                if response.status_code != 200:
                    time.sleep(float(response.headers.get("Retry-After", 1)))
                    continue
                ids += [int(item["id"]) for item in response.json["items"]]
                cursor = response.json["next_cursor"]
                if cursor is None:
                    break
            self.walks.append((started, time.monotonic(), ids))


class Writer(threading.Thread):
    """POSTs an order every 20 ms until stopped; `created` holds (answered at, id) of each 201."""

    def __init__(self, app: Flask):
        super().__init__(daemon=True)
        self.client = authorized_client(app)
        self.stop = threading.Event()
        self.created: list[tuple[float, int]] = []
        self.statuses: list[int] = []

    def run(self) -> None:
        while not self.stop.is_set():
            response = self.client.post("/api/orders", json={"customer": "Writer", "amount": "1.00"})
            self.statuses.append(response.status_code)
            if response.status_code == 201:
                self.created.append((time.monotonic(), int(response.json["id"])))
            time.sleep(0.02)


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time between consecutive successes around [start, end]."""
    around = sorted(t for t in times if start - 5 <= t <= end + 5)
    return max((b - a for a, b in itertools.pairwise(around)), default=float("inf"))


def test_add_shard_under_a_walk_and_writers(grown):
    top = grown
    app = _app(top, 2)
    _cli(app, "init-db")
    coordinator = make_engine(top.url)
    rows = [
        (BASE - dt.timedelta(minutes=i // 3), f"Customer {i % 17}", Decimal(i % 97) + Decimal("0.5"), "paid")
        for i in range(SEED)
    ]
    add_orders(coordinator, rows)
    with Session(coordinator) as session:
        seeded = list(session.scalars(select(Order.id).order_by(*LIBRARY_SORTS["newest"].order_by())))
    # A cursor issued before the switch, five pages into the seeded rows (the writers' rows are
    # newer: they come first, so the page after this cursor is seeded rows only).
    client = app.test_client()
    cursor = None
    for _ in range(5):
        cursor = client.get(
            "/api/orders", query_string={"limit": LIMIT, **({"after": cursor} if cursor else {})}
        ).json["next_cursor"]

    # Refused in one line, nothing changed: a layout the coordinator does not have...
    refused = _app(top, 1).test_cli_runner().invoke(args=["add-shard", top.spare[0].url()])
    assert refused.exit_code == 1 and "not the coordinator's layout" in refused.output, refused.output
    # ...and a switch that cannot take its lock (a transaction holds orders past lock_timeout):
    # the old layout stays, the new shard is emptied again, and the command can run again.
    with coordinator.connect() as holder:
        holder.execute(text("SELECT count(*) FROM orders"))  # ACCESS SHARE until the rollback
        failed = app.test_cli_runner().invoke(args=["add-shard", top.spare[0].url()])
        holder.rollback()
    assert failed.exit_code == 1 and "lock timeout" in failed.output, failed.output
    assert "Traceback" not in failed.output
    spare = create_engine(top.spare[0].url())
    with spare.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM orders")) == 0
        assert conn.scalar(text("SELECT count(*) FROM pg_subscription")) == 0
    spare.dispose()
    with coordinator.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'orders'::regclass")) == 2
        assert conn.scalar(text("SELECT count(*) FROM orders WHERE id < 0")) == 0

    reader, writers = Reader(app), [Writer(app) for _ in range(2)]
    for thread in (reader, *writers):
        thread.start()
    # `switched`: the moment the coordinator's layout showed the third partition.
    with partitions_watched(coordinator, 3) as switched:
        try:
            time.sleep(1)
            started = time.monotonic()
            output = _cli(app, "add-shard", top.spare[0].url())
            ended = time.monotonic()
            time.sleep(1)
        finally:
            for thread in (*writers, reader):
                thread.stop.set()
                thread.join(120)
    assert not any(thread.is_alive() for thread in (*writers, reader))

    assert "shard 3 added" in output and "(MODULUS 4, REMAINDER 2)" in output, output
    grown_app = _app(top, 3)
    # The cursor from before continues where it was, on the new layout.
    after = grown_app.test_client().get("/api/orders", query_string={"limit": LIMIT, "after": cursor})
    assert [int(item["id"]) for item in after.json["items"]] == seeded[5 * LIMIT : 6 * LIMIT]
    # Every walk: no row twice, every seeded row once and in order; one ran across the switch.
    (switch,) = switched
    assert any(start < switch < end for start, end, _ in reader.walks), "no walk spanned the switch"
    for _, _, ids in reader.walks:
        assert len(ids) == len(set(ids)), "a row was shown twice"
        assert [i for i in ids if i in set(seeded)] == seeded, "a walk missed or reordered a row"
    # No acknowledged write lost; every refusal a 503.
    created = [order for w in writers for _, order in w.created]
    assert {s for w in writers for s in w.statuses} <= {201, 503}
    placed: list[set[int]] = []
    for server in [*top.shards, *top.spare]:
        engine = create_engine(server.url())
        with engine.connect() as conn:
            placed.append(set(conn.scalars(text("SELECT id FROM orders"))))
        engine.dispose()
    everywhere = list(itertools.chain.from_iterable(placed))
    assert len(everywhere) == len(set(everywhere)), "a row on two shards"
    assert set(created) | set(seeded) <= set(everywhere), "an acknowledged write was lost"
    assert all(placed), [len(p) for p in placed]
    assert min(everywhere) > 0, "the switch's fence row was left behind"
    # Every row where its hash says, under the bounds the coordinator now has.
    with coordinator.connect() as conn:
        bounds = conn.execute(
            text(
                "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'orders'::regclass ORDER BY 1"
            )
        ).all()
        misplaced = conn.scalar(MISPLACED_ROWS)
    assert [b for _, b in bounds] == [
        "FOR VALUES WITH (modulus 4, remainder 0)",
        "FOR VALUES WITH (modulus 2, remainder 1)",
        "FOR VALUES WITH (modulus 4, remainder 2)",
    ]
    assert misplaced == 0
    # init-db afterwards: the same layout is "nothing to do"; a rebuild keeps the split bounds.
    assert "nothing to do" in _cli(grown_app, "init-db")
    _cli(_app(top, 3, PAGE_SIZE=LIMIT + 5), "init-db")
    with coordinator.connect() as conn:
        again = conn.execute(
            text(
                "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'orders'::regclass "
                "ORDER BY c.relname"
            )
        ).scalars()
        assert list(again) == [b for _, b in bounds]
        assert conn.scalar(text("SELECT count(*) FROM orders")) == len(everywhere)
    coordinator.dispose()
    reads = [t for t, status in reader.answers if status == 200]
    write_times = [t for w in writers for t, _ in w.created]
    writes_paused = longest_gap(write_times, started, ended)
    print(
        f"\nadd-shard: {output.strip()}\n"
        f"took {ended - started:.1f} s; writers' longest pause {writes_paused:.2f} s, "
        f"reader's {longest_gap(reads, started, ended):.2f} s; {len(created)} acknowledged writes, 0 lost; "
        f"rows per shard {[len(p) for p in placed]}; 503s: reads {sum(s != 200 for _, s in reader.answers)}, "
        f"writes {sum(s == 503 for w in writers for s in w.statuses)}"
    )
