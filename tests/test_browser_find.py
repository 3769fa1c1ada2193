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
from typing import Any

import pytest
from playwright.sync_api import Page
from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.data.models import Order
from orders.data.names import name_key
from orders.data.seed import CUSTOMERS, seed_orders

from .browsers import EVERY_ENGINE, GECKO_TOO, expect
from .live import (
    FIRST_IN_VIEW,
    INSET,
    ON_TOP,
    ROWS,
    api_first,
    api_json,
    api_rows,
    engine_of,
    expect_at_page_top,
    settled,
)
from .live import given as live_given

pytestmark = pytest.mark.browser
DOCS = Path(__file__).resolve().parent.parent / "docs"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
PHONE = {"width": 390, "height": 760}


def given(live: Any, rows: int = 900) -> None:
    if live_given(live, 0, AUTO_PAGES=10_000) is None:
        return  # a deployment's own orders, as they are
    with Session(engine_of(live)) as session:
        seed_orders(session, rows, now=NOW, customers=CUSTOMERS)  # the 25 names the tests look for


def list_requests(page: Page) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if re.search(r"/orders(\?|$)", r.url) else None)
    return seen


def bar_in_view(page: Page) -> None:
    expect(page.locator("#find-bar")).to_be_in_viewport()
    top = page.locator("#find-bar").evaluate("b => b.getBoundingClientRect().top")
    assert abs(top) <= 1, top


def first_id(session: Session, stmt: Any) -> int:
    return int(session.scalars(stmt.limit(1)).one())


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_bar_and_headers_stay_in_view_top_and_end_take_one_request(live, page: Page, viewport, tmp_path):
    given(live)
    if viewport == "phone":
        page.set_viewport_size(PHONE)
    if live.app is None:  # a deployment's own orders, read through its API
        newest, oldest = int(api_first(live)["id"]), int(api_first(live, sort="oldest")["id"])
        deep = dt.datetime.fromisoformat(api_first(live)["created_at"]) - dt.timedelta(hours=4)
    else:
        with Session(engine_of(live)) as session:
            newest = first_id(session, select(Order.id).order_by(Order.created_at.desc(), Order.id.desc()))
            oldest = first_id(session, select(Order.id).order_by(Order.created_at.asc(), Order.id.asc()))
        deep = dt.datetime(2026, 11, 30, 8, 0)
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

    # From a deep place (as a shared link opens it): Top is one request, the page's top.
    page.goto(live.url + "/orders")
    page.get_by_label("Go to date and time").fill(deep.strftime("%Y-%m-%dT%H:%M"))
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page).to_have_url(re.compile(r"#order-\d+$"))
    requests = list_requests(page)
    if live.app is None:  # read again: another test's order may have come and gone meanwhile
        newest = int(api_first(live)["id"])
    page.get_by_role("link", name="Top", exact=True).click()
    if live.app is None:
        # A deployment's other tests write while this one runs: the top the page asked for is
        # the newest as read just before the click or just after the landing.
        expect(page).to_have_url(live.url + "/orders")
        page.wait_for_function("() => !window.ordersList.busy()")
        newest_after = int(api_first(live)["id"])
        on_top = page.evaluate(FIRST_IN_VIEW)
        assert on_top in (str(newest), str(newest_after)), (on_top, newest, newest_after)
        newest = int(on_top)
    expect_at_page_top(page, str(newest))
    expect(page.locator("#find-bar")).to_be_in_viewport()
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
    if live.app is None:
        newest = int(api_first(live)["id"])
    page.keyboard.press("Home")
    expect_at_page_top(page, str(newest))


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
    if live.app is None:  # a deployment's own orders: where its API's go-to lands
        typed = {"amount": "512.30", "customer": "ÚR"}.get(sort) or (
            dt.datetime.fromisoformat(api_first(live)["created_at"]) - dt.timedelta(minutes=150)
        ).strftime("%Y-%m-%dT%H:%M")
        expected = int(api_first(live, sort=sort, to=typed)["id"])
    else:
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


@EVERY_ENGINE
def test_an_address_naming_a_time_opens_with_its_row_on_top_and_a_reload_keeps_it(live, page: Page):
    """`/orders?to=...`, the address a go-to makes: the row at or before that time is the first in
    view, its top at the list's top (within a pixel: WebKit, whose scroll positions are whole pixels
    while rows are not, landed a row high, the address naming the row above), and a reload opens
    at it again."""
    given(live)
    page.set_viewport_size({"width": 1280, "height": 800})
    for depth in (60, 250, 480, 700):  # rows deep: the time is that row's
        if live.app is None:  # a deployment's own orders: the time of that row, through its API
            row = api_rows(live.url, depth + 1)[depth]
            when = dt.datetime.fromisoformat(row["created_at"]).replace(microsecond=0)
            expected = int(api_first(live, to=when.strftime("%Y-%m-%dT%H:%M:%SZ"))["id"])
        else:
            with Session(engine_of(live)) as session:
                newest = select(Order.created_at).order_by(Order.created_at.desc(), Order.id.desc())
                when = session.scalars(newest.offset(depth).limit(1)).one().replace(tzinfo=dt.UTC)
                expected = first_id(
                    session,
                    select(Order.id)
                    .where(Order.created_at <= when)
                    .order_by(Order.created_at.desc(), Order.id.desc()),
                )
        page.goto(live.url + "/orders?to=" + when.strftime("%Y-%m-%dT%H:%M:%SZ"))
        for opened in ("opened", "reloaded"):
            expect(page).to_have_url(re.compile(rf"#order-{expected}$"))
            page.wait_for_function(ON_TOP, arg=str(expected))
            settled(page)
            offset = page.evaluate(
                f"id => document.getElementById('order-' + id).getBoundingClientRect().top - {INSET}",
                str(expected),
            )
            first = page.evaluate(FIRST_IN_VIEW)
            assert (first, abs(offset) <= 1) == (str(expected), True), (opened, depth, first, offset)
            expect(page).to_have_url(re.compile(rf"#order-{expected}$"))
            if opened == "opened":
                page.reload()


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


def test_a_search_the_app_refuses_is_the_boxs_message_and_the_list_stays(live, page: Page):
    # It was a 400 error page in place of the whole list (a user trial). Now the list stays, from
    # its top, and the box says what was wrong and what is allowed, the text kept and focused.
    given(live, 60)
    page.goto(live.url + "/orders?sort=amount")
    first = page.locator(ROWS).first.get_attribute("data-id")
    box = page.get_by_role("searchbox")
    for typed, said in [
        ("a b c d e f g h i j k", "Search takes at most 10 words, not 11."),
        ("!!!", "Search needs letters or digits: the rest only separates words."),
    ]:
        box.fill(typed)
        box.press("Enter")
        expect(page.locator("#search-message")).to_have_text(said)
        expect(page.locator(".error-page")).to_have_count(0)
        expect(box).to_have_value(typed)
        expect(box).to_have_attribute("aria-invalid", "true")
        expect(box).to_have_accessible_description(said)
        expect(box).to_be_focused()
        expect(page.get_by_label("Sort")).to_have_value("amount")
        expect(page.locator(ROWS).first).to_have_attribute("data-id", first)
    # The list goes on as the list it is: its next rows come as the reader scrolls (a sentinel
    # that kept the refused search would bring an error row instead).
    shown = page.locator(ROWS).count()
    page.locator(ROWS).last.scroll_into_view_if_needed()
    page.wait_for_function("n => document.querySelectorAll('#rows > tr[data-id]').length > n", arg=shown)
    expect(page.locator("tr.error-row")).to_have_count(0)


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


def test_a_status_chosen_by_keys_shows_its_name_whole_and_says_its_count(live, browser):
    given(live, 60)
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(live.url + "/orders")
    status = page.get_by_label("Status")
    status.focus()
    page.keyboard.press("ArrowDown")
    expect(page).to_have_url(live.url + "/orders")  # waits for Apply
    chosen, shown, others = status.evaluate(
        "s => [s.value, s.options[s.selectedIndex].text,"
        " [...s.options].filter(o => !o.selected && o.value).map(o => o.text)]"
    )
    # In the box the name alone, as an applied status shows (with its count it was cut at
    # 390 px: "Paid (about"); the count is said, and the other choices keep theirs.
    assert shown == chosen.capitalize(), shown
    expect(page.locator("#find-status")).to_have_text(re.compile(r"^about [0-9,]+ orders\. Press Apply"))
    assert others and all(re.search(r" \(about [0-9,]+\)$", text) for text in others), others
    page.keyboard.press("ArrowDown")
    assert status.evaluate("s => s.options[s.selectedIndex].text") == status.input_value().capitalize()
    assert re.search(r"\(about", status.evaluate("s => s.options[1].text")), "the first's count is back"
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(rf"status={status.input_value()}"))
    context.close()


def test_search_by_number_and_by_name(live, page: Page):
    given(live, 200)
    if live.app is None:
        some = int(api_rows(live.url, 8)[7]["id"])
    else:
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
    # The new page's rows: every name has a word starting with "urs" (accents and case folded);
    # the demo's seed has one such customer, a deployment's data may have many.
    expect(page.locator(f"{ROWS} td.customer").first).to_have_text(re.compile(r"(^|\s)[ÚU]rs", re.I))
    names = page.locator(f"{ROWS} td.customer").all_inner_texts()
    if live.app is not None:
        assert names and set(names) == {"Úrsula Freitas"}
    else:
        assert names and all(re.search(r"(^| )urs", name_key(n)) for n in names), names
    expect(box).to_have_value("úRS")
    expect(box).to_be_focused()


def test_the_position_follows_the_row_in_view(live, page: Page):
    given(live)
    start, address, dy = "at A…", "/orders?sort=customer", 1200
    if live.app is None:
        # A deployment's first initial may fill thousands of rows: from the first row of its
        # second initial (the rail's bucket), up into the first.
        cursor = api_json(live, "/api/orders/rail", sort="customer")["buckets"][1]["cursor"]
        start = f"at {name_key(api_first(live, sort='customer', after=cursor)['customer'])[0].upper()}…"
        address, dy = f"/orders?sort=customer&after={cursor}", -1200
    page.goto(live.url + address)
    position = page.locator("#find-position")
    expect(position).to_have_text(start)
    # Wheel on as a reader does: one 9,000 px wheel only reaches the end of the rows loaded so
    # far (about 20 when it comes early), which are all still "A" names.
    for _ in range(60):
        if position.text_content() != start:
            break
        page.mouse.wheel(0, dy)
        page.wait_for_timeout(100)
    expect(position).not_to_have_text(start)
    expect(position).to_have_text(re.compile(r"^at [A-Z]…$"))


# The rows and column headers in view that the go-to message lies over (their ids, "thead").
UNDER_THE_MESSAGE = """() => {
  const m = document.getElementById('jump-message').getBoundingClientRect();
  const head = document.querySelector('#orders thead');
  const parts = [...document.querySelectorAll('#rows > tr[data-id]')];
  if (head && head.getClientRects().length) parts.push(head);
  return parts.filter(el => { const r = el.getBoundingClientRect();
    return r.bottom > Math.max(m.top, 0) + 1 && r.top < Math.min(m.bottom, innerHeight) - 1
      && r.right > m.left && r.left < m.right; }).map(el => el.id || 'thead');
}"""


# MiniBrowser's window (WebKit's WebDriver) is at least 447 px wide: the phone in Firefox only.
@pytest.mark.parametrize(
    "size",
    [
        pytest.param({"width": 1280, "height": 800}, id="desktop", marks=EVERY_ENGINE),
        pytest.param(PHONE, id="phone", marks=GECKO_TOO),
    ],
)
def test_a_go_to_message_covers_no_row_and_goes_when_the_field_is_edited(live, page: Page, size):
    """A QA trial typed `abc` in Go to: the server's message (five lines at 1280x800) floated under
    the field, over the column headers and the first rows, and stayed there while the field was
    edited (still quoting 'abc' when it read 'ab'), clicked away from and scrolled. It now lies
    over the bar's own top and goes when the field is edited, or at a press elsewhere."""
    given(live, 200)
    page.set_viewport_size(size)
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(10)).to_be_attached()
    field = page.locator('form.jump [name="to"]')
    message = page.locator("#jump-message")
    go = page.get_by_role("button", name="Go", exact=True)
    field.fill("abc")
    go.click()
    expect(message).to_contain_text("'abc'")
    expect(field).to_be_focused()
    assert page.evaluate(UNDER_THE_MESSAGE) == []
    page.keyboard.press("Backspace")
    expect(field).to_have_value("ab")
    expect(message).to_be_empty()
    expect(field).not_to_have_attribute("aria-invalid", "true")
    # Refused again, then a press elsewhere (the bar's last line): the message goes, the field
    # stays marked.
    go.click()
    expect(message).to_contain_text("'ab'")
    page.locator("#find-bar .find-place").click()
    expect(message).to_be_empty()
    expect(field).to_have_attribute("aria-invalid", "true")


# The go-to field's example, as wide as the field's room for text (its font, measured by a canvas).
PLACEHOLDER_ROOM = """() => {
  const field = document.querySelector('form.jump [name="to"]');
  const style = getComputedStyle(field);
  const context = document.createElement('canvas').getContext('2d');
  context.font = style.font;
  return {shown: field.offsetParent !== null, text: field.placeholder,
          needs: context.measureText(field.placeholder).width,
          room: field.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)};
}"""


@pytest.mark.parametrize("sort", ["newest", "amount", "customer"])  # a date and time, an amount, a name
def test_the_go_to_fields_example_is_whole_in_its_field(live, page: Page, sort):
    """The example in Go to (its placeholder) tells the reader what to type: a reader's trial found
    "2026-03-11 or 2026-03-11 14:30" cut at 1280 and 1024 px (250 px of text in 195). Each sort's
    example fits its field wherever the field is shown."""
    given(live, 50)
    for width, height in ((1280, 800), (1024, 600), (390, 844), (360, 740)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(live.url + f"/orders?sort={sort}")
        expect(page.locator(ROWS).first).to_be_attached()
        room = page.evaluate(PLACEHOLDER_ROOM)
        assert room["shown"], f"{width}x{height}: the go-to field is not shown"
        assert room["needs"] <= room["room"], f"{sort} at {width}x{height}: {room}"
