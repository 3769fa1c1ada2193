"""Finding things in the browser (Chromium on SQLite and PostgreSQL): the sticky find bar, Top and
End in one request each, go to landing exactly on its row (marked, named by the address, kept on
reload), sort and status safe for keyboards, search, the estimate and the position indicator.
Waits are web-first assertions or wait_for_function on a condition, never fixed sleeps."""

from __future__ import annotations

import datetime as dt
import os
import re
from decimal import Decimal
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.data.models import Order
from orders.data.names import name_key
from orders.data.seed import seed_orders

from .live import ON_TOP, ROWS, engine_of, expect_on_top, local_only

pytestmark = pytest.mark.browser
DOCS = Path(__file__).resolve().parent.parent / "docs"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
PHONE = {"width": 390, "height": 760}


def given(live, rows: int = 900) -> None:  # type: ignore[no-untyped-def]
    local_only(live, "seeds its own orders")
    live.app.config.update(AUTO_PAGES=10_000)
    with Session(engine_of(live)) as session:
        seed_orders(session, rows, now=NOW)


def list_requests(page: Page) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if re.search(r"/orders(\?|$)", r.url) else None)
    return seen


def bar_in_view(page: Page) -> None:
    expect(page.locator("#find-bar")).to_be_in_viewport()
    top = page.locator("#find-bar").evaluate("b => b.getBoundingClientRect().top")
    assert abs(top) <= 1, top


def first_id(session: Session, stmt) -> int:  # type: ignore[no-untyped-def]
    return int(session.scalars(stmt.limit(1)).one())


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_bar_and_headers_stay_in_view_top_and_end_take_one_request(live, page: Page, viewport, tmp_path):
    given(live)
    if viewport == "phone":
        page.set_viewport_size(PHONE)
    with Session(engine_of(live)) as session:
        newest = first_id(session, select(Order.id).order_by(Order.created_at.desc(), Order.id.desc()))
        oldest = first_id(session, select(Order.id).order_by(Order.created_at.asc(), Order.id.asc()))
    page.goto(live.url + "/orders")
    page.mouse.move(200, 400)
    for _ in range(40):  # 2,000 px down, as rows load below
        if page.evaluate("() => window.scrollY") >= 2000:
            break
        page.mouse.wheel(0, 400)
        page.wait_for_timeout(50)  # pacing for the wheel, not a timing assertion
    assert page.evaluate("() => window.scrollY") >= 2000
    # Scrolled down, the controls are tucked away and the bar's last line (where the reader is)
    # stays (tests/test_browser_phone.py measures it); a little scroll up brings them back.
    expect(page.locator("#find-position")).to_be_in_viewport()
    page.mouse.wheel(0, -100)
    page.wait_for_function("() => !document.documentElement.classList.contains('bar-tucked')")
    bar_in_view(page)
    if viewport == "desktop":
        header = page.locator("#orders thead th").first
        expect(header).to_be_in_viewport()
        # The headers sit right below the bar, and no row is hidden under either.
        bar_bottom = page.locator("#find-bar").evaluate("b => b.getBoundingClientRect().bottom")
        assert abs(header.evaluate("h => h.getBoundingClientRect().top") - bar_bottom) <= 2
    # The docs' screenshots: SCREENSHOTS=1 writes them into docs/ (else beside the test's files).
    shots = DOCS if os.environ.get("SCREENSHOTS") == "1" else tmp_path
    page.screenshot(path=str(shots / f"screenshot-find-{viewport}.png"))

    # From a deep place (as a shared link opens it): Top is one request, the newest row on top.
    page.goto(live.url + "/orders")
    page.get_by_label("Go to date and time").fill("2026-11-30T08:00")
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page).to_have_url(re.compile(r"#order-\d+$"))
    requests = list_requests(page)
    page.get_by_role("link", name="Top", exact=True).click()
    expect_on_top(page, str(newest))
    bar_in_view(page)
    page.wait_for_function("() => !window.ordersList.busy()")
    # One request for the top (the sentinels then prefetch the next page, as on any page).
    tops = [u for u in requests if not re.search(r"after=|before=|/orders/new", u)]
    assert tops == [live.url + "/orders"], requests

    # End: one request, the oldest row in view with the end of the list.
    requests.clear()
    end_url = page.get_by_role("link", name="End", exact=True).get_attribute("href")
    if viewport == "desktop":
        page.locator("#find-bar h1").click()  # focus out of any field: End is the list's key
        page.keyboard.press("End")
    else:
        page.get_by_role("link", name="End", exact=True).click()
    expect(page.locator(f"#order-{oldest}")).to_be_in_viewport()
    expect(page.locator("#end-of-list")).to_be_in_viewport()
    bar_in_view(page)
    assert requests.count(live.url + end_url) == 1, requests  # one request, from the end
    # Home comes back to the top in one request.
    page.locator("#find-bar h1").click()
    page.keyboard.press("Home")
    expect_on_top(page, str(newest))


def expect_landed(page: Page, order_id: int) -> None:
    row = page.locator(f"#order-{order_id}")
    expect(page).to_have_url(re.compile(rf"#order-{order_id}$"))
    page.wait_for_function(ON_TOP, arg=str(order_id))
    expect(row).to_have_class(re.compile(r"\bis-target\b"))
    expect(row).to_be_focused()
    expect(page.locator("#find-status")).to_contain_text(f"#{order_id}")
    # Rows above it load (the earlier-orders sentinel is right there): it does not move.
    page.wait_for_function("() => !window.ordersList.busy()")
    page.wait_for_function(ON_TOP, arg=str(order_id))
    bar_in_view(page)


@pytest.mark.parametrize("sort", ["newest", "amount", "customer"])
def test_go_to_puts_that_exact_row_at_the_top_marked_and_a_reload_opens_at_it(live, page: Page, sort):
    given(live)
    with Session(engine_of(live)) as session:
        if sort == "newest":
            when = NOW - dt.timedelta(minutes=150, seconds=0)
            typed = when.strftime("%Y-%m-%dT%H:%M")
            expected = first_id(
                session,
                select(Order.id)
                .where(Order.created_at <= when)
                .order_by(Order.created_at.desc(), Order.id.desc()),
            )
        elif sort == "amount":
            typed = "512.30"
            expected = first_id(
                session,
                select(Order.id)
                .where(Order.amount <= Decimal(typed))
                .order_by(Order.amount.desc(), Order.id.desc()),
            )
        else:
            typed = "ÚR"  # any case and accent: the same place as "ur"
            expected = first_id(
                session,
                select(Order.id)
                .where(Order.customer_key >= name_key(typed))
                .order_by(Order.customer_key, Order.id),
            )
    page.emulate_media(reduced_motion="reduce")
    page.goto(live.url + (f"/orders?sort={sort}" if sort != "newest" else "/orders"))
    field = page.locator('form.jump [name="to"]')
    field.fill(typed)
    page.get_by_role("button", name="Go", exact=True).click()
    expect_landed(page, expected)
    expect(field).to_have_value(typed)  # the field keeps what was typed
    page.reload()
    page.wait_for_function(ON_TOP, arg=str(expected))
    expect(page.locator(f"#order-{expected}")).to_have_class(re.compile(r"\bis-target\b"))


def test_a_value_the_sort_cannot_hold_is_an_inline_message_and_the_list_stays(live, page: Page):
    given(live, 60)
    page.goto(live.url + "/orders?sort=amount")
    first = page.locator(ROWS).first.get_attribute("data-id")
    field = page.locator('form.jump [name="to"]')
    field.fill("99999999999")  # eleven digits: NUMERIC(12, 2) cannot hold it
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page.locator("#jump-message")).to_contain_text("amount")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_be_focused()
    expect(page.locator(ROWS).first).to_have_attribute("data-id", first)
    expect(page).to_have_url(live.url + "/orders?sort=amount")


def test_arrow_keys_on_sort_do_not_navigate_and_apply_keeps_the_focus(live, page: Page):
    given(live, 60)
    page.goto(live.url + "/orders")
    sort = page.get_by_label("Sort")
    sort.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    expect(sort).to_be_focused()
    expect(page).to_have_url(live.url + "/orders")
    expect(sort).to_have_value("amount")
    page.get_by_role("button", name="Apply").press("Enter")
    expect(page).to_have_url(re.compile(r"sort=amount"))
    expect(page.get_by_role("button", name="Apply")).to_be_focused()


def test_search_by_number_and_by_name(live, page: Page):
    given(live, 200)
    with Session(engine_of(live)) as session:
        some = first_id(session, select(Order.id).order_by(Order.id.desc()).offset(7))
    page.goto(live.url + "/orders")
    expect(page.locator(".find-where .estimate")).to_contain_text(re.compile(r"about [0-9,]+ orders"))
    box = page.get_by_role("searchbox")
    box.fill(str(some))
    box.press("Enter")
    expect(page).to_have_url(re.compile(rf"/orders/{some}$"))
    page.goto(live.url + "/orders")
    box.fill("99999999")
    box.press("Enter")
    expect(page.locator("#search-message")).to_have_text("There is no order #99999999.")
    expect(box).to_have_value("99999999")
    expect(box).to_be_focused()
    box.fill("úRS")
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"q=%C3%BARS"))
    expect(page.locator(f"{ROWS} td.customer").first).to_have_text("Úrsula Freitas")  # the new page's rows
    names = page.locator(f"{ROWS} td.customer").all_inner_texts()
    assert names and set(names) == {"Úrsula Freitas"}
    expect(box).to_have_value("úRS")
    expect(box).to_be_focused()


def test_the_position_follows_the_row_in_view(live, page: Page):
    given(live)
    page.goto(live.url + "/orders?sort=customer")
    position = page.locator("#find-position")
    expect(position).to_have_text("at A…")
    # Wheel on as a reader does: one 9,000 px wheel only reaches the end of the rows loaded so
    # far (about 20 when it comes early), which are all still "A" names.
    for _ in range(60):
        if position.text_content() != "at A…":
            break
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(100)
    expect(position).not_to_have_text("at A…")
    expect(position).to_have_text(re.compile(r"^at [A-Z]…$"))
