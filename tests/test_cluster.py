"""Scale-out for real: a PostgreSQL primary, two streaming standbys, two gunicorn app servers and
haproxy, all started here on loopback (devtools/cluster.py), once for the module.

What is checked is the guarantee written in the README ("Several servers"): a walk never shows a
row twice; it shows every row committed at least REPLICA_MAX_LAG_MS before its first page (or
written earlier by the same client) that is not deleted before the reader gets there; and every
page is read at a WAL position at least as far as the page before it. Replicas are made to lag on
purpose with pg_wal_replay_pause(), stopped, and the primary is stopped.

Which node read a page, and at which position, comes from the app's `Server-Timing` header.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import Page, expect
from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from devtools.cluster import Cluster, ClusterUnavailable, cluster
from devtools.gunicorn import gunicorn
from orders.db import make_engine
from orders.models import SORTS, Order
from orders.replicas import HEADER, parse_lsn

from .databases import unavailable
from .fixtures import SECRET, make_app
from .helpers import BASE, add_orders

MAX_LAG_MS = 300
SEED = 600
_TIMING = re.compile(r'db;desc="(\w+)(?: ([0-9A-F]+/[0-9A-F]+))?"')


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = {
        "SECRET_KEY": SECRET,
        "REPLICA_MAX_LAG_MS": str(MAX_LAG_MS),
        "AUTO_PAGES": "1000",
        "MAX_ROWS_IN_PAGE": "0",  # keep every row in the document: the test reads them all
    }
    try:
        with cluster(
            app_servers=2, workers=2, threads=2, env=env, log_dir=tmp_path_factory.mktemp("cluster")
        ) as running:
            yield running
    except ClusterUnavailable as err:
        unavailable("the PostgreSQL + haproxy cluster", str(err))


@pytest.fixture(scope="module")
def primary(cl: Cluster) -> Iterator[Engine]:
    engine = make_engine(cl.databases.primary.url())
    yield engine
    engine.dispose()


@pytest.fixture
def orders(cl: Cluster, primary: Engine) -> list[int]:
    """SEED orders, three a minute, replayed on both standbys; replay running on both."""
    for node in cl.databases.standbys:
        if not node.running():
            node.start()
        node.resume_replay()
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
        return list(session.scalars(select(Order.id).order_by(*SORTS[sort].order_by())))


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

    def check(self, covered: set[int]) -> None:
        """No duplicate, every covered row shown, and the read positions never go back."""
        assert len(self.ids) == len(set(self.ids)), "a row was shown twice"
        missing = covered - set(self.ids)
        assert not missing, f"{len(missing)} covered rows never shown, e.g. {sorted(missing)[:5]}"
        positions = [lsn for _, lsn in self.pages]
        assert all(lsn is not None for lsn in positions)
        assert positions == sorted(positions), f"a page was read at an older position: {self.pages}"


def test_walk_while_writing_with_a_replica_paused_mid_walk(cl: Cluster, orders: list[int], primary: Engine):
    standby = cl.databases.standbys[1]  # replica2
    walk = Walk(cl.url)
    deleted: set[int] = set()
    stop = threading.Event()
    writes = Counter()

    def writer() -> None:
        rng = random.Random(7)
        with Session(primary) as session:
            while not stop.is_set():
                # Ahead of the reader (older than the last row it saw), and deletes anywhere.
                oldest_seen = walk.keys[-1][0] if walk.keys else None
                upper = dt.datetime.fromisoformat(oldest_seen) if oldest_seen else BASE
                at = upper - dt.timedelta(seconds=rng.uniform(1, 20 * SEED))
                session.add(Order(created_at=at, customer="Writer", amount=Decimal("1.00"), status="paid"))
                victim = rng.choice(orders)
                deleted.add(victim)
                session.execute(delete(Order).where(Order.id == victim))
                session.commit()
                writes["commits"] += 1
                time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        paused_at = 0
        while not walk.done:
            page = len(walk.pages)
            if page == 5:
                standby.pause_replay()
                paused_at = parse_lsn(standby.replay_lsn()) or 0
            if page == 20:
                standby.resume_replay()
            walk.step()
            time.sleep(0.02)  # a reader's pace: the writer commits between pages
    finally:
        stop.set()
        thread.join()
    walk.check(set(orders) - deleted)
    # While replica2 was paused (pages 5 to 19), a page whose cursor was read past the position it
    # stopped at was read elsewhere, never by replica2.
    behind = [k for k in range(6, 20) if (walk.pages[k - 1][1] or 0) > paused_at]
    assert behind, "the writer never moved the cursors past the paused replica: nothing was tested"
    assert all(walk.pages[k][0] != "replica2" for k in behind), walk.pages[5:20]
    elsewhere = sum(node != "replica2" for node, _ in walk.pages[5:20])
    print(
        f"\n{len(walk.pages)} pages, nodes {Counter(n for n, _ in walk.pages)}; while replica2 was paused "
        f"{elsewhere} of 15 pages were read elsewhere ({len(behind)} had cursors past its position); "
        f"{writes['commits']} writes"
    )


def test_rows_written_before_a_walk_all_appear_though_a_replica_is_paused(
    cl: Cluster, orders: list[int], primary: Engine
):
    standby = cl.databases.standbys[1]
    standby.pause_replay()
    try:
        # Spread over the whole list: newer than every row (first page), inside, older than all.
        new = add_orders(
            primary,
            [
                (
                    BASE + dt.timedelta(minutes=5) - dt.timedelta(seconds=397 * i),
                    "Late",
                    Decimal("3.00"),
                    "paid",
                )
                for i in range(40)
            ],
        )
        # Longer than REPLICA_MAX_LAG_MS: the paused replica must not read a first page now.
        time.sleep(3 * MAX_LAG_MS / 1000)
        newest = new[0]  # five minutes newer than any other row
        first_pages = Counter()
        for _ in range(12):
            response = requests.get(f"{cl.url}/api/orders", params={"limit": 5}, timeout=30)
            first_pages[served(response)[0]] += 1
            assert newest in [int(item["id"]) for item in response.json()["items"]]
        assert first_pages["replica2"] == 0, first_pages
        for sort in ("newest", "oldest", "amount"):
            walk = Walk(cl.url, sort).run()
            walk.check(set(orders) | set(new))
            assert walk.ids == expected_ids(primary, sort)
            assert "replica2" not in {n for n, _ in walk.pages}
    finally:
        standby.resume_replay()


def test_read_your_writes_through_paused_replicas(cl: Cluster, orders: list[int]):

    # A generous REPLICA_MAX_LAG_MS: paused replicas stay eligible for first pages, so only the
    # write's position can send this client's reads elsewhere.
    app = make_app(
        cl.databases.primary.url(),
        DATABASE_REPLICA_URLS=cl.databases.replica_urls,
        REPLICA_MAX_LAG_MS=600_000,
    )
    # First reads until the app has seen the replicas caught up (autovacuum may write to the
    # primary meanwhile); then they stop replaying.
    deadline = time.monotonic() + 15
    while "replica" not in app.test_client().get("/api/orders").headers["Server-Timing"]:
        assert time.monotonic() < deadline, "the replicas never caught up"
        time.sleep(0.05)
    for node in cl.databases.standbys:
        node.pause_replay()
    try:
        writer = app.test_client()
        created = writer.post("/api/orders", json={"customer": "Mine", "amount": "9.99"})
        assert created.status_code == 201
        position = created.headers[HEADER]
        order_id = created.get_json()["id"]
        assert writer.get_cookie("read_after_lsn").value == position

        # The same client (cookie): the JSON list and the HTML list show the order at once.
        assert order_id in [o["id"] for o in writer.get("/api/orders").get_json()["items"]]
        assert f'data-id="{order_id}"' in writer.get("/orders").get_data(as_text=True)
        export = writer.get("/orders/export.csv")
        assert "primary" in export.headers["Server-Timing"]
        assert f"\n{order_id}," in export.get_data(as_text=True)
        # An API client without cookies that sends the header back.
        headed = app.test_client(use_cookies=False).get("/api/orders", headers={HEADER: position})
        assert order_id in [o["id"] for o in headed.get_json()["items"]]
        assert "primary" in headed.headers["Server-Timing"]
        # A position the client made up changes only where its own reads go: garbage is ignored,
        # one beyond anything written sends them to the primary; never an error.
        anyone = app.test_client(use_cookies=False)
        for value, node in (("nonsense", "replica"), ("1/2/3", "replica"), ("FFFFFFFF/FFFFFFFF", "primary")):
            response = anyone.get("/api/orders", headers={HEADER: value})
            assert response.status_code == 200 and node in response.headers["Server-Timing"], value
        # Anyone else reads a paused replica: the order is not there (the check above can fail).
        other = app.test_client().get("/api/orders")
        assert "replica" in other.headers["Server-Timing"]
        assert order_id not in [o["id"] for o in other.get_json()["items"]]
    finally:
        for node in cl.databases.standbys:
            node.resume_replay()
        app.extensions["router"].dispose()
        app.extensions["engine"].dispose()


def test_key_rotation_mid_walk_across_two_app_servers(cl: Cluster, orders: list[int], tmp_path: Path):
    """Rotation in two steps across app servers: old key + new fallback, then new key + old fallback.
    Mid-rotation the servers hold different lists, and a walk alternating between them goes on."""
    old, new = "old-" + SECRET, "new-" + SECRET
    base_env = {"DATABASE_REPLICA_URLS": cl.databases.replica_urls, "PAGE_SIZE": "20"}
    with ExitStack() as stack:

        def server(key: str, fallbacks: str, name: str) -> str:
            env = {**base_env, "SECRET_KEY": key, "SECRET_KEY_FALLBACKS": fallbacks}
            url, _ = stack.enter_context(
                gunicorn(cl.databases.primary.url(), log_path=tmp_path / name, workers=1, env=env)
            )
            return url

        not_yet = server(old, new, "a.log")  # step 1 deployed: still signs with the old key
        rotated = server(new, old, "b.log")  # step 2 deployed: signs with the new key
        ids: list[int] = []
        cursor = None
        for page in range(SEED // 20):
            base = (not_yet, rotated)[page % 2]
            response = requests.get(
                f"{base}/api/orders", params={"after": cursor} if cursor else {}, timeout=30
            )
            assert response.status_code == 200, response.text
            ids += [int(item["id"]) for item in response.json()["items"]]
            cursor = response.json()["next_cursor"]
        assert ids == orders  # newest first: the seed inserts newest first
        # The control: a server that knows only one of the keys refuses the other's cursors.
        old_only = server(old, "", "c.log")
        first = requests.get(f"{rotated}/api/orders", timeout=30).json()["next_cursor"]
        refused = requests.get(f"{old_only}/api/orders", params={"after": first}, timeout=30)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_cursor"


@pytest.mark.browser
def test_replica_stopped_mid_scroll_in_chromium(cl: Cluster, orders: list[int], page: Page):
    rows = "#rows > tr[data-id]"
    standby = cl.databases.standbys[0]  # replica1
    failures: list[str] = []
    page.on("response", lambda r: r.status >= 400 and failures.append(f"{r.status} {r.url} {r.headers}"))
    page.on("requestfailed", lambda r: failures.append(f"failed {r.url} {r.failure}"))
    page.goto(f"{cl.url}/orders")
    expect(page.locator(rows).first).to_be_attached()
    for _ in range(400):
        if page.locator(rows).count() >= 120:
            break
        page.mouse.wheel(0, 1500)
        page.wait_for_timeout(30)
    standby.stop()
    try:
        for _ in range(3000):
            if page.locator("#end-of-list").count() or failures:
                break
            page.mouse.wheel(0, 1500)
            page.wait_for_timeout(30)
        assert not failures, failures
        expect(page.locator("#end-of-list")).to_be_attached()
        assert page.get_by_text("Couldn't load more").count() == 0
        ids = [int(i) for i in page.eval_on_selector_all(rows, "rs => rs.map(r => r.dataset.id)")]
        assert ids == orders  # newest first: the seed inserts newest first
    finally:
        standby.start()
    # It answers again: back in rotation (each app process probes it within a second or so).
    deadline = time.monotonic() + 30
    nodes: set[str] = set()
    while "replica1" not in nodes:
        assert time.monotonic() < deadline, "replica1 never came back into rotation"
        response = requests.get(f"{cl.url}/api/orders", timeout=30)
        assert response.status_code == 200, response.text  # stale pooled connections are retried
        nodes.add(served(response)[0])
        time.sleep(0.05)


def test_primary_stopped_reads_go_on_from_replicas_writes_are_503(cl: Cluster, orders: list[int]):
    walk = Walk(cl.url)
    for _ in range(3):
        walk.step()
    cl.databases.primary.stop()
    try:
        walk.run()  # every page a 200
        walk.check(set(orders))
        assert {n for n, _ in walk.pages[3:]} <= {"replica1", "replica2"}
        first = requests.get(f"{cl.url}/orders", timeout=30)
        assert first.status_code == 200
        write = requests.post(f"{cl.url}/api/orders", json={"customer": "Ana", "amount": "1.00"}, timeout=30)
        assert write.status_code == 503
        assert write.json()["error"]["code"] == "unavailable"
        assert int(write.headers["Retry-After"]) > 0
    finally:
        cl.databases.primary.start()


def test_replicas_are_ignored_without_a_postgresql_primary(tmp_path: Path):
    """SQLite (and MariaDB) have no WAL position to compare: the app reads and writes its one
    database, as without replicas (this URL would not even connect)."""

    app = make_app(
        f"sqlite:///{tmp_path / 'one.db'}",
        DATABASE_REPLICA_URLS="postgresql+psycopg://postgres@127.0.0.1:1/nowhere",
    )
    from orders.db import migrate

    migrate(app.extensions["engine"])
    assert "router" not in app.extensions
    response = app.test_client().get("/api/orders")
    assert response.status_code == 200 and "Server-Timing" not in response.headers
    assert app.test_client().get("/healthz/nodes").get_json()["routing"] is False
    app.extensions["engine"].dispose()
