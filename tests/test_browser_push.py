"""New orders, pushed (issue 41, item 3), in a real Chromium on each engine: an order POSTed while
a list is open at its top shows the "1 new order" pill through the live stream (the poll is set
to an hour, so nothing else can show it), the pill covers none of the column headers, and the
reader's focus and place stay as they were. A stream refused (the process full) leaves the list
polling, as before.

How fast is measured, not asserted here: each test prints the seconds from the POST's answer to
the pill; bench/stream_cost.py measures the stream's latency and cost at 500 open streams.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from orders.views.stream import changes

from .databases import APP_ENGINES, migrated_database
from .fixtures import clear, make_app
from .helpers import BASE, add_orders
from .live import REMOTE_URL, ROWS, LiveServer, RemoteTarget, given, scroll_still, settled

pytestmark = [pytest.mark.browser]

DESKTOP = {"width": 1280, "height": 800}
# The pill's box and the column headers' box, and whether they meet.
OVERLAP = """() => {
  const pill = document.querySelector('#new-orders a.banner').getBoundingClientRect();
  const head = document.querySelector('#orders thead').getBoundingClientRect();
  const meet = pill.bottom > head.top && pill.top < head.bottom
    && pill.right > head.left && pill.left < head.right;
  return {meet, pill: [pill.top, pill.bottom], head: [head.top, head.bottom]};
}"""
PLACE = """() => {
  const el = document.activeElement;
  const row = el && el.closest('#rows > tr[data-id]');
  return {focused: row ? row.dataset.id : (el ? el.tagName : null), y: scrollY,
          top: row ? Math.round(row.getBoundingClientRect().top) : null};
}"""


@pytest.fixture(scope="module", params=APP_ENGINES)
def push_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if REMOTE_URL:  # a deployment's own database: none made here
        yield ""
        return
    with migrated_database(request.param, tmp_path_factory.mktemp("push"), "push") as url:
        yield url


@pytest.fixture
def pushed(push_db: str) -> Iterator[LiveServer | RemoteTarget]:
    """The app with its poll set to an hour: only the stream can show the pill within a test.
    Against a deployment, the deployment (its own poll: the pill within 15 s either way)."""
    if REMOTE_URL:
        target = RemoteTarget(REMOTE_URL)
        target.require_writes("posts an order for the pill")
        yield target
        target.clean_up()
        return
    app = make_app(push_db, NEW_ORDERS_POLL_SECONDS=3600, STREAM_HEARTBEAT_SECONDS=2)
    try:
        clear(app.extensions["engine"])
        with LiveServer(app) as server:
            yield server
    finally:
        app.extensions["engine"].dispose()


def post_order(server: LiveServer | RemoteTarget, customer: str) -> None:
    if isinstance(server, RemoteTarget):
        server.create(customer, "12.50")  # deleted after the test (RemoteTarget.clean_up)
        return
    url = server.url
    body = json.dumps({"customer": customer, "amount": "12.50"}).encode()
    request = urllib.request.Request(
        url + "/api/orders", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201


def open_list(page: Page, server: LiveServer) -> None:
    """The list at its top, once its stream is open and told (its first event asks /orders/new)."""
    if server.app is not None:  # a deployment has its own
        add_orders(
            server.app.extensions["engine"],
            [(BASE + dt.timedelta(minutes=m), f"Earlier {m}", Decimal("5.00"), "paid") for m in range(80)],
        )
    page.set_viewport_size(DESKTOP)
    with page.expect_response(lambda r: "/orders/new" in r.url, timeout=15_000) as asked:
        page.goto(server.url + "/orders")
    assert asked.value.status == 200
    expect(page.locator(ROWS).first).to_be_visible()


@pytest.mark.parametrize("where", ["top", "reading"])
def test_pushed_pill_covers_no_header_and_keeps_focus_and_place(pushed: LiveServer, page: Page, where: str):
    open_list(page, pushed)
    if where == "reading":
        page.mouse.move(640, 400)
        for _ in range(10):
            page.mouse.wheel(0, 200)
            page.wait_for_timeout(40)  # pacing, as a hand's wheel
        page.wait_for_function("() => scrollY > 600")
        settled(page)  # the place is read once queued wheels and the loads they start are over
        scroll_still(page)
    # Focus on a row in view, as j/k leave it.
    row = page.locator(ROWS).nth(12 if where == "reading" else 2)
    row.focus()
    before = page.evaluate(PLACE)
    assert before["focused"] == row.get_attribute("data-id")

    post_order(pushed, "Pushed Customer")
    posted = time.monotonic()
    pill = page.get_by_role("link", name="1 new order · show")
    expect(pill).to_be_visible(timeout=15_000)
    print(f"\npill shown {time.monotonic() - posted:.2f} s after the POST's answer ({where})")

    if pushed.app is not None:  # a deployment's streams are its own to count
        assert changes_of(pushed).open_streams == 1
    geometry = page.evaluate(OVERLAP)
    assert not geometry["meet"], f"the pill covers the column headers: {geometry}"
    assert page.evaluate(PLACE) == before, "focus or place moved when the pill showed"


def changes_of(server: LiveServer | RemoteTarget) -> Any:
    if server.app is None:
        pytest.skip(f"LOCAL ONLY against {server.url}: counts the server's open streams")
    with server.app.app_context():
        return changes()


def test_a_refused_stream_leaves_the_list_polling(pushed: LiveServer, page: Page, push_db: str):
    if push_db and not push_db.startswith("sqlite"):
        pytest.skip("the fallback is the same on every engine: SQLite shows it")
    given(pushed, 0, STREAMS_PER_PROCESS=1, NEW_ORDERS_POLL_SECONDS=1)
    # Another client holds the one stream this process may hold.
    held = urllib.request.urlopen(pushed.url + "/orders/stream", timeout=10)
    try:
        assert held.status == 200
        with page.expect_response(lambda r: "/orders/stream" in r.url, timeout=15_000) as refused:
            open_list(page, pushed)
        assert refused.value.status == 503
        assert refused.value.headers["retry-after"] == "1"
        post_order(pushed, "Polled Customer")
        expect(page.get_by_role("link", name="1 new order · show")).to_be_visible(timeout=15_000)
    finally:
        held.close()


def test_the_stream_closes_when_the_page_goes(pushed: LiveServer, page: Page):
    open_list(page, pushed)
    watcher = changes_of(pushed)
    assert watcher.open_streams == 1
    page.goto(pushed.url + "/healthz")
    # The server notices the closed socket at its next look (every TICK_S) and gives the place back.
    for _ in range(100):
        if watcher.open_streams == 0:
            break
        time.sleep(0.1)
    assert watcher.open_streams == 0
