"""The rail in the browser (Chromium; static/js/rail.js, templates/_rail.html): dragging it with a
mouse on a desktop and with a finger on a phone, or keys on the focused rail, opens the list at
the first row of the bucket released on, in one request (none while dragging), the address
naming it and Back returning; the rail is a slider axe finds no serious issue with; without
JavaScript it is a list of links that open the same rows; orders written while a reader drags
move neither the landing (the bucket's first row as it is then) nor the counts (asked again).
Waits are web-first assertions or wait_for_function on a condition, never fixed sleeps.

Against a deployment (BASE_URL) they read its own orders: a rail of weeks needs orders over
weeks (a default `make run`'s 300,000 span 69 days; one of a few thousand spans hours, and the
tests that need weeks say so and skip), the first row of a bucket is the JSON API's, and the test
that writes does so through the API (its own orders only, deleted after it)."""

from __future__ import annotations

import datetime as dt
import os
import re
import time
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from orders.data.models import STATUSES, Order
from orders.data.names import name_key
from orders.data.seed import CUSTOMERS
from orders.finding.rail import initial_of

from .browsers import GECKO_TOO
from .live import (
    FIRST_IN_VIEW,
    ON_TOP,
    ROWS,
    add_orders_to,
    api_first,
    api_json,
    engine_of,
    scroll_still,
    settled,
)

pytestmark = pytest.mark.browser
DOCS = Path(__file__).resolve().parent.parent / "docs"
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
PHONE = {"width": 390, "height": 760}
DESKTOP = {"width": 1280, "height": 800}
LIST_OR_API = re.compile(r"/(api/)?orders(/rail)?(\?|$)")
WEEKS = 8  # buckets the tests' rail of a date sort has at least (locally: 90 days, weeks)


def given(live: Any, rows: int = 2000) -> None:
    """Orders over 90 days (the rail of the date sorts: weeks), every status, amounts across bands.
    Against a deployment: its orders as they are (`buckets` says when they span too little)."""
    if live.app is None:
        return
    with Session(engine_of(live)) as session:
        session.add_all(
            Order(
                customer=CUSTOMERS[(i * 7) % len(CUSTOMERS)],
                amount=Decimal((i * 7919) % 99991 + 100) / 100,
                status=STATUSES[(i * 3) % len(STATUSES)],
                created_at=NOW - dt.timedelta(minutes=65 * i),
            )
            for i in range(rows)
        )
        session.commit()


def buckets(page: Page, live: Any) -> list[dict[str, Any]]:
    """The rail's buckets as the page has them: label, low, high (ISO), and where each is drawn;
    at least WEEKS of them (a deployment whose orders span less is skipped, saying so)."""
    result: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll('#rail-links a[data-count]')].map((a, i) => {
            const part = document.querySelector(`#rail .rail-bucket[data-index="${i}"]`);
            const box = part ? part.getBoundingClientRect() : null;
            return {label: a.dataset.label, low: a.dataset.low, high: a.dataset.high || null,
                    count: +a.dataset.count, href: a.getAttribute('href'),
                    y: box ? box.top + box.height / 2 : null};
        })"""
    )
    if live.app is None and len(result) < WEEKS:
        pytest.skip(
            f"NEEDS orders over weeks: {live.url}'s rail has {len(result)} of the {WEEKS} buckets "
            "the test needs (a default `make run` seeds 69 days)"
        )
    assert len(result) >= WEEKS, result
    return result


def first_of(live: Any, bucket: dict[str, Any]) -> int:
    """The first row of a date bucket in "Newest first", by a query written apart from the rail:
    the database's, or on a deployment the JSON API's go-to (the first order at or before the
    bucket's last microsecond), which must lie in the bucket."""
    high = dt.datetime.fromisoformat(bucket["high"])
    low = dt.datetime.fromisoformat(bucket["low"])
    if live.app is None:
        last = high - dt.timedelta(microseconds=1)
        # The newest bucket runs to a midnight still to come, which no go-to may name: its first
        # row is the list's first.
        at = {"to": last.strftime("%Y-%m-%dT%H:%M:%S.%fZ")} if last < dt.datetime.now(dt.UTC) else {}
        row = api_first(live, sort="newest", **at)
        assert low <= dt.datetime.fromisoformat(row["created_at"]) < high, (row, bucket)
        return int(row["id"])
    with Session(engine_of(live)) as session:
        stmt = select(Order.id).where(Order.created_at < high, Order.created_at >= low)
        return int(session.scalars(stmt.order_by(Order.created_at.desc(), Order.id.desc()).limit(1)).one())


def landed(page: Page, order_id: int | None, *, top: bool = False) -> None:
    """The row is at the top of the list area, named by the address (the list's first row is
    the list's own address, as anywhere in the app), and no row came twice. `None` with `top`:
    whichever order is the list's first (a deployment's newest moves as other tests write)."""
    if order_id is None:
        expect(page).to_have_url(re.compile(r"/orders$"))
        order_id = int(page.locator(ROWS).first.get_attribute("data-id") or 0)
    page.wait_for_function(ON_TOP, arg=str(order_id), timeout=10_000)
    expect(page).to_have_url(re.compile(r"/orders$" if top else rf"after=.*#order-{order_id}$"))
    ids = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")
    assert len(ids) == len(set(ids)), "a row came twice"


def list_requests(page: Page) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if LIST_OR_API.search(r.url) else None)
    return seen


def open_rail(live: Any, browser: Any) -> tuple[Any, Page, Any]:
    """A desktop window on the list's top: (its context, the page, the rail's slider)."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.goto(live.url + "/orders")
    rail = page.get_by_role("slider", name=re.compile("^Jump to an? "))
    expect(rail).to_be_visible()
    settled(page)  # the first page's sentinel prefetches the second: over before requests are watched
    return context, page, rail


def drag_to(page: Page, rail: Any, y: float, *, steps: int = 25) -> None:
    """Press the mouse at the rail's top and move it down to `y` (the button still held)."""
    box = rail.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 4, box["y"] + 4)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 4, y, steps=steps)


@GECKO_TOO
def test_a_mouse_drags_the_rail_to_a_bucket_and_lands_on_its_first_row(live, browser, tmp_path):
    given(live)
    context, page, rail = open_rail(live, browser)
    parts = buckets(page, live)
    # Bucket heights follow their counts: the full weeks are about alike, the rail fills its height.
    target = parts[len(parts) // 2]
    seen = list_requests(page)
    drag_to(page, rail, target["y"])
    expect(page.locator("#rail .rail-bubble")).to_contain_text(target["label"])
    expect(rail).to_have_attribute("aria-valuetext", re.compile(re.escape(target["label"]) + r", .*orders"))
    assert seen == [], f"requests while dragging: {seen}"
    shots = DOCS if os.environ.get("SCREENSHOTS") == "1" else tmp_path
    page.screenshot(path=str(shots / "screenshot-rail-desktop.png"))
    page.mouse.up()
    first = first_of(live, target)
    landed(page, first)
    # One request opens the list there (then the rows around it load as the reader scrolls, and
    # the rail asks for its counts again).
    assert seen[0] == live.url + target["href"], seen
    assert seen.count(seen[0]) == 1, seen
    expect(page.locator("#find-status")).to_contain_text(f"Went to {target['label']}: order #{first}")
    # The reader's place moved with them: the slider names the bucket they are in.
    expect(rail).to_have_attribute("aria-valuenow", str(parts.index(target)))
    context.close()


@pytest.mark.parametrize("stylesheet_s", [0, 0.8], ids=["cached", "revalidated"])
def test_back_after_a_jump_returns_to_the_top_of_the_list(live, browser, stylesheet_s):
    """Back after the rail's jump (the list's open(), a pushState entry) shows the list where it
    was: the top of the list, whose address names no row, at the top of the page (htmx 4's restore
    swaps the body in and keeps the offset of the page Back came from). The restored body's find
    bar stylesheet may come from the cache or over the network (a 304, seen in a full run): while
    it loads, the body sits at the old offset and its row in view is no place of the reader's
    (noted, it named a row mid-way and the restore landed there)."""
    given(live)
    context, page, rail = open_rail(live, browser)
    top_row = page.locator(ROWS).first.get_attribute("data-id")
    parts = buckets(page, live)
    target = parts[len(parts) // 2]
    drag_to(page, rail, target["y"])
    page.mouse.up()
    landed(page, first_of(live, target))
    if stylesheet_s:
        page.route("**/controls.css", lambda route: (time.sleep(stylesheet_s), route.continue_()))
    page.go_back()
    expect(page).to_have_url(live.url + "/orders")
    page.wait_for_function("() => window.scrollY === 0 && !window.ordersList.busy()")
    assert page.locator(ROWS).first.get_attribute("data-id") == top_row
    context.close()


def touch(cdp: Any, kind: str, x: float, y: float) -> None:
    points = [] if kind == "touchEnd" else [{"x": x, "y": y}]
    cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": points})


# The phone handle: the left of what shows, the right end of the text of the rows in view (the
# handle passes beside any of them), and what a finger 44 px from the screen's right edge, level
# with the handle's middle, touches.
HANDLE_CLEAR = """() => { const h = document.querySelector('#rail .rail-handle').getBoundingClientRect();
    const near = [...document.querySelectorAll('#rows > tr[data-id] td')].filter(td => {
      const r = td.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; });
    const ends = near.map(td => { const t = document.createRange(); t.selectNodeContents(td);
      return t.getBoundingClientRect().right; });
    const hit = document.elementFromPoint(innerWidth - 44, h.top + h.height / 2);
    return {left: h.left, text_right: Math.max(0, ...ends), rows: near.length,
            hit: hit && hit.className}; }"""


def test_a_finger_drags_the_phone_handle_and_lands_on_the_bucket(live, browser, tmp_path):
    given(live)
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    handle = page.locator("#rail .rail-handle")
    # Hidden until the reader scrolls, then a thumb-sized handle at the right edge.
    expect(page.locator("#rail")).to_have_css("opacity", "0")
    page.mouse.wheel(0, 300)
    expect(page.locator("#rail")).to_have_class(re.compile("is-awake"))
    expect(page.locator("#rail")).to_have_css("opacity", "1")
    hbox = handle.bounding_box()
    assert hbox is not None and hbox["height"] >= 44 - 0.01, hbox  # 43.999996 at a fractional y
    assert hbox["x"] + hbox["width"] >= PHONE["width"] - 8, hbox
    clear = page.evaluate(HANDLE_CLEAR)
    # Thumb-sized where it takes a finger: 44 px from the screen's edge, at the handle's middle.
    assert clear["hit"] == "rail-handle", clear
    # What shows covers no row's text (the amounts end at the right): a 44 px disc covered their
    # last digits for 3 s after each scroll.
    assert clear["rows"] and clear["text_right"] <= clear["left"], clear
    parts = buckets(page, live)  # where each bucket lies on the rail (drawn, not shown, on a phone)
    target = parts[-2]
    y = target["y"]
    seen = list_requests(page)
    cdp = context.new_cdp_session(page)
    x = hbox["x"] + hbox["width"] / 2
    # The handle takes a finger only while awake (AWAKE_MS of the last scroll): the calls above can
    # take longer than that on a loaded machine, so a scroll wakes it right before the finger comes.
    page.evaluate("dispatchEvent(new Event('scroll'))")
    touch(cdp, "touchStart", x, hbox["y"] + hbox["height"] / 2)
    for step in range(1, 21):
        touch(
            cdp,
            "touchMove",
            x,
            hbox["y"] + hbox["height"] / 2 + (y - hbox["y"] - hbox["height"] / 2) * step / 20,
        )
    expect(page.locator("#rail .rail-bubble")).to_contain_text(target["label"])
    assert seen == [], f"requests while dragging: {seen}"
    shots = DOCS if os.environ.get("SCREENSHOTS") == "1" else tmp_path
    page.screenshot(path=str(shots / "screenshot-rail-phone.png"))
    touch(cdp, "touchEnd", x, y)
    landed(page, first_of(live, target))
    context.close()


TUCKED = "() => document.documentElement.classList.contains('bar-tucked')"
# Where the handle's middle is (the finger's place on it while dragging), and the bar's state,
# a frame after the finger moved (the browser hands moves to the page once a frame).
HANDLE = """async () => { await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
    const b = document.querySelector('#rail .rail-handle').getBoundingClientRect();
    return {y: b.top + b.height / 2, tucked: document.documentElement.classList.contains('bar-tucked')}; }"""


def test_a_finger_dragging_the_handle_down_keeps_the_bar_tucked_and_the_handle_under_it(live, browser):
    """A drag on the rail is no scroll of the page: moving down it looks like a finger scrolling up
    to the find bar's touch listener, which brought the tucked bar back mid-drag and moved the
    rail (it hangs below the bar), so the handle left the finger (3 of 3 in a user trial)."""
    given(live)
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    page.mouse.move(195, 422)
    for _ in range(4):
        page.mouse.wheel(0, 300)
    page.wait_for_function(TUCKED)
    settled(page)
    cdp = context.new_cdp_session(page)
    page.evaluate("dispatchEvent(new Event('scroll'))")  # awake: the handle takes a finger
    hbox = page.locator("#rail .rail-handle").bounding_box()
    assert hbox is not None
    x, y = hbox["x"] + hbox["width"] / 2, hbox["y"] + hbox["height"] / 2
    touch(cdp, "touchStart", x, y)
    seen = []
    for _ in range(20):
        y += 12  # down: 240 px in all, the bar's untucking was 8 px away
        touch(cdp, "touchMove", x, y)
        state = page.evaluate(HANDLE)
        seen.append((round(y), round(state["y"]), state["tucked"]))
    touch(cdp, "touchEnd", x, y)
    assert all(tucked for *_, tucked in seen), f"the bar came back mid-drag (finger, handle, tucked): {seen}"
    assert all(abs(finger - at) <= 3 for finger, at, _ in seen), f"the handle left the finger: {seen}"
    context.close()


@GECKO_TOO
def test_keys_on_the_focused_rail_pick_a_bucket_and_open_it(live, browser):
    given(live)
    context, page, rail = open_rail(live, browser)
    parts = buckets(page, live)
    rail.focus()
    expect(rail).to_be_focused()
    assert rail.evaluate("r => getComputedStyle(r).outlineStyle") != "none"  # the focus ring
    seen = list_requests(page)
    # End (the rail's last bucket, not the list's End), then up twice: the third from the end.
    # The keys in one task of the page: pressed one by one, a loaded machine's stall of more than
    # the rail's pause (700 ms) between two of them would open a bucket between the keys.
    rail.evaluate(
        "r => ['End', 'ArrowUp', 'ArrowUp'].forEach(key =>"
        " r.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true, cancelable: true})))"
    )
    target = parts[len(parts) - 3]
    expect(rail).to_have_attribute("aria-valuetext", re.compile("^" + re.escape(target["label"]) + ", "))
    # No key sent a request for a bucket; the pause's own opening of the target, if a stall of the
    # machine let it come before Enter, is the rail's promise kept, not a key's request.
    assert all(unquote(url).split("#")[0].endswith(unquote(target["href"])) for url in seen), (
        f"a key sent a request: {seen}"
    )
    page.keyboard.press("Enter")
    landed(page, first_of(live, target))
    # Home then a pause: the first bucket, opened by itself after the keys stop.
    rail.focus()
    page.keyboard.press("PageDown")
    page.keyboard.press("Home")
    # The list's first row; on a deployment whichever it is when the list opens (others write there).
    landed(page, first_of(live, parts[0]) if live.app is not None else None, top=True)
    context.close()


FOCUSED_ROW = "() => document.activeElement?.closest('#rows > tr[data-id]')?.dataset.id ?? null"


@GECKO_TOO
def test_after_a_jump_by_the_keys_the_next_tab_goes_on_from_the_landed_row(live, browser):
    """Enter on the rail opens the bucket with the focus on its first row, as a go-to does: the
    next Tab is that row's link, not the link of the page's first row (about 40 rows above it,
    3 of 3 in a user trial). A pause opens it too, and the rail keeps the focus (the reader may be
    picking on), and Tab from it goes to the landed row's link too."""
    given(live)
    context, page, rail = open_rail(live, browser)
    parts = buckets(page, live)
    rail.focus()
    rail.evaluate(
        "r => ['ArrowDown', 'ArrowDown', 'ArrowDown'].forEach(key =>"
        " r.dispatchEvent(new KeyboardEvent('keydown', {key, bubbles: true, cancelable: true})))"
    )
    page.keyboard.press("Enter")
    first = first_of(live, parts[3])
    landed(page, first)
    settled(page)
    assert page.locator(ROWS).first.get_attribute("data-id") != str(first), "no rows above: a weak test"
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED_ROW) == str(first), page.evaluate("document.activeElement.outerHTML")
    expect(page.locator(f"#order-{first} a").first).to_be_focused()
    # The keys and a pause: the rail keeps the focus, and Tab goes on from the landed row.
    rail.focus()
    page.keyboard.press("ArrowDown")
    first = first_of(live, parts[4])
    landed(page, first)
    settled(page)
    expect(rail).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator(f"#order-{first} a").first).to_be_focused()
    context.close()


# The reader's place mark's offset down bucket `i`, as a share of the bucket's height.
MARK_IN_BUCKET = """i => {
    const part = document.querySelector(`#rail .rail-bucket[data-index="${i}"]`).getBoundingClientRect();
    const mark = document.querySelector('#rail .rail-place').getBoundingClientRect();
    return (mark.top + mark.height / 2 - part.top) / part.height; }"""


def test_the_place_mark_follows_the_rows_span_in_a_bucket_not_the_calendars(live, browser):
    """A month whose orders fill only its first week: its newest row is at the top of its bucket
    (the mark was put by the calendar, about 80% down, 3 of 3 in a user trial) and its oldest at
    the bottom. Eleven months before it, none dense enough to be split into weeks."""
    engine = engine_of(live)
    months = [dt.datetime(2025 + (11 + m) // 12, (11 + m) % 12 + 1, 1, tzinfo=dt.UTC) for m in range(11)]
    times = [start + dt.timedelta(hours=11 * i) for start in months for i in range(60)]  # Dec to Oct
    week = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    times += [week + dt.timedelta(minutes=10 + 165 * i) for i in range(60)]  # 1 Nov 00:10 to 7 Nov 18:25
    with Session(engine) as session:
        session.add_all(
            Order(customer=CUSTOMERS[i % 9], amount=Decimal(i % 900 + 1), status="paid", created_at=t)
            for i, t in enumerate(times)
        )
        session.commit()
    context, page, rail = open_rail(live, browser)
    expect(page.locator("#rail-links a[data-count]").first).to_have_attribute("data-label", "November 2026")
    expect(rail).to_have_class(re.compile("has-place"))
    newest = page.evaluate(MARK_IN_BUCKET, 0)
    assert newest <= 0.1, f"the newest row of a month of one week shows {newest:.0%} down its bucket"
    # The bucket's oldest row (1 November, 00:10), opened by a go-to: at the bottom.
    with Session(engine) as session:
        oldest_id = str(session.scalars(select(Order.id).where(Order.created_at == times[-60])).one())
    page.goto(live.url + "/orders?to=2026-11-01T00:10:00Z")
    page.wait_for_function(f"id => ({FIRST_IN_VIEW})() === id", arg=oldest_id)
    scroll_still(page)
    oldest = page.evaluate(MARK_IN_BUCKET, 0)
    assert oldest >= 0.9, f"the oldest row of a month of one week shows {oldest:.0%} down its bucket"
    context.close()


def remove(live: Any, order_id: int) -> None:
    """Deletes an order: in the database, or through a deployment's API."""
    if live.app is None:
        live.delete(order_id)
        return
    with Session(engine_of(live)) as session:
        session.execute(delete(Order).where(Order.id == order_id))
        session.commit()


def test_orders_written_while_a_reader_drags_move_neither_the_landing_nor_the_counts(live, browser):
    """The test's own orders: one leads a bucket when the drag starts, goes during it, and a new
    one comes at the bucket's top; the landing is the new one, the counts are asked again."""
    given(live)
    context, page, rail = open_rail(live, browser)
    parts = buckets(page, live)  # a deployment's rail too short skips here, before any write
    if live.app is None:
        live.require_writes("writes orders into a bucket of the rail while a reader drags")
    target = parts[3]
    high = dt.datetime.fromisoformat(target["high"])
    [leading] = add_orders_to(live, [(high - dt.timedelta(seconds=2), "Zé Antigo", Decimal("5.00"), "paid")])
    drag_to(page, rail, target["y"], steps=10)
    # Meanwhile: the bucket's first row goes, and a new one comes at its top.
    assert first_of(live, target) == leading
    remove(live, leading)
    [new_first] = add_orders_to(live, [(high - dt.timedelta(seconds=1), "Zé Novo", Decimal("5.00"), "paid")])
    page.mouse.up()
    landed(page, new_first)
    # The counts are asked again: this bucket's link counts its orders (one in, one out, one in,
    # and one more below), and the whole rail's total is the table's.
    add_orders_to(live, [(high - dt.timedelta(seconds=3), "Ana", Decimal(1), "paid")])
    rail.focus()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Enter")
    expect(page.locator('#rail .rail-bucket[data-index="3"]')).to_have_attribute(
        "data-count", str(target["count"] + 2)
    )
    expect(rail).to_have_attribute("aria-valuetext", re.compile("^" + re.escape(target["label"]) + ", "))
    context.close()


def test_the_rail_has_no_serious_accessibility_issue(live, page: Page):
    from axe_playwright_python.sync_playwright import Axe

    given(live, 600)
    page.goto(live.url + "/orders?sort=amount")
    expect(page.get_by_role("slider")).to_be_visible()
    page.get_by_role("slider").focus()
    page.keyboard.press("ArrowDown")
    results = Axe().run(page)
    serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not serious, [(v["id"], v["help"], [n["html"] for n in v["nodes"]][:3]) for v in serious]


def test_without_javascript_the_rail_is_links_that_open_each_bucket(live, browser):
    given(live)
    context = browser.new_context(java_script_enabled=False, viewport=DESKTOP)
    page = context.new_page()
    page.goto(live.url + "/orders?sort=customer&status=paid")
    expect(page.locator("#rail")).to_have_count(0)
    page.get_by_text("Jump to an initial").click()
    link = page.locator("#rail-links a", has_text=re.compile(r"^M \("))
    expect(link).to_be_visible()
    link.click()
    first = page.locator(ROWS).first
    expect(first.locator("td.customer")).to_have_text(re.compile("^M"))
    if live.app is None:
        # A deployment's orders, through its API: the landing's name starts with M and the order
        # just above it (the page read backwards) has a name before M. (The API's go-to is no
        # check here: it opens at the first name with a word starting with M, as a search does.)
        query = {"sort": "customer", "status": "paid", "limit": "1"}
        at = api_json(live, "/api/orders", **query, after=parse_qs(urlsplit(page.url).query)["after"][0])
        landing = at["items"][0]
        above = (
            api_json(live, "/api/orders", **query, before=at["prev_cursor"])["items"]
            if at["prev_cursor"]
            else []
        )
        assert initial_of(name_key(landing["customer"])) == "m", landing
        assert not above or initial_of(name_key(above[0]["customer"])) < "m", above
        expected = int(landing["id"])
    else:
        with Session(engine_of(live)) as session:
            stmt = select(Order.id).where(Order.status == "paid", Order.customer_key >= "m")
            expected = session.scalars(stmt.order_by(Order.customer_key, Order.id).limit(1)).one()
    expect(first).to_have_attribute("data-id", str(expected))
    context.close()
