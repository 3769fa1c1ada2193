"""Nothing moves that the reader did not move: fixed columns in every sort, phone cards that never
overflow (largest amount, longest name, 200% zoom), a resize that keeps the first row in view,
skeleton rows while a page loads, dark mode, and the scroll window's API (window.ordersList).
Chromium on SQLite and PostgreSQL; waits are web-first assertions or wait_for_function.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from playwright.sync_api import Page, Route, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from sqlalchemy import delete, text
from sqlalchemy.orm import Session

from orders.data.models import CUSTOMER_MAX_LENGTH, Order

from .browsers import GECKO_TOO
from .helpers import BASE, add_orders, seed
from .live import (
    FIRST_IN_VIEW,
    INSET,
    ROWS,
    add_orders_to,
    engine_of,
    expect_on_top,
    given,
    local_only,
    put_on_top,
    scroll_still,
    scroll_until,
    setting,
)

pytestmark = [pytest.mark.browser]

LARGEST = Decimal("9999999999.99")  # the largest amount the API accepts (Numeric(12, 2))
SHOWN_LARGEST = "9,999,999,999.99"


def long_name(i: int) -> str:
    """A name of the longest length the API accepts, sorting among the seeded 'Customer N'."""
    return (f"Customer {i} " + "Wolfeschlegelsteinhausenbergerdorff" * 2)[:CUSTOMER_MAX_LENGTH]


def seed_with_extremes(engine, count: int) -> None:
    """`count` ordinary orders, and every 60th minute one with the longest name and one with
    the largest amount (so they are loaded and dropped in every sort)."""
    seed(engine, count)
    extremes = []
    for n, minutes in enumerate(range(0, count // 3, 20)):
        when = BASE - dt.timedelta(minutes=minutes, seconds=30)
        extremes.append((when, long_name(n % 17), Decimal("12.50"), "paid"))
        extremes.append((when, f"Customer {n % 17}", LARGEST - n, "cancelled"))
    add_orders(engine, extremes)


# Where each column is: the header cells and every row in the document (left, width), read at once.
COLUMNS = """largest => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.width]; };
  const heads = [...document.querySelectorAll('#orders thead th')].map(box);
  const rows = [...document.querySelectorAll('#rows > tr[data-id]')];
  return {heads, cells: rows.map(r => [...r.children].map(box)),
          long: rows.filter(r => r.querySelector('.customer').textContent.length >= 60).length,
          largest: rows.filter(r => r.querySelector('.amount').textContent === largest).length,
          dropped: !!document.getElementById('less'),
          // Amounts whole, never clipped; long names cut with an ellipsis, whole in their title.
          clipped: rows.map(r => r.querySelector('.amount')).filter(td => td.scrollWidth > td.clientWidth)
                       .map(td => td.textContent),
          names: rows.map(r => r.querySelector('.customer')).filter(td => td.textContent.length >= 60)
                     .map(td => [td.title === td.textContent, td.scrollWidth > td.clientWidth])};
}"""


def test_columns_are_the_same_in_every_sort_whatever_rows_are_loaded(live, page: Page):
    given(live, 0, AUTO_PAGES=10_000, MAX_ROWS_IN_PAGE=100)
    seed_with_extremes(engine_of(live), 600)
    page.set_viewport_size({"width": 1280, "height": 800})
    layouts: dict[str, list] = {}
    for sort in ("newest", "oldest", "amount", "customer"):
        page.goto(f"{live.url}/orders?sort={sort}")
        expect(page.locator(ROWS).nth(19)).to_be_attached()
        seen_long = seen_largest = 0
        dropped = False
        positions = set()
        for _ in range(45):
            page.mouse.wheel(0, 600)
            page.wait_for_timeout(40)  # pacing for the intersection observer, not a timing assertion
            now = page.evaluate(COLUMNS, SHOWN_LARGEST)
            positions.add(tuple(map(tuple, now["heads"])))
            # Every row's cells sit exactly under the headers.
            for cells in now["cells"]:
                assert [tuple(c) for c in cells] == [tuple(h) for h in now["heads"]]
            assert not now["clipped"], now["clipped"]
            assert all(whole and cut for whole, cut in now["names"]), now["names"]
            seen_long += now["long"]
            seen_largest += now["largest"]
            dropped |= now["dropped"]
        assert len(positions) == 1, f"{sort}: the columns moved: {positions}"
        assert seen_long and seen_largest, f"{sort}: the extreme rows were never loaded"
        assert dropped, f"{sort}: no rows were dropped"
        layouts[sort] = positions.pop()
    assert len(set(layouts.values())) == 1, layouts


def overflow(page: Page) -> dict:
    """How far anything reaches past the viewport's right edge, and clipped amounts."""
    return page.evaluate(
        """() => ({
          scroll: document.documentElement.scrollWidth - document.documentElement.clientWidth,
          cards: Math.max(...[...document.querySelectorAll('#rows > tr[data-id]')]
                   .map(r => r.getBoundingClientRect().right)) - document.documentElement.clientWidth,
          clipped: [...document.querySelectorAll('#rows td.amount')]
                   .filter(td => td.scrollWidth > td.clientWidth + 0.5).map(td => td.textContent),
          // Times whole too, beside the largest amounts as well (static/app.css: the card's
          // short time); Firefox's classic scrollbar cut ordinary cards' times ("05:49...").
          times: [...document.querySelectorAll('#rows > tr[data-id] > td.created')]
                   .filter(td => td.scrollWidth > td.clientWidth + 0.5).map(td => td.textContent),
          // The name's room: the narrowest customer cell's width, in CSS pixels.
          name_px: Math.min(...[...document.querySelectorAll('#rows > tr[data-id] > td.customer')]
                   .map(td => td.clientWidth)),
          // Wider than its cell, and not cut with an ellipsis: it runs into its neighbours.
          spilled: [...document.querySelectorAll('#rows > tr[data-id] > td')].filter(td => {
            const style = getComputedStyle(td);
            return td.scrollWidth > td.clientWidth + 0.5 &&
              !(style.overflowX === 'hidden' && style.textOverflow === 'ellipsis');
          }).map(td => td.textContent),
        })"""
    )


@GECKO_TOO
@pytest.mark.parametrize(
    ("width", "height", "scale"),
    [(390, 844, 3), (195, 422, 6), (640, 400, 2), (844, 390, 3)],
    ids=["phone", "phone-at-200%", "desktop-at-200%", "phone-landscape"],
)
def test_no_horizontal_overflow_with_the_largest_amount_and_longest_name(live, browser, width, height, scale):
    given(live, 60)
    newest = max(BASE, dt.datetime.now(dt.UTC)) + dt.timedelta(minutes=1)  # newer than a deployment's
    (widest,) = add_orders_to(live, [(newest, "W" * CUSTOMER_MAX_LENGTH, LARGEST, "cancelled")])
    add_orders_to(live, [(newest, ("Ana " + "Wolfeschlegel " * 5)[:CUSTOMER_MAX_LENGTH], LARGEST, "shipped")])
    # 200% zoom is a viewport half as wide in CSS pixels, at twice the pixel density.
    context = browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=scale)
    page = context.new_page()
    page.goto(live.url + "/orders")
    # Among the first rows (on a deployment another test's order may come first meanwhile).
    expect(page.locator(f"#order-{widest}")).to_contain_text(SHOWN_LARGEST)
    page.mouse.wheel(0, 4000)  # on to the next page (a card is up to four lines at 200%)
    expect(page.locator(ROWS)).not_to_have_count(20)
    result = overflow(page)
    assert result["scroll"] <= 0 and result["cards"] <= 0.5, result
    assert not result["clipped"] and not result["spilled"] and not result["times"], result
    # A name keeps 9rem (about sixteen letters) at every size: in landscape the desktop's fixed
    # columns had left it 87 px, "Fran..." (static/app.css).
    assert result["name_px"] >= 144, result
    context.close()


@GECKO_TOO
def test_long_order_numbers_are_whole_and_run_into_nothing(live, browser):
    """At 1280, 844 and 390 px, in one test: against a deployment it is one skip, not three."""
    local_only(live, "gives orders numbers of 8 and 10 digits, which only its own database can")
    given(live, 40)
    # A shop's ten millionth order, and its ten billionth (the column is bigint).
    long_ids = [12_345_678, 9_876_543_210]
    engine = engine_of(live)
    with Session(engine) as session:
        session.add_all(
            Order(
                id=n,
                created_at=BASE + dt.timedelta(minutes=1 + i),
                customer="Ana Wolfeschlegel",
                amount=LARGEST,
                status="cancelled",
            )
            for i, n in enumerate(long_ids)
        )
        session.commit()
    try:
        for width, height in ((1280, 800), (844, 390), (390, 844)):
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.goto(live.url + "/orders")
            for order_id in long_ids:
                expect(page.locator(f"#order-{order_id} td.id")).to_have_text(f"#{order_id}")
            result = overflow(page)
            # Whole (a card wraps a number past eight digits, never cuts it), over nothing, and
            # the name keeps room for about ten letters beside the ten-digit number.
            assert not result["spilled"] and not result["clipped"] and result["scroll"] <= 0, (width, result)
            assert result["name_px"] >= 96, (width, result)
            context.close()
    finally:  # the next tests' orders numbered from 1 again: SQLite's AUTOINCREMENT keeps the highest
        with Session(engine) as session:
            session.execute(delete(Order).where(Order.id.in_(long_ids)))
            if engine.dialect.name == "sqlite":
                session.execute(text("UPDATE sqlite_sequence SET seq = 0 WHERE name = 'orders'"))
            session.commit()


PLACE_STATE = f"""id => {{
  const row = document.getElementById('order-' + id), first = ({FIRST_IN_VIEW})();
  const top = r => r ? r.getBoundingClientRect().top : null;
  return {{first, inset: {INSET}, rowTop: top(row),
           firstTop: top(document.getElementById('order-' + first)), scrollY,
           address: location.pathname + location.search + location.hash,
           bar: document.getElementById('find-bar')?.className,
           rows: document.querySelectorAll('{ROWS}').length}};
}}"""


def test_a_resize_keeps_the_first_visible_row_and_the_address_follows(live, page: Page):
    # 220 rows in the document locally; a deployment keeps its own MAX_ROWS_IN_PAGE (200 by default)
    given(live, 400, AUTO_PAGES=10_000, **({"MAX_ROWS_IN_PAGE": 600} if live.app else {}))
    depth = 200 if live.app else min(200, setting(live, "MAX_ROWS_IN_PAGE") * 2 // 3)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(live.url + "/orders")
    scroll_until(page, depth + 20)
    order_id = page.locator(ROWS).nth(depth).get_attribute("data-id")
    put_on_top(page, order_id)
    for width, height in ((620, 800), (390, 844), (844, 390), (1280, 800)):
        page.set_viewport_size({"width": width, "height": height})
        try:
            page.wait_for_function(f"() => ({FIRST_IN_VIEW})() === '{order_id}'", polling="raf", timeout=5000)
        except PlaywrightTimeoutError as timeout:
            # Failed once in a full run and never alone: say what the page looked like.
            state = page.evaluate(PLACE_STATE, order_id)
            raise AssertionError(f"row {order_id} at {width}x{height}: {state}") from timeout
        expect_on_top(page, order_id)
        expect(page).to_have_url(re.compile(rf"#order-{order_id}$"))


def hold(page: Page, pattern: str) -> list[Route]:
    """Requests matching `pattern` wait until the test lets them go (route.continue_())."""
    held: list[Route] = []
    page.route(re.compile(pattern), lambda route: held.append(route))
    return held


SKELETON = """() => {
  const s = document.querySelector('#rows .sentinel .skeleton');
  if (!s) return null;
  const sk = s.querySelector('.sk').getBoundingClientRect();
  const row = document.querySelectorAll('#rows > tr[data-id]')[5].getBoundingClientRect();
  const footer = document.querySelector('footer').getBoundingClientRect();
  return {top: sk.top, height: sk.height, rowHeight: row.height, bars: s.querySelectorAll('.sk').length,
          visible: sk.top < innerHeight && sk.bottom > 0, footerTop: footer.top,
          animation: getComputedStyle(s).animationName};
}"""


@pytest.mark.parametrize("motion", ["no-preference", "reduce"])
def test_skeleton_rows_while_a_page_loads_below_and_above(live, browser, motion):
    given(live, 200, AUTO_PAGES=10_000)
    context = browser.new_context(viewport={"width": 1280, "height": 800}, reduced_motion=motion)
    page = context.new_page()
    held = hold(page, r".*/orders\?.*after=.*page=")
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS)).to_have_count(20)
    page.wait_for_function("() => document.getElementById('orders').getAttribute('aria-busy') === 'true'")
    assert page.evaluate("window.ordersList.busy()")
    # The reader reaches the end of what is loaded while the next page is on its way.
    page.evaluate("document.getElementById('more').scrollIntoView({block: 'start'})")
    skeleton = page.evaluate(SKELETON)
    assert skeleton["visible"] and skeleton["bars"] >= 10
    assert abs(skeleton["height"] - skeleton["rowHeight"]) <= 0.5, skeleton  # a row's own height
    assert skeleton["footerTop"] >= 800, "the footer shows right under the loading rows"
    assert skeleton["animation"] == ("none" if motion == "reduce" else "skeleton-pulse")
    # The rows arrive where the skeleton was: nothing the reader sees moves.
    top = skeleton["top"]
    held.pop().continue_()
    expect(page.locator(ROWS)).to_have_count(40)
    new_row = page.locator(ROWS).nth(20)
    assert abs(new_row.evaluate("r => r.getBoundingClientRect().top") - top) <= 1
    context.close()


def test_skeleton_above_a_list_opened_mid_way_and_gone_at_the_end(live, page: Page):
    given(live, 60, AUTO_PAGES=10_000)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS)).to_have_count(40)  # the first page and the one it prefetched
    deep = page.locator(ROWS).nth(20).get_attribute("data-pos")
    held = hold(page, r".*/orders\?.*before=.*")
    page.goto(live.url + deep)
    first = page.locator(ROWS).first.get_attribute("data-id")
    expect_on_top(page, first)  # a list opened mid-way starts at its own first row
    expect(page.locator("#less .skeleton")).to_be_attached()
    page.mouse.wheel(0, -300)  # up into the skeleton while the rows above are held
    expect(page.locator("#less .sk").last).to_be_in_viewport()
    scroll_still(page)  # the skeleton is in view before the wheel's scroll has all landed
    before = page.locator(f"#order-{first}").evaluate("r => r.getBoundingClientRect().top")
    page.wait_for_function("() => window.ordersList.busy()")
    held.pop().continue_()
    expect(page.locator("#less")).to_have_count(0)  # the top of the list: no skeleton left above
    after = page.locator(f"#order-{first}").evaluate("r => r.getBoundingClientRect().top")
    assert abs(after - before) <= 2, (before, after)
    if live.app is None:  # a deployment's end is far: End takes the reader there
        page.unroute(re.compile(r".*/orders\?.*before=.*"))  # the End link's own address has before=
        page.get_by_role("link", name="End", exact=True).click()
        expect(page.locator("#end-of-list")).to_be_attached()
        expect(page.locator("#more")).to_have_count(0)  # no sentinel, no skeleton below the end
        return
    # Down to the end: the last sentinel is gone, and with it every skeleton.
    for _ in range(50):
        if page.locator("#end-of-list").count():
            break
        page.mouse.wheel(0, 1500)
        page.wait_for_timeout(40)
    expect(page.locator("#end-of-list")).to_be_attached()
    expect(page.locator("#rows .skeleton")).to_have_count(0)


def test_dark_scheme_is_applied_and_accessible(live, browser, tmp_path):
    from axe_playwright_python.sync_playwright import Axe

    given(live, 100)
    context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    page = context.new_page()
    page.goto(live.url + "/orders")
    page.mouse.wheel(0, 1200)
    expect(page.locator(ROWS)).not_to_have_count(20)
    colours = page.evaluate(
        "() => [document.body, document.getElementById('orders')]"
        ".map(e => getComputedStyle(e).backgroundColor)"
    )
    assert colours == ["rgb(17, 20, 24)", "rgb(26, 30, 36)"], colours
    page.screenshot(path=tmp_path / "dark.png")
    results = Axe().run(page)
    serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert not serious, [(v["id"], v["help"], [n["target"] for n in v["nodes"][:3]]) for v in serious]
    context.close()


def test_open_shows_the_list_at_a_url_with_the_row_on_top_in_one_request(live, page: Page):
    """window.ordersList.open(): what the sticky controls (Top, End, go to) call."""
    given(live, 300, AUTO_PAGES=10_000)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(live.url + "/orders")
    scroll_until(page, 120)
    deep = page.locator(ROWS).nth(100)
    target_id, target_pos = deep.get_attribute("data-id"), deep.get_attribute("data-pos")
    assert target_pos
    toolbar = page.locator(".toolbar").element_handle()
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("() => !window.ordersList.busy()")
    # The address follows the row in view within 200 ms of a scroll (a click makes it follow at
    # once; this script's open() does not): wait for it, as Back returns to it.
    expect(page).not_to_have_url(re.compile(r"#order-"))
    # open()'s own (htmx selecting the list from a whole page), not the sentinels' (fragments).
    requests: list[str] = []
    page.on("request", lambda r: r.headers.get("hx-request-type") == "full" and requests.append(r.url))
    result = page.evaluate(
        "([url, row]) => window.ordersList.open(url, {row}).then(r => r.url)", [target_pos, target_id]
    )
    assert result.endswith(f"#order-{target_id}")
    expect_on_top(page, target_id)
    expect(page).to_have_url(re.compile(rf"#order-{target_id}$"))
    assert requests == [live.url + target_pos]
    assert toolbar.evaluate("t => t.isConnected"), "open() replaced more than the list"
    # A URL the server refuses is an error to the caller; the list stays as it was.
    message = page.evaluate(
        "() => window.ordersList.open('/orders?after=tampered.cursor')"
        ".then(() => 'opened', e => e.status + ' ' + e.message)"
    )
    assert message.startswith("400 ") and "cursor" in message
    expect(page.locator(f"#order-{target_id}")).to_be_attached()
    # Back returns to the list as it was before open().
    page.go_back()
    expect(page).not_to_have_url(re.compile(rf"#order-{target_id}$"))
    expect(page.locator(ROWS).first).to_be_attached()


# The roles in Chromium's accessibility tree (what a screen reader is told): the table, its column
# headers, and the first data row with its children.
def ax_roles(page: Page) -> dict[str, list[str]]:
    cdp = page.context.new_cdp_session(page)
    tree = cdp.send("Accessibility.getFullAXTree")["nodes"]
    by_id = {n["nodeId"]: n for n in tree}
    roles: dict[str, list[str]] = {}
    for n in tree:
        if not n.get("ignored") and n.get("role", {}).get("value") in ("table", "columnheader"):
            roles.setdefault(n["role"]["value"], []).append(n.get("name", {}).get("value", ""))
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    row_id = page.locator(ROWS).first.get_attribute("id")
    found = cdp.send("DOM.querySelector", {"nodeId": root, "selector": f"#{row_id}"})["nodeId"]
    backend = cdp.send("DOM.describeNode", {"nodeId": found})["node"]["backendNodeId"]
    row = next(n for n in tree if n.get("backendDOMNodeId") == backend)
    roles["row"] = [row["role"]["value"]]
    roles["cells"] = [by_id[c]["role"]["value"] for c in row.get("childIds", []) if c in by_id]
    cdp.detach()
    return roles


@pytest.mark.parametrize("width", [1280, 390], ids=["table", "cards"])
def test_block_rows_are_still_a_table_to_a_screen_reader(live, browser, width):
    """Rows are laid out as grids, not as a table (docs/scroll.md): the roles keep the semantics."""
    given(live, 60)
    context = browser.new_context(viewport={"width": width, "height": 800})
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    roles = ax_roles(page)
    assert len(roles.get("table", [])) == 1, roles
    assert roles["row"] == ["row"] and roles["cells"] == ["cell"] * 5, roles
    if width > 900:  # the cards hide the header row (each card is read cell by cell)
        names = [name.lower() for name in roles["columnheader"]]
        assert names == ["order", "customer", "amount", "status", "created"], roles
    # Chromium keeps a table's semantics whatever its display; browsers that drop them (WebKit
    # did) have the roles in the markup to go by.
    rows = page.locator(ROWS).count()
    in_roles = "#orders[role=table] > tbody[role=rowgroup] > tr[role=row][data-id]"
    assert page.locator(in_roles).count() == rows
    assert page.locator("#orders > thead[role=rowgroup] > tr[role=row] > th[role=columnheader]").count() == 5
    context.close()
