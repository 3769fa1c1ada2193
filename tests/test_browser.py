"""Browser tests in a real Chromium: scroll, footer, keyboard, back button, banner, errors, a11y.

The app runs on SQLite (the default) and on PostgreSQL. Waits are web-first assertions.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import threading
import time
from decimal import Decimal

import pytest
from playwright.sync_api import Page
from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.data.models import Order
from orders.finding.sorts import LIBRARY_SORTS

from .browsers import EVERY_ENGINE, expect
from .helpers import BASE, add_orders, delete_orders, seed, unpaged_ids
from .live import ROWS, ROWS_MOVING, add_new_orders, engine_of, given, newest_ids, screen_rows, scroll_still

pytestmark = [pytest.mark.browser]


def scroll_to_end(page: Page, max_steps: int = 2000) -> None:
    for _ in range(max_steps):
        if page.locator("#end-of-list").count():
            return
        load_more = page.locator("#more").get_by_role("button", name="Load more orders")
        if load_more.count() and load_more.is_visible():
            load_more.click()
        page.mouse.wheel(0, 1600)
        page.wait_for_timeout(30)
    raise AssertionError("never reached the end of the list")


@EVERY_ENGINE
@ROWS_MOVING
def test_scroll_everything_while_others_insert_and_delete(live, page: Page, browser_name):
    # The whole list scrolled without clicks, every row kept to be read at the end: its own.
    # 2,400 orders in Chromium (on SQLite and PostgreSQL), 1,200 in Firefox and WebKit: what they
    # do differently (scroll anchoring, fractional rows) shows in every page, and the half saves
    # 27 CPU s a run of the suite.
    size = 2400 if browser_name == "chromium" else 1200
    initial = given(live, size, AUTO_PAGES=10_000, MAX_ROWS_IN_PAGE=0) or []
    engine = engine_of(live)
    oldest = BASE - dt.timedelta(minutes=size // 3)
    rng = random.Random(1)
    deleted: set[int] = set()
    tail_inserts: list[int] = []  # older than everything: still ahead of the reader when written
    other_inserts: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            newer = (BASE + dt.timedelta(minutes=1), "Newer than the top", Decimal("1.00"), "paid")
            inside_at = BASE - dt.timedelta(minutes=rng.randint(0, size // 3))
            inside = (inside_at, "Inside", Decimal("2.00"), "paid")
            tail = (oldest - dt.timedelta(minutes=n), "Tail", Decimal("3.00"), "paid")
            ids = add_orders(engine, [newer, inside, tail])
            other_inserts.extend(ids[:2])
            tail_inserts.append(ids[2])
            victims = rng.sample(sorted(set(initial) - deleted), 2)  # shown or not yet shown
            delete_orders(engine, victims)
            deleted.update(victims)
            time.sleep(0.05)

    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(19)).to_be_attached()
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        # Write while the reader scrolls through the first 60% of the list, then let it finish.
        while page.locator(ROWS).count() < 0.6 * len(initial):
            page.mouse.wheel(0, 1600)
            page.wait_for_timeout(30)
    finally:
        stop.set()
        thread.join()
    scroll_to_end(page)

    on_screen = screen_rows(page)
    ids = [row_id for _, row_id in on_screen]
    assert len(ids) == len(set(ids)), "a row appears twice"
    stable = set(initial) - deleted
    assert stable <= set(ids), f"{len(stable - set(ids))} orders that existed throughout are missing"
    assert set(tail_inserts) <= set(ids), "rows inserted ahead of the reader did not appear in their place"
    assert on_screen == sorted(on_screen, reverse=True), "rows are not strictly in sort order"
    assert len(deleted) > 20 and len(tail_inserts) > 10, "the writer hardly ran"
    # Rows newer than the top never slide in under the reader.
    with Session(engine) as session:
        newer = set(session.scalars(select(Order.id).where(Order.customer == "Newer than the top")))
    assert not newer & set(ids)
    expect(page.locator("#orders")).to_have_attribute("aria-busy", "false")
    expect(page.locator("#announcer")).to_contain_text("End of orders")


def test_without_javascript_next_links_walk_everything(live, browser):
    if live.app is None:  # a deployment's own list: six pages by their links, as its API walks them
        ids = newest_ids(live, 120)
        context = browser.new_context(java_script_enabled=False)
        page = context.new_page()
        page.goto(live.url + "/orders")
        seen = []
        for _ in range(6):
            seen += [int(i) for i in page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")]
            with page.expect_navigation(wait_until="load"):
                page.locator("a[rel=next]").first.click()
        assert seen == ids
        page.get_by_role("link", name=re.compile("Previous page")).click()
        expect(page.locator(ROWS)).to_have_count(20)
        context.close()
        return
    engine = engine_of(live)
    initial = seed(engine, 130)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(live.url + "/orders")
    seen: list[int] = []
    deleted = set()
    while True:
        seen += [int(i) for i in page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")]
        expect(page.locator("footer")).to_be_attached()
        # "Next page", or the "Load more orders" button after AUTO_PAGES: a link and a GET form.
        next_link = page.locator("a[rel=next]").or_(page.get_by_role("button", name="Load more orders"))
        if not next_link.count():
            break
        # Someone deletes an unseen row and inserts one above the reader between pages.
        victim = next(i for i in reversed(initial) if i not in seen and i not in deleted)
        delete_orders(engine, [victim])
        deleted.add(victim)
        add_orders(engine, [(BASE + dt.timedelta(minutes=5), "Newer", Decimal("1.00"), "paid")])
        # Wait for the next document itself: read too early, the loop saw the page before (or a
        # half-loaded one without its "Next page" link) and ended the walk short under load.
        with page.expect_navigation(wait_until="load"):
            next_link.click()
    expect(page.locator("#end-of-list")).to_be_visible()
    assert len(seen) == len(set(seen))
    assert set(seen) == set(initial) - deleted
    # And back up by "Newer orders" links.
    back = page.get_by_role("link", name=re.compile("Previous page"))
    back.click()
    expect(page.locator(ROWS)).to_have_count(20)
    context.close()


@EVERY_ENGINE
def test_footer_is_reachable_by_wheel_end_key_and_tab(live, page: Page):
    given(live, 1000, AUTO_PAGES=5)  # an operator's lower setting: a button asks after 5 loads
    page.goto(live.url + "/orders")
    load_more = page.get_by_role("button", name="Load more orders")
    for _ in range(200):
        if load_more.count():
            break
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(50)
    # Page 1 and AUTO_PAGES (5) automatic loads, then the sentinel asks for a click.
    expect(load_more).to_be_visible()
    expect(page.locator(ROWS)).to_have_count(120)
    footer = page.locator("footer")
    page.mouse.wheel(0, 5000)
    expect(footer).to_be_in_viewport()
    # By keyboard: Tab from "Load more" goes straight to the footer's links.
    load_more.focus()
    page.keyboard.press("Tab")
    expect(footer.get_by_role("link").first).to_be_focused()
    # "Load more" works by keyboard and moves focus to the first new row.
    load_more.focus()
    page.keyboard.press("Enter")
    # 20 more rows (the next page's sentinel loads on by itself once it comes into view: after
    # the click the automatic loads start again, so a slow machine may already hold 160).
    expect(page.locator(ROWS).nth(139)).to_be_attached()
    expect(page.locator(ROWS).nth(120)).to_be_focused()
    expect(page.locator("#announcer")).to_have_text("20 more orders loaded.")
    expect(page.locator("#orders")).to_have_attribute("aria-busy", "false")
    # The End key (focus not in a field) opens the list's last rows, the footer right below them
    # (tests/test_browser_find.py checks it is one request).
    # Focus out of every field (WebKit tucks the heading under the bar here: no click on it).
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("End")
    expect(page.locator("#end-of-list")).to_be_in_viewport()
    expect(footer).to_be_in_viewport()


def test_keyboard_alone_reaches_the_end_and_the_footer_on_a_phone(live, browser):
    """A phone (390x844) with a keyboard and no pointer: Tab reaches the find bar's End link,
    Enter opens the end of the list with focus on its end, and the next Tab is the footer's link
    (it took 94 presses through every loaded row when focus stayed on End)."""
    given(live, 1000)
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()

    def tab_until(condition: str, limit: int) -> int:
        for presses in range(1, limit + 1):
            page.keyboard.press("Tab")
            if page.evaluate(f"() => {{ const e = document.activeElement; return !!e && ({condition}); }}"):
                return presses
        raise AssertionError(f"{limit} presses of Tab never reached {condition}")

    to_end = tab_until("e.matches('a') && e.textContent.trim() === 'End'", 40)
    expect(page.locator(":focus")).to_be_in_viewport()  # the focused control is on screen
    page.keyboard.press("Enter")
    expect(page.locator("#end-of-list")).to_be_in_viewport()
    expect(page.locator("#end-of-list")).to_be_focused()  # so the footer is the next stop
    to_footer = tab_until("!!e.closest('footer')", 2)
    expect(page.locator(":focus")).to_be_in_viewport()
    print(f"\nphone, keyboard only: {to_end} Tabs to End, then {to_footer} to the footer")
    context.close()


def test_back_button_returns_to_the_same_place_without_duplicates(live, page: Page):
    given(live, 400)
    page.goto(live.url + "/orders")
    for _ in range(100):
        if page.locator(ROWS).count() >= 80:
            break
        page.mouse.wheel(0, 800)
        page.wait_for_timeout(50)
    scroll_still(page)  # the wheels' scroll has landed: the place the click records is read below
    target = page.locator(ROWS).nth(70)
    target.scroll_into_view_if_needed()
    order_id = target.get_attribute("data-id")
    top_before = target.evaluate("r => r.getBoundingClientRect().top")
    target.get_by_role("link").click()
    expect(page.get_by_role("heading", name=f"Order #{order_id}")).to_be_visible()
    page.go_back()
    # The address named the first row in view; Back opens the list there (no snapshot: one
    # request), with that row on top, and the clicked row where it was give or take that row.
    expect(page.locator(f'{ROWS}[data-id="{order_id}"]')).to_be_in_viewport()
    top_after = page.locator(f'{ROWS}[data-id="{order_id}"]').evaluate("r => r.getBoundingClientRect().top")
    assert abs(top_after - top_before) < 60, (top_before, top_after)
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")
    assert len(ids) == len(set(ids))
    # The list still scrolls on from where it was.
    page.mouse.wheel(0, 5000)
    expect(page.locator(ROWS)).not_to_have_count(len(ids))
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")
    assert len(ids) == len(set(ids))


@ROWS_MOVING
def test_new_orders_banner_appears_and_nothing_moves_until_clicked(live, page: Page):
    given(live, 60, NEW_ORDERS_POLL_SECONDS=1)
    page.goto(live.url + "/orders")
    first_before = page.locator(ROWS).first.get_attribute("data-id")
    new_ids = add_new_orders(live, [f"Brand new {m}" for m in (1, 2, 3)])
    banner = page.get_by_role("link", name=re.compile("3 new orders"))
    expect(banner).to_be_visible(timeout=10_000)
    assert page.locator(ROWS).first.get_attribute("data-id") == first_before
    banner.click()
    expect(page.locator(ROWS).first).to_have_attribute("data-id", str(new_ids[-1]))


def test_bad_cursor_page_says_so_and_links_to_the_top(live, page: Page):
    given(live, 30)
    response = page.goto(live.url + "/orders?after=not-a-real-cursor.x")
    assert response.status == 400
    expect(page.get_by_role("heading")).to_contain_text("does not point anywhere")
    expect(page.get_by_text("cursor is")).to_be_visible()
    page.get_by_role("link", name="Go to the top of the orders").click()
    if live.app is None:  # a deployment's own list: its newest first
        expect(page.locator(ROWS).first).to_have_attribute("data-id", str(newest_ids(live, 1)[0]))
    else:
        expect(page.locator(ROWS)).to_have_count(30)


@pytest.mark.parametrize("failure", ["network", "server"])
def test_failed_fragment_shows_retry_and_retry_continues_without_duplicates(live, page: Page, failure):
    given(live, 100)
    newest_first = (
        newest_ids(live, 200)
        if live.app is None
        else unpaged_ids(engine_of(live), LIBRARY_SORTS["newest"], None)
    )
    failed = []

    def fail_once(route):
        if not failed:
            failed.append(route.request.url)
            if failure == "network":
                route.abort("connectionreset")
            else:
                route.fulfill(status=503, body="unavailable")
        else:
            route.continue_()

    page.route(re.compile(r".*/orders\?.*after=.*"), fail_once)
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS)).to_have_count(20)
    page.mouse.wheel(0, 3000)
    retry = page.get_by_role("button", name="Retry")
    expect(retry).to_be_visible()
    expect(page.locator("#more")).to_contain_text("Couldn't load more orders")
    expect(page.locator("#orders")).to_have_attribute("aria-busy", "false")
    retry.click()
    # The retried page arrives (and, the reader being at the bottom, its sentinel may load the
    # next page at once: under load the 40 rows were gone to 60 before a poll saw them).
    page.wait_for_function("n => document.querySelectorAll('#rows > tr[data-id]').length >= n", arg=40)
    page.mouse.wheel(0, 10_000)
    page.wait_for_function("n => document.querySelectorAll('#rows > tr[data-id]').length > n", arg=40)
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => +r.dataset.id)")
    assert len(ids) == len(set(ids))
    assert ids == newest_first[: len(ids)], "a row skipped or out of order after the retry"
    assert len(failed) == 1


def test_a_fragment_delivered_twice_adds_no_duplicate_rows(live, page: Page):
    given(live, 100)
    page.goto(live.url + "/orders")
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !window.ordersList.busy()")
    # The rows shown and the next page's link read in one task of the page: the first sentinel's
    # own load landed between two reads once in a full run (20 rows counted, then page 3's link:
    # 60 rows, none twice). Read together they agree whether that load came before or comes after.
    shown, next_url = page.evaluate(
        f"""() => [document.querySelectorAll('{ROWS}').length,
                   document.querySelector('#more .next-link').getAttribute('href')]"""
    )
    # Replay the same fragment into the list twice, as a re-fired sentinel would.
    page.evaluate(
        """url => htmx.ajax('GET', url, {target: '#more', swap: 'outerHTML'})
                  .then(() => htmx.ajax('GET', url, {target: '#more', swap: 'outerHTML'}))""",
        next_url,
    )
    page.wait_for_timeout(500)
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")
    assert len(ids) == len(set(ids)) == shown + 20


def test_changing_sort_starts_a_new_walk(live, page: Page):
    given(live, 80)
    page.goto(live.url + "/orders")
    page.get_by_label("Sort").select_option("amount")
    page.get_by_role("button", name="Apply").click()  # a change alone never navigates (WCAG 3.2.2)
    expect(page).to_have_url(re.compile(r"sort=amount"))
    # As for the status below, the address changes before the new rows are in: wait (bounded)
    # until the rows on the page are the new walk's, at least a page of them in amount order.
    page.wait_for_function(
        "() => { const a = [...document.querySelectorAll('#rows > tr[data-id] td.amount')]"
        ".map(c => parseFloat(c.textContent.replace(/,/g, '')));"
        " return a.length >= 20 && a.every((v, i) => i === 0 || a[i - 1] >= v); }"
    )
    page.wait_for_load_state("networkidle")
    amounts = [Decimal(a.replace(",", "")) for a in page.locator(f"{ROWS} td.amount").all_inner_texts()]
    assert amounts == sorted(amounts, reverse=True) and len(amounts) >= 20
    page.get_by_label("Status").select_option("paid")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"status=paid"))
    # The address changes before the new rows are swapped in (a fresh CI run read none): wait
    # for the first row of the new walk, then for every load to end, then read them all.
    expect(page.locator(f"{ROWS} .status").first).to_have_text(re.compile(r"\s*paid\s*"))
    page.wait_for_load_state("networkidle")
    assert {s.strip() for s in page.locator(f"{ROWS} .status").all_text_contents()} == {"paid"}


@EVERY_ENGINE
def test_no_serious_accessibility_issues(live, page: Page):
    from axe_playwright_python.sync_playwright import Axe

    given(live, 100)
    page.goto(live.url + "/orders")
    page.mouse.wheel(0, 2000)
    expect(page.locator(ROWS)).not_to_have_count(20)
    results = Axe().run(page)
    serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not serious, [(v["id"], v["help"]) for v in serious]


def colour_share(png: bytes, rgb: tuple[int, int, int]) -> float:
    """The share of a screenshot's pixels that are this colour (within a small tolerance)."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=image.width * image.height) or []
    near = sum(n for n, c in colours if all(abs(a - b) <= 6 for a, b in zip(c, rgb, strict=True)))
    return near / (image.width * image.height)


# Colours from static/app.css: the page background, and the badge backgrounds of each status.
BACKGROUND = (0xF6, 0xF7, 0xF9)
BADGES = {"paid": (0xE3, 0xF4, 0xE8), "shipped": (0xE3, 0xEC, 0xFA), "pending": (0xFD, 0xF1, 0xD6)}


def test_screenshots_look_like_a_product(live, page: Page, tmp_path):
    """What a reader sees, checked on the pixels: styled (the stylesheet got past the CSP),
    statuses colour-coded, a white table on the page's grey, and a phone layout of cards."""
    given(live, 200)
    page.set_viewport_size({"width": 1200, "height": 900})
    page.goto(live.url + "/orders")
    page.mouse.wheel(0, 1500)
    expect(page.locator(ROWS)).not_to_have_count(20)
    page.wait_for_function("() => !window.ordersList.busy()")  # rows on screen, not skeletons
    desktop = page.screenshot(path=tmp_path / "orders.png")
    # The list fills the middle in white; the grey page shows at the sides (72rem wide main).
    assert 0.05 < colour_share(desktop, BACKGROUND) < 0.5
    assert colour_share(desktop, (0xFF, 0xFF, 0xFF)) > 0.4
    for status, colour in BADGES.items():
        assert colour_share(desktop, colour) > 0.001, f"no {status} badge colour on screen"
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live.url + "/orders")
    phone = page.screenshot(path=tmp_path / "orders-mobile.png")
    # Nothing sticks out sideways on a phone, and every order is a card of two short lines.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    expect(page.locator("thead")).to_be_hidden()
    heights = page.locator(ROWS).evaluate_all("rows => rows.map(r => r.getBoundingClientRect().height)")
    assert all(40 < h < 90 for h in heights), heights
    # The names line up from card to card.
    lefts = page.locator(f"{ROWS} td.customer").evaluate_all(
        "cells => cells.map(c => c.getBoundingClientRect().left)"
    )
    assert max(lefts) - min(lefts) < 1, lefts
    assert colour_share(phone, BADGES["paid"]) > 0.001
