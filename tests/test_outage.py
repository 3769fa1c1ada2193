"""The database goes down mid-scroll, for real, twice: the reader retries and loses nothing.

A throwaway PostgreSQL cluster of our own (initdb + pg_ctl as the postgres user, on a free
port) serves the app. Chromium scrolls the list; the cluster is stopped (`pg_ctl stop -m fast`)
between two fragments; the next fragment fails and the list shows "Couldn't load more" with a
Retry button, /healthz and /api/orders answer 503 with Retry-After; the cluster starts again
and Retry continues from the same cursor. The pool recovers on its own (dead connections are
pinged or retried, orders/data/db.py): the app is never restarted or disposed. At the end of the list
every order is on screen exactly once, in order.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
import requests
from playwright.sync_api import Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session

from devtools.pgserver import Server
from orders.data.db import make_engine, migrate
from orders.data.models import STATUSES, Order
from orders.finding.sorts import LIBRARY_SORTS
from orders.views.health import READY_FOR_S

from .databases import own_postgresql
from .fixtures import make_app
from .helpers import BASE, add_orders
from .live import LiveServer

pytestmark = pytest.mark.browser
ROWS = "#rows > tr[data-id]"
ORDERS = 300


@pytest.fixture
def cluster() -> Iterator[Server]:
    server, _ = own_postgresql("outage-pg-")
    with server:
        yield server


def screen_ids(page: Page) -> list[int]:
    return [int(i) for i in page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")]


def scroll_until(page: Page, done, max_steps: int = 400) -> None:
    for _ in range(max_steps):
        if done():
            return
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(40)
    raise AssertionError("scrolling never got there")


def settle(page: Page) -> None:
    """Wait until no fragment is loading and the rows stop changing.

    (wait_for_load_state("networkidle") cannot do this: it resolves at once once the page
    has been idle a first time.)
    """
    for _ in range(100):
        before = page.locator(ROWS).count()
        page.wait_for_timeout(300)
        loading = page.locator('.htmx-request, #orders[aria-busy="true"]')  # htmx's or the scroll window's
        if page.locator(ROWS).count() == before and loading.count() == 0:
            return
    raise AssertionError("the list never settled")


def health_turns(base_url: str, status: int) -> requests.Response:
    """/healthz's answer once it is `status`: it keeps a readiness answer for READY_FOR_S (a
    check right after the last one is the cached answer), so the first ask after the database
    stopped or came back may still give the old one. Bounded: a few seconds past that."""
    deadline = time.monotonic() + READY_FOR_S + 5
    while True:
        health = requests.get(f"{base_url}/healthz", timeout=10)
        if health.status_code == status or time.monotonic() > deadline:
            return health
        time.sleep(0.1)


def assert_unavailable(base_url: str) -> None:
    health = health_turns(base_url, 503)
    assert health.status_code == 503 and int(health.headers["Retry-After"]) > 0
    api = requests.get(f"{base_url}/api/orders", timeout=10)
    assert api.status_code == 503 and int(api.headers["Retry-After"]) > 0
    assert api.json()["error"]["code"] == "unavailable"


def test_database_down_mid_scroll_twice_then_retry_loses_and_repeats_nothing(cluster: Server, page: Page):
    engine = make_engine(cluster.url)
    migrate(engine)
    add_orders(
        engine,
        [
            (
                BASE - dt.timedelta(minutes=i // 3),
                f"Customer {i % 13}",
                Decimal(i) + Decimal("0.5"),
                STATUSES[i % 4],
            )
            for i in range(ORDERS)
        ],
    )
    with Session(engine) as session:
        expected = list(session.scalars(select(Order.id).order_by(*LIBRARY_SORTS["newest"].order_by())))
    engine.dispose()

    app = make_app(cluster.url, AUTO_PAGES=1000, MAX_ROWS_IN_PAGE=0)  # keep every row: all read at the end
    try:
        run_the_scroll(app, cluster, page, expected)
    finally:
        app.extensions["engine"].dispose()


def run_the_scroll(app, cluster: Server, page: Page, expected: list[int]) -> None:
    with LiveServer(app) as server:
        page.goto(f"{server.url}/orders")
        settle(page)  # the first page prefetches the next one
        retry = page.get_by_role("button", name="Retry")
        outages = 0
        for rows_before_outage in (60, 160):
            # Scroll until a few fragments have loaded, and let the last request finish.
            scroll_until(page, lambda n=rows_before_outage: page.locator(ROWS).count() >= n)
            settle(page)
            shown = screen_ids(page)

            cluster.stop()
            outages += 1
            scroll_until(page, lambda: retry.count() > 0)
            expect(page.locator("#more")).to_contain_text("Couldn't load more")
            expect(retry).to_be_visible()
            assert screen_ids(page) == shown, "a failed fragment changed the rows on screen"
            assert_unavailable(server.url)

            cluster.start()
            assert health_turns(server.url, 200).status_code == 200
            retry.click()
            # The same cursor: the next rows follow the last row shown before the outage (and
            # the fresh sentinel may already be fetching more).
            expect(page.locator(ROWS).nth(len(shown) + 19)).to_be_attached()
            ids = screen_ids(page)
            assert ids == expected[: len(ids)]

        scroll_until(page, lambda: page.locator("#end-of-list").count() > 0)
        ids = screen_ids(page)
    assert outages == 2
    assert len(ids) == len(set(ids)), "an order appears twice"
    assert set(expected) - set(ids) == set(), "orders are missing"
    assert ids == expected, "orders are out of order"
    assert app.extensions["engine"].pool.checkedout() == 0
