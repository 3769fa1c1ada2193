"""The reader never loses their place: the position in the address bar, Back with and without
htmx's snapshot, reload and shared links at depth, loading above without a jump, a bounded
document, deleted orders. Chromium on SQLite and PostgreSQL; waits are web-first assertions or
wait_for_function on a condition, never fixed sleeps.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page
from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.data.models import Order

from .browsers import EVERY_ENGINE, GECKO_TOO, expect, known_bug
from .helpers import delete_orders, seed
from .live import (
    FIRST_IN_VIEW,
    INSET,
    REMOTE_URL,
    ROWS,
    ROWS_MOVING,
    api_rows,
    engine_of,
    expect_on_top,
    given,
    local_only,
    put_on_top,
    screen_rows,
    scroll_still,
    scroll_until,
    setting,
)

if REMOTE_URL:  # QA: aim these tests at a running deployment (tests/live.py)
    from .live import no_local_database, remote_live  # noqa: F401

pytestmark = pytest.mark.browser


def ids_on_screen(page: Page) -> list[int]:
    return [int(i) for i in page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.dataset.id)")]


def iso_z(when) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def assert_in_order(page: Page) -> list[int]:
    rows = screen_rows(page)
    ids = [i for _, i in rows]
    assert len(ids) == len(set(ids)), "a row appears twice"
    assert rows == sorted(rows, reverse=True), "rows are not in sort order"
    return ids


def open_an_order_deep_in_the_list(live, page: Page, nth: int) -> str:
    """Scroll 400 orders past row 100, put row `nth` on top, open it; return its id."""
    given(live, 400, AUTO_PAGES=10_000)
    page.goto(live.url + "/orders")
    scroll_until(page, 100)
    order_id = page.locator(ROWS).nth(nth).get_attribute("data-id")
    put_on_top(page, order_id)
    page.locator(f"#order-{order_id}").get_by_role("link").click()
    expect(page.get_by_role("heading", name=f"Order #{order_id}")).to_be_visible()
    return order_id


def test_back_without_a_snapshot_shows_the_list_at_the_same_place(live, page: Page):
    order_id = open_an_order_deep_in_the_list(live, page, 70)
    # htmx's snapshot is gone (it keeps 5, and the storage quota is small): Back asks the server.
    page.evaluate(
        "sessionStorage.removeItem('htmx-history-cache'); localStorage.removeItem('htmx-history-cache')"
    )
    page.go_back()
    expect(page.get_by_role("table")).to_be_visible()
    expect(page.locator(f"#order-{order_id}")).to_be_in_viewport()
    expect_on_top(page, order_id)
    ids = ids_on_screen(page)
    assert len(ids) == len(set(ids))
    # It scrolls on both ways from there.
    page.mouse.wheel(0, 4000)
    expect(page.locator(ROWS)).not_to_have_count(len(ids))
    page.keyboard.press("Home")  # the reader's own scroll (a script's would be re-landed)
    expect(page.locator(ROWS).first).not_to_have_attribute("data-id", str(ids[0]))
    assert_in_order(page)


def test_back_keeps_no_snapshot_and_returns_to_the_same_row_by_one_request(live, page: Page):
    order_id = open_an_order_deep_in_the_list(live, page, 75)
    # No history snapshot is written (htmx's historyCacheSize is 0: docs/scroll.md says why).
    assert page.evaluate(
        "(sessionStorage.getItem('htmx-history-cache') || localStorage.getItem('htmx-history-cache') || '')"
    ) in ("", "[]")
    restores: list[str] = []
    page.on("request", lambda r: r.headers.get("hx-history-restore-request") and restores.append(r.url))
    page.go_back()
    expect_on_top(page, order_id)
    assert len(restores) == 1 and f"#order-{order_id}" not in restores[0]  # the page, at its position
    # The row is where the reader left it, not marked as a go-to's target (the address named it
    # only to keep the place).
    expect(page.locator(f"#order-{order_id}")).not_to_have_class(TARGET)
    ids = ids_on_screen(page)
    assert len(ids) == len(set(ids))


# Until the condition has held for 300 ms: Playwright's wheel does not wait for the scroll.
HELD = (
    "([id, lo, hi]) => { const t = document.getElementById('order-' + id).getBoundingClientRect().top"
    f" - {INSET}; if (t < lo || t > hi || t !== window.__lastTop) {{ window.__lastTop = t;"
    " window.__heldSince = null; return false; }"
    " window.__heldSince = window.__heldSince || performance.now();"
    " return performance.now() - window.__heldSince > 300; }"
)
ROW_TOP = (
    "id => { const r = document.getElementById('order-' + id); return r && r.getBoundingClientRect().top; }"
)


TARGET = re.compile(r"\bis-target\b")  # the mark of the row a go-to (or a link made for it) names


@EVERY_ENGINE
def test_back_puts_a_row_partly_under_the_headers_where_it_was(live, page: Page):
    """The first row in view is partly under the sticky headers, as a wheel leaves it: Back puts
    every row where the reader left it (it landed the named row flush under the headers, a
    fraction of a row lower: 14-25 px at 1280x800, and a focused row at the bottom of the screen
    was then cut off). A reload shows the find bar again, so the rows come lower by its height
    whatever is kept. (WebKit put it 84 px higher in some runs: the find bar's sheet came with
    the list's markup and applied after the row was placed; base.html says why.)"""
    given(live, 400, AUTO_PAGES=10_000)
    page.goto(live.url + "/orders")
    scroll_until(page, 100)
    first = page.locator(ROWS).nth(70).get_attribute("data-id")
    put_on_top(page, first)
    page.mouse.move(640, 400)
    page.mouse.wheel(0, 25)
    page.wait_for_function(HELD, arg=[first, -40, -5])
    lower = page.evaluate("() => document.elementFromPoint(640, 600).closest('tr[data-id]').dataset.id")
    top = page.evaluate(ROW_TOP, lower)
    # Clicked where it is, as a person does: Playwright's click in Firefox (WebDriver BiDi)
    # scrolls a link that is already in view towards the middle first (251 px here), and the
    # place the reader left is then that one (the address follows it at the click).
    link = page.locator(f"#order-{lower}").get_by_role("link")
    page.mouse.click(
        *link.evaluate(
            "a => { const r = a.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }"
        )
    )
    expect(page.get_by_role("heading", name=f"Order #{lower}")).to_be_visible()
    page.go_back()
    expect(page.get_by_role("table")).to_be_visible()
    page.wait_for_function(f"([id, top]) => Math.abs(({ROW_TOP})(id) - top) <= 2", arg=[lower, top])
    ids = ids_on_screen(page)
    assert len(ids) == len(set(ids))


def test_reload_and_a_copied_url_open_at_the_row_on_top(live, page: Page, browser):
    given(live, 600, AUTO_PAGES=10_000)
    page.goto(live.url + "/orders")
    scroll_until(page, 140)
    order_id = page.locator(ROWS).nth(125).get_attribute("data-id")
    put_on_top(page, order_id)
    url = page.url
    page.reload()
    expect_on_top(page, order_id)
    # A place kept, not a go-to's target: no mark (the user trial: every reload after scrolling
    # showed the row on top highlighted as if it had been gone to).
    expect(page.locator(f"#order-{order_id}")).not_to_have_class(TARGET)
    # Rows above it load as the reader scrolls up; nothing twice, all in order.
    page.mouse.wheel(0, -3000)
    expect(page.locator(ROWS).first).not_to_have_attribute("data-id", order_id)
    assert int(order_id) in assert_in_order(page)
    # Someone else opens the copied address.
    other = browser.new_context()
    shared = other.new_page()
    shared.goto(url)
    expect_on_top(shared, order_id)
    expect(shared.locator(f"#order-{order_id}")).to_have_class(TARGET)  # the row the link names
    other.close()
    # Without JavaScript the same address is a page starting at that row's page, links both ways,
    # the row in view and covered by nothing (a sticky bar of a guessed height covered 58 of its
    # 71 px on a phone), on a desktop and on a phone held either way.
    for size in (
        {"width": 1280, "height": 800},
        {"width": 390, "height": 844},
        {"width": 844, "height": 390},
    ):
        nojs = browser.new_context(java_script_enabled=False, viewport=size)
        plain = nojs.new_page()
        plain.goto(url)
        expect(plain.locator(f"#order-{order_id}")).to_be_in_viewport()
        covered = plain.evaluate(UNCOVERED, order_id)
        assert not covered, f"at {size}, the row of the address is covered at {covered}"
        expect(plain.get_by_role("link", name="↑ Previous page")).to_be_attached()
        expect(plain.get_by_role("link", name="Next page")).to_be_attached()
        nojs.close()


# The points of a row (a quarter and three quarters down, at a third and two thirds across) where
# something else is drawn on top of it: [] when the whole row shows.
UNCOVERED = """id => {
  const row = document.getElementById('order-' + id), box = row.getBoundingClientRect();
  const hidden = [];
  for (const y of [box.top + box.height / 4, box.top + 3 * box.height / 4])
    for (const x of [box.left + box.width / 3, box.left + 2 * box.width / 3]) {
      const el = document.elementFromPoint(x, y);
      if (!el || !row.contains(el)) hidden.push([Math.round(x), Math.round(y), el && el.className]);
    }
  return hidden;
}"""


# Records, for every page swapped in above the rows, how far the first row in view moved
# between just before the swap and two frames after it (CSS anchoring and static/js both done).
RECORD_SHIFTS = """() => {
  window.shifts = [];
  let before = null;
  const firstInView = () => [...document.querySelectorAll('#rows > tr[data-id]')]
    .find(r => r.getBoundingClientRect().bottom > 1);
  // The scroll window's event before it writes anything (it fetches and inserts rows itself).
  document.addEventListener('orders:arriving', e => {
    if (!e.detail.up) return;
    const row = firstInView();
    before = row && [row, row.getBoundingClientRect().top];
    window.measuring = !!before;
  });
  // The scroll window's event once the rows are in (it inserts them itself, not htmx's swap).
  document.addEventListener('orders:loaded', () => {
    if (!before) return;
    // Two frames later: after static/js, after layout and CSS scroll anchoring. This page's own
    // measure: the next page above may start (its sentinel in reach) before these frames run.
    const [row, top] = before;
    before = null;
    requestAnimationFrame(() => requestAnimationFrame(() => {
      window.shifts.push(row.getBoundingClientRect().top - top);
      if (!before) window.measuring = false;
    }));
  });
}"""


# WebKit has no CSS scroll anchoring at all: there it runs as "none", natively.
@pytest.mark.parametrize(
    "anchoring", [pytest.param("css", marks=GECKO_TOO), pytest.param("none", marks=EVERY_ENGINE)]
)
def test_rows_loaded_above_do_not_move_what_the_reader_sees(
    live, page: Page, anchoring, request, browser_name
):
    known_bug(
        request,
        browser_name,
        ("webkit",),
        "in full runs (2 of 2 on 2026-12-06, early, when every worker starts its browsers) the third "
        "page loaded above moved the first row in view down by 1,663.875 px, 40 of WebKit's rows; "
        "never alone, under CPU load, or with the other WebKit modules before it",
        strict=False,
    )
    given(live, 400, AUTO_PAGES=10_000)
    page.goto(live.url + "/orders")
    scroll_until(page, 140)
    order_id = page.locator(ROWS).nth(135).get_attribute("data-id")
    put_on_top(page, order_id)
    anchors = page.evaluate("CSS.supports('overflow-anchor', 'auto')")
    if anchoring == "none" and anchors:
        # As in Safari: no CSS scroll anchoring, so the page must compensate itself.
        page.add_init_script(
            "document.addEventListener('DOMContentLoaded', () =>"
            " document.documentElement.style.setProperty('overflow-anchor', 'none'))"
        )
    page.reload()
    expect_on_top(page, order_id)
    page.evaluate(RECORD_SHIFTS)
    expected = "none" if anchoring == "none" else "auto"
    if anchors:
        assert page.evaluate("getComputedStyle(document.documentElement).overflowAnchor") == expected
    # Up to the top sentinel each time, instantly (a gliding wheel would move the rows itself),
    # and wait for the page it loads above.
    for _ in range(40):
        if not page.locator("#less").count():
            break
        first = page.locator(ROWS).first.get_attribute("data-id")
        # Scroll only while nothing is being measured or loaded, checked in the same task as the
        # scroll (a page the one above brought into reach may start loading at any moment, and
        # the test's own scroll must not count as that page's jump).
        page.wait_for_function(
            "() => { if (window.measuring || window.ordersList.busy()) return false;"
            " const l = document.getElementById('less');"
            " if (l) l.scrollIntoView({block: 'start'}); return true; }",
            polling="raf",
        )
        page.wait_for_function(
            "first => !window.measuring && !window.ordersList.busy() && (!document.getElementById('less') ||"
            " document.querySelector('#rows > tr[data-id]').dataset.id !== first)",
            arg=first,
            polling="raf",
        )
    expect(page.locator("#less")).to_have_count(0)
    page.wait_for_function("() => !window.measuring")
    shifts = page.evaluate("window.shifts")
    # Within a pixel: whole-pixel scroll positions against fractional rows leave at most half of one.
    assert len(shifts) >= 4 and all(abs(s) <= 1 for s in shifts), shifts
    assert_in_order(page)


# The row's top against the top of the list area (below the bar and the column headers).
BELOW_THE_BAR = f"id => document.getElementById('order-' + id).getBoundingClientRect().top - {INSET}"
BAR_HEIGHT = "() => document.getElementById('find-bar').getBoundingClientRect().height"
# The bar's new height (other than `was`) measured by controls.js (measure() writes --find-bar-h).
BAR_MEASURED = (
    "was => { const h = document.getElementById('find-bar').getBoundingClientRect().height;"
    " const set = parseFloat(document.documentElement.style.getPropertyValue('--find-bar-h'));"
    " return Math.abs(h - was) > 1 && Math.abs(h - set) < 0.01; }"
)


@EVERY_ENGINE
def test_the_find_bar_changing_height_while_deep_keeps_the_row_in_view(live, page: Page):
    """The bar is in the page's flow: when it grows or shrinks (the folded forms opened and closed
    on a short screen), the first row in view stays where it was below it. WebKit has no CSS
    scroll anchoring, and every row moved with the bar: 191 px lower at 844x390 (the forms'
    height); controls.js keeps the row there itself."""
    given(live, 400, AUTO_PAGES=10_000)
    page.set_viewport_size({"width": 844, "height": 390})
    page.goto(live.url + "/orders")
    scroll_until(page, 100)
    put_on_top(page, page.locator(ROWS).nth(70).get_attribute("data-id"))
    # The bar back (the reader's wheel up): its toggle in view, and nothing tucks meanwhile.
    page.mouse.move(422, 300)
    page.mouse.wheel(0, -1)
    page.wait_for_function("() => !document.documentElement.classList.contains('bar-tucked')")
    scroll_still(page)
    row = page.evaluate(FIRST_IN_VIEW)
    top = page.evaluate(BELOW_THE_BAR, row)
    toggle = page.get_by_role("button", name="Sort, search, go to")
    height = page.evaluate(BAR_HEIGHT)
    for done, expanded in (("opened", "true"), ("closed", "false")):
        # Clicked where it is (Playwright's click in Firefox scrolls it towards the middle first).
        page.mouse.click(
            *toggle.evaluate(
                "b => { const r = b.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2] }"
            )
        )
        expect(toggle).to_have_attribute("aria-expanded", expanded)
        page.wait_for_function(BAR_MEASURED, arg=height)
        height = page.evaluate(BAR_HEIGHT)
        scroll_still(page)
        moved = page.evaluate(BELOW_THE_BAR, row) - top
        assert abs(moved) <= 1, f"the forms {done}: the row moved {moved} px"


def test_clicking_a_deleted_order_says_so_and_leads_back_to_the_place(live, page: Page):
    if live.app is None:
        # On a deployment: an order of our own, created and deleted through the API.
        live.require_writes("creates an order and deletes it while the list shows it")
        order_id = str(live.create("QA deleted-order check"))
        page.goto(live.url + "/orders")
        expect(page.locator(f"#order-{order_id}")).to_be_visible()
        live.delete(int(order_id))
    else:
        engine = engine_of(live)
        seed(engine, 200)
        page.goto(live.url + "/orders")
        scroll_until(page, 60)
        order_id = page.locator(ROWS).nth(45).get_attribute("data-id")
        put_on_top(page, order_id)
        delete_orders(engine, [int(order_id)])
    page.locator(f"#order-{order_id}").get_by_role("link").click()
    expect(page.get_by_role("heading", name=f"Order #{order_id} no longer exists")).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/orders/{order_id}$"))
    page.get_by_role("link", name="Back to the list").click()
    expect(page.get_by_role("table")).to_be_visible()
    expect(page.locator(ROWS).first).to_be_attached()
    # The deleted row is gone; the list opens where it was: the first row of the deleted row's page.
    expect(page.locator(f"#order-{order_id}")).to_have_count(0)
    ids = ids_on_screen(page)
    assert int(order_id) not in ids and len(ids) == len(set(ids))
    if live.app is not None:
        first_in_view = page.evaluate(FIRST_IN_VIEW)
        page_starts = page.locator(f"{ROWS}[data-pos]").evaluate_all("rows => rows.map(r => r.dataset.id)")
        assert first_in_view in page_starts


@EVERY_ENGINE
@pytest.mark.parametrize("key", ["Enter", "Space"])
def test_load_more_is_a_button_for_enter_and_space(live, page: Page, key, request, browser_name):
    if key == "Space":
        known_bug(
            request,
            browser_name,
            ("webkit",),
            "after Space on 'Load more' the rows came but the first new row had no focus within 30 s "
            "(once in seven full runs on 2026-12-06; cause not found)",
            strict=False,
        )
    given(live, 100, AUTO_PAGES=0)  # locally every load asks for a press
    auto_pages, size = setting(live, "AUTO_PAGES"), setting(live, "PAGE_SIZE")
    if auto_pages > 30:
        pytest.skip(f"NEEDS AUTO_PAGES <= 30 on {live.url} (it has {auto_pages}): 'Load more' out of reach")
    page.bring_to_front()  # focus is only shown in the page that has the window's focus
    page.goto(live.url + "/orders")
    button = page.locator("#more").get_by_role("button", name="Load more orders")
    for _ in range(4 * (auto_pages + 1)):  # a deployment asks after AUTO_PAGES automatic loads
        if button.count():
            break
        page.mouse.wheel(0, 1500)
        page.wait_for_timeout(50)
    shown = page.locator(ROWS).count()
    button.focus()
    page.keyboard.press(key)
    expect(page.locator(ROWS)).to_have_count(shown + size)
    expect(page.locator(ROWS).nth(shown)).to_be_focused()
    expect(page.locator("#announcer")).to_have_text(f"{size} more orders loaded.")


def contiguous(snapshots: list[list[int]], order_id: int) -> bool:
    """The row was on the page in one unbroken run of snapshots: shown once, never shown again."""
    present = [i for i, ids in enumerate(snapshots) if order_id in ids]
    return bool(present) and present == list(range(present[0], present[-1] + 1))


def walk(page: Page, step: int, done: str, snapshots: list[list[int]], limit: int) -> None:
    """Wheel until `done` (a JS condition) holds; after each step the screen is checked whole."""
    read = (
        f"() => [({done})(), [...document.querySelectorAll('#rows > tr[data-id]')]"
        ".map(r => [r.querySelector('time').getAttribute('datetime'), +r.dataset.id])]"
    )
    for _ in range(600):
        page.mouse.wheel(0, step)
        page.wait_for_timeout(40)  # pacing for the intersection observer, not a timing assertion
        # The condition and the rows in one evaluation: nothing can load in between.
        finished, rows = page.evaluate(read)
        rows = [tuple(r) for r in rows]
        ids = [i for _, i in rows]
        assert len(ids) == len(set(ids)), "a row appears twice"
        assert rows == sorted(rows, reverse=True), "rows are not in sort order"
        assert len(ids) <= limit, f"{len(ids)} rows in the document"
        snapshots.append(ids)
        if finished:
            return
    raise AssertionError("the walk did not finish")


@EVERY_ENGINE
@ROWS_MOVING
def test_walk_down_and_back_up_with_rows_dropped_while_others_write(live, page: Page):
    import datetime as dt
    import random
    import threading
    import time
    from decimal import Decimal

    from .helpers import BASE, add_orders

    local_only(live, "walks its own whole list with MAX_ROWS_IN_PAGE=150 while it inserts and deletes")
    max_rows = 150
    live.app.config.update(AUTO_PAGES=10_000, MAX_ROWS_IN_PAGE=max_rows)
    engine = engine_of(live)
    initial = seed(engine, 700)
    rng = random.Random(7)
    deleted: set[int] = set()
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            inside = (BASE - dt.timedelta(minutes=rng.randint(0, 230)), "Inside", Decimal("2.00"), "paid")
            newer = (BASE + dt.timedelta(minutes=rng.randint(1, 50)), "Newer", Decimal("1.00"), "paid")
            add_orders(engine, [inside, newer])
            # Half the first rows stay whatever the walk's pace: a slow engine's walk (WebKit on
            # a loaded machine) outlasted all 700, and sampled from none.
            left = sorted(set(initial) - deleted)
            if len(left) > len(initial) // 2:
                victims = rng.sample(left, 2)
                delete_orders(engine, victims)
                deleted.update(victims)
            time.sleep(0.05)

    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(19)).to_be_attached()
    thread = threading.Thread(target=writer)
    thread.start()
    down: list[list[int]] = []
    up: list[list[int]] = []
    # The pages loaded above, read off the page's resource timing (every engine keeps it).
    page.evaluate("performance.setResourceTimingBufferSize(100000)")
    reloads_above = (
        "() => performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(u => u.includes('before=') && !u.includes('/orders/new'))"
    )
    try:
        walk(page, 900, "() => !!document.getElementById('end-of-list')", down, max_rows + 60)
        # Going down, nothing dropped above is loaded again (the sentinel left there must not
        # reach the viewport, or the two ends would take turns reloading each other's drops).
        above = page.evaluate(reloads_above)
        assert not above, f"{len(above)} pages above were reloaded on the way down"
        # Rows far above were dropped on the way down; a sentinel loads them again.
        expect(page.locator("#less")).to_have_count(1)
        walk(page, -900, "() => !document.getElementById('less') && scrollY === 0", up, max_rows + 60)
    finally:
        stop.set()
        thread.join()
    # And the bottom was dropped on the way up: the end is no longer in the document.
    expect(page.locator("#end-of-list")).to_have_count(0)
    stable = set(initial) - deleted
    assert len(deleted) > 20, "the writer hardly ran"
    for name, snapshots in (("down", down), ("up", up)):
        seen = set().union(*snapshots)
        assert stable <= seen, f"{len(stable - seen)} rows that existed throughout were not seen going {name}"
        twice = [i for i in stable if not contiguous(snapshots, i)]
        assert not twice, f"going {name}, {len(twice)} rows were shown, gone and shown again: {twice[:5]}"
    # Rows are dropped before a page arrives, so the document never holds more than the bound;
    # far more than that were seen each way.
    assert max(len(ids) for ids in down + up) <= max_rows
    assert min(len(set().union(*snapshots)) for snapshots in (down, up)) > 2 * max_rows, "nothing was dropped"
    expect(page.locator("#orders")).to_have_attribute("aria-busy", "false")


def test_go_to_a_date_lands_on_the_first_row_at_or_before_it_and_scrolls_both_ways(live, browser):
    import datetime as dt

    given(live, 600, AUTO_PAGES=10_000)
    if live.app is None:
        # A deployment's own data: the time of its 250th newest order, to the minute.
        rows = api_rows(live.url, 300)
        assert len(rows) == 300, "the deployment has fewer than 300 orders"
        when = dt.datetime.fromisoformat(rows[250]["created_at"].replace("Z", "+00:00"))
        target_utc = when.replace(second=0, microsecond=0)
        expected = next(int(r["id"]) for r in rows if r["created_at"] <= iso_z(target_utc))
    else:
        target_utc = dt.datetime(2026, 3, 11, 9, 0, tzinfo=dt.UTC)  # 100 minutes, ~300 rows, deep
        with Session(engine_of(live)) as session:
            expected = session.scalars(
                select(Order.id)
                .where(Order.created_at <= target_utc)
                .order_by(Order.created_at.desc(), Order.id.desc())
                .limit(1)
            ).one()
    # The reader is in India (UTC+5:30): the form takes their local time, as the list shows it.
    context = browser.new_context(timezone_id="Asia/Kolkata")
    page = context.new_page()
    page.goto(live.url + "/orders")
    local = (target_utc + dt.timedelta(hours=5, minutes=30)).strftime("%Y-%m-%dT%H:%M")
    page.get_by_label("Go to date and time").fill(local)
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page).to_have_url(re.compile(r"/orders\?after="))
    landed = page.locator(f"#order-{expected}")
    expect(landed).to_be_in_viewport()
    # Rows above it load as the reader scrolls up, all later than the value.
    page.mouse.wheel(0, -1500)
    expect(page.locator(ROWS).first).not_to_have_attribute("data-id", str(expected))
    snapshot = screen_rows(page)  # one read: more rows may be loading above meanwhile
    rows = [i for _, i in snapshot]
    assert snapshot == sorted(snapshot, reverse=True) and len(rows) == len(set(rows))
    iso = iso_z(target_utc)
    for created, order_id in snapshot:
        assert (created > iso) == (rows.index(order_id) < rows.index(expected)), order_id
    # And further down.
    page.mouse.wheel(0, 6000)
    expect(page.locator(ROWS)).not_to_have_count(len(rows))
    assert_in_order(page)
    context.close()


def test_a_refused_load_shows_the_servers_row_with_the_first_page(live, page: Page):
    given(live, 200)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    # The next page's request reaches the server with a cursor it refuses (400): the row that
    # replaces the sentinel is the server's own templates/_error_row.html, its message included.
    # A cursor refused is refused again every time (a key rotated away, say): the row offers the
    # same list's first page, not a Retry that could never work.
    page.route(
        re.compile(r".*/orders\?.*after=.*"),
        lambda route: route.continue_(url=re.sub(r"after=[^&]+", "after=tampered.cursor", route.request.url)),
    )
    page.goto(live.url + "/orders?status=paid")
    page.mouse.wheel(0, 3000)
    refused = page.locator("#more.error-row")
    expect(refused).to_contain_text("Couldn't load more orders: cursor")
    expect(refused.get_by_role("button", name="Retry")).to_have_count(0)
    expect(page.locator("#orders")).to_have_attribute("aria-busy", "false")
    page.unroute(re.compile(r".*/orders\?.*after=.*"))
    refused.get_by_role("link", name="Start from the first page").click()
    expect(page).to_have_url(re.compile(r"/orders\?status=paid$"))
    expect(page.locator("#more.error-row")).to_have_count(0)
    page.mouse.wheel(0, 3000)
    expect(page.locator(ROWS)).not_to_have_count(20)
    assert_in_order(page)
    assert errors == []
