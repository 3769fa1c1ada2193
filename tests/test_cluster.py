"""Scale-out for real: three PostgreSQL nodes under Patroni (a leader, a synchronous and an
asynchronous standby), two gunicorn app servers and haproxy, all started here on loopback
(devtools/cluster.py), once for the module. No failover happens here (tests/test_failover.py has
its own cluster for those): the leader stays node1, and the standbys are node2 and node3.

What is checked is the guarantee written in docs/several-servers.md: a walk never shows a
row twice; it shows every row committed at least REPLICA_MAX_LAG_MS before its first page (or
written earlier by the same client) that is not deleted before the reader gets there; and every
page is read at a WAL position at least as far as the page before it. Replicas are made to lag on
purpose with pg_wal_replay_pause() and stopped; an app server is killed mid-scroll.

Which node read a page, and at which position, comes from the app's `Server-Timing` header.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
import time
from collections import Counter
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Page, expect
from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session

from devtools.cluster import Cluster, haproxy
from devtools.gunicorn import gunicorn
from orders.data.models import Order
from orders.data.replicas.lsn import parse_lsn
from orders.web.read_routing import HEADER

from .cluster_support import (
    APP_ENV,
    MAX_LAG_MS,
    PATRONI_LANE_A,
    ROWS,
    SEED,
    Walk,
    expected_ids,
    kill_app_server,
    screen_ids,
    scroll,
    served,
    watch_failures,
)
from .fixtures import SECRET, make_app
from .helpers import BASE, add_orders
from .logs import whole_lines

pytestmark = PATRONI_LANE_A

# haproxy's log line: ".../actconn/feconn/beconn/srv_conn/retries" with "+" when redispatched.
_RETRIED = re.compile(r" \d+/\d+/\d+/\d+/\+?[1-9]\d* ")


def test_walk_while_writing_with_a_replica_paused_mid_walk(
    cluster: Cluster, orders: list[int], primary: Engine
):
    standby = cluster.databases.standbys[1]
    paused = cluster.databases.router_name(standby)
    walk = Walk(cluster.url)
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
    # While the standby was paused (pages 5 to 19), a page whose cursor was read past the position
    # it stopped at was read elsewhere, never by that standby.
    behind = [k for k in range(6, 20) if (walk.pages[k - 1][1] or 0) > paused_at]
    assert behind, "the writer never moved the cursors past the paused replica: nothing was tested"
    assert all(walk.pages[k][0] != paused for k in behind)
    elsewhere = sum(node != paused for node, _ in walk.pages[5:20])
    print(
        f"\n{len(walk.pages)} pages, nodes {Counter(n for n, _ in walk.pages)}; while {paused} was paused "
        f"{elsewhere} of 15 pages were read elsewhere ({len(behind)} had cursors past its position); "
        f"{writes['commits']} writes"
    )


def test_rows_written_before_a_walk_all_appear_though_a_replica_is_paused(
    cluster: Cluster, orders: list[int], primary: Engine
):
    standby = cluster.databases.standbys[1]
    paused = cluster.databases.router_name(standby)
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
            response = requests.get(f"{cluster.url}/api/orders", params={"limit": 5}, timeout=30)
            first_pages[served(response)[0]] += 1
            assert newest in [int(item["id"]) for item in response.json()["items"]]
        assert first_pages[paused] == 0, first_pages
        for sort in ("newest", "oldest", "amount"):
            walk = Walk(cluster.url, sort).run()
            walk.check(set(orders) | set(new))
            assert walk.ids == expected_ids(primary, sort)
            assert paused not in {n for n, _ in walk.pages}
    finally:
        standby.resume_replay()


def test_read_your_writes_through_paused_replicas(cluster: Cluster, orders: list[int]):

    # A generous REPLICA_MAX_LAG_MS: paused replicas stay eligible for first pages, so only the
    # write's position can send this client's reads elsewhere.
    app = make_app(
        cluster.databases.primary_url,
        DATABASE_REPLICA_URLS=cluster.databases.replica_urls,
        REPLICA_MAX_LAG_MS=600_000,
    )
    # First reads until the app has seen the replicas caught up (autovacuum may write to the
    # primary meanwhile); then they stop replaying.
    deadline = time.monotonic() + 15
    while "replica" not in app.test_client().get("/api/orders").headers["Server-Timing"]:
        assert time.monotonic() < deadline, "the replicas never caught up"
        time.sleep(0.05)
    for node in cluster.databases.standbys:
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
        for node in cluster.databases.standbys:
            node.resume_replay()
        app.extensions["router"].dispose()
        app.extensions["engine"].dispose()


def test_key_rotation_mid_walk_across_two_app_servers(cluster: Cluster, orders: list[int], tmp_path: Path):
    """Rotation in two steps across app servers: old key + new fallback, then new key + old fallback.
    Mid-rotation the servers hold different lists, and a walk alternating between them goes on."""
    old, new = "old-" + SECRET, "new-" + SECRET
    base_env = {"DATABASE_REPLICA_URLS": cluster.databases.replica_urls, "PAGE_SIZE": "20"}
    with ExitStack() as stack:

        def server(key: str, fallbacks: str, name: str) -> str:
            env = {**base_env, "SECRET_KEY": key, "SECRET_KEY_FALLBACKS": fallbacks}
            url, _ = stack.enter_context(
                gunicorn(cluster.databases.primary_url, log_path=tmp_path / name, workers=1, env=env)
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
def test_replica_stopped_mid_scroll_in_chromium(cluster: Cluster, orders: list[int], page: Page):
    standby = cluster.databases.standbys[0]
    stopped = cluster.databases.router_name(standby)
    failures = watch_failures(page)
    page.goto(f"{cluster.url}/orders")
    expect(page.locator(ROWS).first).to_be_attached()
    scroll(page, lambda: page.locator(ROWS).count() >= 120, steps=400)
    standby.stop()  # Patroni stops its PostgreSQL and exits
    try:
        scroll(page, lambda: bool(page.locator("#end-of-list").count() or failures))
        assert not failures, failures
        expect(page.locator("#end-of-list")).to_be_attached()
        assert page.get_by_text("Couldn't load more").count() == 0
        assert screen_ids(page) == orders  # newest first: the seed inserts newest first
    finally:
        standby.start()
    # It answers again: back in rotation (each app process probes it within a second or so).
    deadline = time.monotonic() + 60
    nodes: set[str] = set()
    while stopped not in nodes:
        assert time.monotonic() < deadline, f"{stopped} never came back into rotation"
        response = requests.get(f"{cluster.url}/api/orders", timeout=30)
        assert response.status_code == 200, response.text  # stale pooled connections are retried
        nodes.add(served(response)[0])
        time.sleep(0.05)


CUT = -1  # statuses' key for an answer cut off after its headers


@pytest.mark.browser
def test_app_server_killed_mid_scroll(cluster: Cluster, orders: list[int], page: Page, tmp_path: Path):
    """kill -9 of one app server while Chromium scrolls and API readers page: haproxy sends the
    requests the dead server never answered to the other one (retry-on empty-response and
    conn-failure, option redispatch), so no reader sees an error status. One answer per request
    in flight may come cut off after its headers (gunicorn writes a response's headers and its
    body in two calls, and a kill between them leaves an answer no proxy can send again): broken,
    never wrong, and asked again as any client of a GET would. This test's own two app servers
    and haproxy: the module's stay up for the other tests."""
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                gunicorn(
                    cluster.databases.primary_url,
                    log_path=tmp_path / f"app{i + 1}.log",
                    workers=2,
                    threads=2,
                    env={
                        **APP_ENV,
                        "DATABASE_REPLICA_URLS": cluster.databases.replica_urls,
                        "TRUSTED_PROXIES": "1",
                    },
                )
            )
            for i in range(2)
        ]
        log = tmp_path / "haproxy.log"
        url = stack.enter_context(haproxy([base for base, _ in servers], log))
        failures = watch_failures(page)
        page.goto(f"{url}/orders")
        expect(page.locator(ROWS).first).to_be_attached()
        scroll(page, lambda: page.locator(ROWS).count() >= 120, steps=400)

        # API readers keep requests in flight on both servers, so the kill cuts some mid-answer.
        stop = threading.Event()
        statuses: Counter[int] = Counter()
        walks: list[Walk] = []

        def reader() -> None:
            while not stop.is_set():
                walk = Walk(url)
                walks.append(walk)
                while not walk.done and not stop.is_set():
                    try:
                        walk.step()
                        statuses[200] += 1
                    except requests.exceptions.ChunkedEncodingError:  # cut after its headers
                        statuses[CUT] += 1  # the walk is where it was: the same page is asked again
                    except AssertionError as err:
                        statuses[0] += 1
                        print("reader error:", err)
                        return

        threads = [threading.Thread(target=reader) for _ in range(4)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            kill_app_server(servers[0][1])
            scroll(page, lambda: bool(page.locator("#end-of-list").count() or failures))
            time.sleep(1.5)  # past haproxy's health check taking the dead server out (fall 2, 1 s)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert not failures, failures
        expect(page.locator("#end-of-list")).to_be_attached()
        assert screen_ids(page) == orders
        assert statuses[0] == 0 and statuses[200] > 0, statuses
        assert statuses[CUT] <= len(threads), statuses  # only what was in flight when it died
        for walk in walks:
            if walk.done:
                walk.check(set(orders))
                assert walk.ids == orders
    # haproxy's log: some requests were sent again (the retries field, "+N" when redispatched),
    # so the kill did cut requests off and the test saw them answered anyway.
    retried = [line for line in whole_lines(log) if _RETRIED.search(line)]
    assert retried, "no request needed a retry: the kill cut nothing off, nothing was tested"
    print(
        f"\n{statuses[200]} API pages, {len(retried)} requests retried on the other app server, "
        f"{statuses[CUT]} cut off after their headers and asked again"
    )


def test_replicas_are_ignored_without_a_postgresql_primary(tmp_path: Path):
    """SQLite (and MariaDB) have no WAL position to compare: the app reads and writes its one
    database, as without replicas (this URL would not even connect)."""

    app = make_app(
        f"sqlite:///{tmp_path / 'one.db'}",
        DATABASE_REPLICA_URLS="postgresql+psycopg://postgres@127.0.0.1:1/nowhere",
    )
    from orders.data.db import migrate

    migrate(app.extensions["engine"])
    assert "router" not in app.extensions
    response = app.test_client().get("/api/orders")
    assert response.status_code == 200 and "Server-Timing" not in response.headers
    assert app.test_client().get("/healthz/nodes").get_json()["routing"] is False
    app.extensions["engine"].dispose()
