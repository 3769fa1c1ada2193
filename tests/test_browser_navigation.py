"""An order opened from the list always ends visibly (static/js/navigation.js), in a real Chromium.

A walk of the app with PostgreSQL frozen found a click on an order that showed nothing for 16 s,
then nothing at all: htmx's timeout (15 s) came before the server's own bound (20 s), and htmx 2
left an error answer unswapped. Now:

- the server's error page is shown when it answers one (a real 503: the orders table locked by
  another connection until the app's statement timeout ends the read), with "Try again" at the
  same address, which opens the order once the lock is gone;
- when no answer comes at all, the browser goes to the address itself. No answer cannot be made
  here without freezing the whole server for every test, so Playwright aborts that one request
  (a network failure), and the navigation that follows reaches the real server;
- htmx's timeout outlasts the server's bound, read from the settings the page was served with.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect
from sqlalchemy import text

from orders.views.templating import HTMX_TIMEOUT_MARGIN_MS, server_bound_ms

from .live import ROWS, engine_of, given

pytestmark = [pytest.mark.browser]


def open_list(live: Any, page: Page) -> str:
    """The list with 60 orders; returns the id of the tenth row."""
    given(live, 60)
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(9)).to_be_visible()
    return str(page.locator(ROWS).nth(9).get_attribute("data-id"))


@pytest.mark.parametrize("live_db_url", ["postgresql"], indirect=True)
def test_an_order_the_database_cannot_read_shows_the_servers_page_and_try_again(live, page: Page):
    order_id = open_list(live, page)
    with engine_of(live).connect() as locker:
        locker.execute(text("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE"))
        page.locator(f"#order-{order_id}").get_by_role("link").click()
        # The app's statement timeout (5 s) ends the read: its 503 page, not silence.
        expect(page.get_by_role("heading", name="The orders are unavailable for a moment")).to_be_visible(
            timeout=20_000
        )
        expect(page).to_have_url(re.compile(rf"/orders/{order_id}$"))
        locker.rollback()
    page.get_by_role("link", name="Try again").click()
    expect(page.get_by_role("heading", name=f"Order #{order_id}")).to_be_visible()


def test_an_order_whose_request_gets_no_answer_is_opened_by_the_browser_itself(live, page: Page):
    order_id = open_list(live, page)
    failed: list[str] = []

    def network_fails_once(route: Route) -> None:
        if route.request.headers.get("hx-boosted") and not failed:
            failed.append(route.request.url)
            route.abort("connectionreset")
        else:
            route.continue_()

    page.route(re.compile(rf"/orders/{order_id}$"), network_fails_once)
    page.locator(f"#order-{order_id}").get_by_role("link").click()
    expect(page.get_by_role("heading", name=f"Order #{order_id}")).to_be_visible()
    assert failed, "the boosted request was never sent"
    expect(page).to_have_url(re.compile(rf"/orders/{order_id}$"))


def test_htmx_waits_longer_than_the_servers_own_bound(live, page: Page):
    if live.app is None:  # a deployment's bound is its own: htmx waits past the margin, as told
        page.goto(live.url + "/orders")
        config = json.loads(page.locator('meta[name="htmx-config"]').get_attribute("content") or "{}")
        assert config["defaultTimeout"] > HTMX_TIMEOUT_MARGIN_MS
        assert page.evaluate("htmx.config.defaultTimeout") == config["defaultTimeout"]
        return
    live.app.config.update(DATABASE_READ_TIMEOUT_MS=40_000)
    page.goto(live.url + "/orders")
    config = json.loads(page.locator('meta[name="htmx-config"]').get_attribute("content") or "{}")
    bound = server_bound_ms(live.app.config)
    assert bound >= 40_000 + 1000 * live.app.config["DATABASE_CONNECT_TIMEOUT_S"]
    assert config["defaultTimeout"] == bound + HTMX_TIMEOUT_MARGIN_MS
    assert page.evaluate("htmx.config.defaultTimeout") == config["defaultTimeout"]
