"""A search whose words no one name holds, in a real Chromium on each engine: the page says "No
orders match." from its first request, and nothing more is fetched (it spun through 61 requests
of empty windows before the names were asked first, orders/finding/named.py). The window is made
5 entries, so these 160 orders stand for a table far larger than one window."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from playwright.sync_api import Page, expect

from orders.finding import search_window

from .databases import APP_ENGINES, migrated_database
from .fixtures import clear, make_app
from .helpers import BASE, add_orders
from .live import REMOTE_URL, ROWS, LiveServer

pytestmark = [pytest.mark.browser]
if REMOTE_URL:
    pytestmark.append(
        pytest.mark.skip(reason=f"LOCAL ONLY, not run against {REMOTE_URL}: seeds its own database")
    )


@pytest.fixture(scope="module", params=APP_ENGINES)
def nomatch_db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with migrated_database(request.param, tmp_path_factory.mktemp("nomatch"), "nomatch") as url:
        yield url


@pytest.fixture
def served(nomatch_db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    monkeypatch.setattr(search_window, "SEARCH_WINDOW", 5)
    app = make_app(nomatch_db)
    try:
        engine = app.extensions["engine"]
        clear(engine)
        names = ["Ana Souza", "Úrsula Freitas", "Bruno Lima", "Ana Lima"]
        add_orders(
            engine,
            [(BASE - dt.timedelta(minutes=i), names[i % 4], Decimal(i + 1), "paid") for i in range(160)],
        )
        with LiveServer(app) as server:
            yield server
    finally:
        app.extensions["engine"].dispose()


def test_words_no_name_holds_say_no_orders_match_after_one_request(served: LiveServer, page: Page):
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if re.search(r"/orders(\?|$)", r.url) else None)
    page.goto(served.url + "/orders?q=ana+fre")
    expect(page.locator("#end-of-list")).to_have_text("No orders match.")
    page.wait_for_load_state("networkidle")  # what the page would fetch next, it has fetched
    assert len(requests) == 1, requests
    expect(page.locator(ROWS)).to_have_count(0)
    # Typed in the box, as a reader searches: one request again, the same answer.
    requests.clear()
    box = page.get_by_role("searchbox")
    box.fill("Freitas ÁNA")
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"q=Freitas"))
    expect(page.locator("#end-of-list")).to_have_text("No orders match.")
    page.wait_for_load_state("networkidle")
    assert len(requests) == 1, requests
    # Words one name holds still find it (Ana Lima: 40 orders, more pages as the reader scrolls).
    page.goto(served.url + "/orders?q=lim+ana")
    expect(page.locator(ROWS).first).to_contain_text("Ana Lima")
