"""What the cluster test modules share (tests/test_cluster.py, tests/test_failover.py): their
cluster (devtools/cluster.py: Patroni, app servers, haproxy; one per module), the seed, the reader
that walks /api/orders through haproxy, and Chromium scrolling the list.

Which node read a page, and at which position, comes from the app's `Server-Timing` header.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from playwright.sync_api import Page, Request, Response
from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from devtools.cluster import Cluster, ClusterUnavailable, Databases, databases
from devtools.cluster import cluster as start_cluster
from devtools.failover import Readers, Writers
from orders.data.db import make_engine
from orders.data.models import Order
from orders.data.replicas.lsn import parse_lsn
from orders.finding.sorts import LIBRARY_SORTS

from .databases import unavailable
from .fixtures import SECRET
from .helpers import BASE, add_orders

# The modules that build Patroni clusters start with `pytestmark = PATRONI_LANE_A` or
# `PATRONI_LANE_B` (conftest.py pytest_xdist_make_scheduler reads that line): under pytest-xdist
# each lane's modules run one after another on one worker. Two lanes, not one: as one unit the
# six modules took 541 s, the longest of the whole run (make test waited for it). Each lane has at
# most one cluster failing over at a time; the two lanes may fail over at once, which passed
# (21 of 21) at load 9 to 11 (docs/testing.md). Which module is in which lane balances their
# wall time (a census run: A test_failover 155 s + test_cluster 225 + test_replica_unavailable
# 40; B test_shard_failover 141 + test_prometheus_cluster 208 + test_synchronous_commit 69).
PATRONI_LANE_A = pytest.mark.xdist_group("patroni-a")
PATRONI_LANE_B = pytest.mark.xdist_group("patroni-b")
MAX_LAG_MS = 300
SEED = 600
ROWS = "#rows > tr[data-id]"
# What every app server of a test cluster runs with (the module may add more).
APP_ENV = {
    "SECRET_KEY": SECRET,
    "REPLICA_MAX_LAG_MS": str(MAX_LAG_MS),
    "AUTO_PAGES": "1000",
    "MAX_ROWS_IN_PAGE": "0",  # keep every row in the document: the tests read them all
    # Every request comes from this machine through haproxy: budgets no test reaches.
    "RATELIMIT_READS": "100000 per minute",
    "RATELIMIT_WRITES": "100000 per minute",
}
_TIMING = re.compile(r'db;desc="(\w+)(?: ([0-9A-F]+/[0-9A-F]+))?"')


@contextmanager
def module_cluster(log_dir: Path, **options: Any) -> Iterator[Cluster]:
    """The module's cluster; unavailable (a loud skip, a failure under CI=true) without Patroni,
    etcd, PostgreSQL's server binaries or haproxy."""
    try:
        with start_cluster(
            app_servers=2, workers=2, threads=2, env=APP_ENV, log_dir=log_dir, **options
        ) as running:
            yield running
    except ClusterUnavailable as err:
        unavailable("the Patroni + etcd + haproxy cluster", str(err))


@contextmanager
def module_databases(*, nodes: int, synchronous: bool) -> Iterator[Databases]:
    """The module's Patroni nodes without app servers or haproxy; unavailable (a loud skip, a
    failure under CI=true) without Patroni, etcd or PostgreSQL's server binaries."""
    try:
        with databases(nodes=nodes, synchronous=synchronous) as running:
            yield running
    except ClusterUnavailable as err:
        unavailable("a Patroni cluster (PostgreSQL, etcd, patroni)", str(err))


# The fixtures of a module that runs its tests on one cluster (tests/test_cluster.py,
# tests/test_failover.py): `from .cluster_support import cluster, orders, primary` makes them the
# module's own (module scope: one cluster per module, started by its first test).


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with module_cluster(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])) as running:
        yield running


@pytest.fixture(scope="module")
def primary(cluster: Cluster) -> Iterator[Engine]:
    """An engine on the leader's database (the writes tests make beside the app)."""
    engine = make_engine(cluster.databases.primary_url)
    yield engine
    engine.dispose()


@pytest.fixture
def orders(cluster: Cluster, primary: Engine) -> list[int]:
    """SEED orders on every node: each node up (a test may have stopped one), replay running on
    every standby (a test may have paused one), the rows replayed everywhere."""
    for node in cluster.databases.nodes:
        node.start()  # a node a test stopped (no-op for a running one)
    cluster.databases.wait_healthy()
    for node in cluster.databases.standbys:
        node.resume_replay()
    return reseed(cluster, primary)


@contextmanager
def traffic(
    url: str, *, before: int = 20, idempotency_keys: bool = False
) -> Iterator[tuple[Readers, Writers]]:
    """API readers walking and writers writing through the front, running once `before` writes
    were acknowledged (within 60 s, else the test fails), stopped on the way out."""
    readers, writers = Readers(url), Writers(url, idempotency_keys=idempotency_keys)
    readers.start()
    writers.start()
    try:
        deadline = time.monotonic() + 60
        while len(writers.created) < before:
            assert time.monotonic() < deadline, f"{len(writers.created)} writes acknowledged in 60 s"
            time.sleep(0.05)
        yield readers, writers
    finally:
        writers.stop()
        readers.stop()


def clear_orders(dbs: Databases) -> None:
    """Delete every order and idempotency key on the leader, and wait until the standbys have
    replayed it: a test starts from no rows, whatever the one before left."""
    dbs.primary.sql("TRUNCATE orders, idempotency_keys")
    dbs.wait_for_standbys()


def reseed(cl: Cluster, primary: Engine) -> list[int]:
    """SEED orders (newest first, 20 s apart), replayed on every running standby."""
    with Session(primary) as session:
        session.execute(delete(Order))
        session.commit()
    ids = add_orders(
        primary,
        [
            (BASE - dt.timedelta(seconds=20 * i), f"Customer {i % 17}", Decimal(i) + Decimal("0.25"), "paid")
            for i in range(SEED)
        ],
    )
    cl.databases.wait_for_standbys()
    return ids


def served(response: requests.Response) -> tuple[str, int | None]:
    """(node name, WAL position) that read this response, from Server-Timing."""
    match = _TIMING.search(response.headers.get("Server-Timing", ""))
    assert match, f"no routing in Server-Timing: {response.headers.get('Server-Timing')!r}"
    return match[1], parse_lsn(match[2])


def expected_ids(engine: Engine, sort: str = "newest") -> list[int]:
    with Session(engine) as session:
        return list(session.scalars(select(Order.id).order_by(*LIBRARY_SORTS[sort].order_by())))


class Walk:
    """A reader paging through /api/orders, recording which node read each page and where."""

    def __init__(self, base: str, sort: str = "newest", http: requests.Session | None = None):
        self.base, self.sort = base, sort
        self.http = http or requests.Session()
        self.ids: list[int] = []
        self.keys: list[tuple[str, int]] = []
        self.pages: list[tuple[str, int | None]] = []
        self.cursor: str | None = None
        self.done = False

    def step(self) -> None:
        params: dict[str, Any] = {"sort": self.sort, "limit": 20}
        if self.cursor:
            params["after"] = self.cursor
        response = self.http.get(f"{self.base}/api/orders", params=params, timeout=30)
        assert response.status_code == 200, response.text
        body = response.json()
        self.pages.append(served(response))
        self.ids += [int(item["id"]) for item in body["items"]]
        self.keys += [(item["created_at"], int(item["id"])) for item in body["items"]]
        self.cursor = body["next_cursor"]
        self.done = self.cursor is None

    def run(self) -> Walk:
        while not self.done:
            self.step()
        return self

    def check(self, covered: set[int], *, same_timeline: bool = True) -> None:
        """No duplicate, every covered row shown, and (on one timeline: no failover meanwhile) the
        read positions never go back. A promoted standby's positions continue on a new timeline
        from where it had replayed, which can be behind a page the old primary read."""
        assert len(self.ids) == len(set(self.ids)), "a row was shown twice"
        missing = covered - set(self.ids)
        assert not missing, f"{len(missing)} covered rows never shown, e.g. {sorted(missing)[:5]}"
        positions = [lsn for _, lsn in self.pages if lsn is not None]
        assert len(positions) == len(self.pages), "a page without a position"
        if same_timeline:
            assert positions == sorted(positions), f"a page was read at an older position: {self.pages}"


def watch_failures(page: Page) -> list[str]:
    """Every HTTP error and failed request the page sees, from now on, but the live stream's
    designed refusal: a recipe without a stream server sends /orders/stream to the list's
    gunicorn, which answers 503 with Retry-After, and the page polls instead (docs/scroll.md)."""
    failures: list[str] = []

    def stream(url: str) -> bool:
        return url.split("?", 1)[0].endswith("/orders/stream")

    def response(r: Response) -> None:
        if r.status >= 400 and not (stream(r.url) and r.status == 503 and "retry-after" in r.headers):
            failures.append(f"{r.status} {r.url} {r.headers}")

    def failed(r: Request) -> None:
        if not (stream(r.url) and r.failure == "net::ERR_ABORTED"):  # a stream closed by navigation
            failures.append(f"failed {r.url} {r.failure}")

    page.on("response", response)
    page.on("requestfailed", failed)
    return failures


def scroll(page: Page, until: Callable[[], bool], steps: int = 3000) -> None:
    """Wheel down the list until `until()` (or `steps` wheel turns, 30 ms apart)."""
    for _ in range(steps):
        if until():
            return
        page.mouse.wheel(0, 1500)
        page.wait_for_timeout(30)


def screen_ids(page: Page) -> list[int]:
    return [int(i) for i in page.eval_on_selector_all(ROWS, "rs => rs.map(r => r.dataset.id)")]


def kill_app_server(master: psutil.Process) -> None:
    """kill -9 one gunicorn app server: its master first (so it respawns nothing), then its workers."""
    workers = master.children(recursive=True)
    for process in (master, *workers):
        with suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs([master, *workers], timeout=10)
