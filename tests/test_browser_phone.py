"""The phone reader in a real Chromium (issue 27): the screen belongs to the list, nothing moves
that the reader did not move, thumb-sized targets, a focus ring that shows, loading that never
looks like the end, keys like a feed, focus never on <body>, a date alone for go-to.

Phones are emulated (viewport, touch, is_mobile); the CPU is slowed through the DevTools protocol
where speed matters. Waits are web-first assertions or wait_for_function, never fixed sleeps;
page.wait_for_timeout only paces a wheel, as a hand would.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from .browsers import EVERY_ENGINE, expect
from .live import (
    COVERED,
    FIRST_IN_VIEW,
    INSET,
    ROWS,
    add_new_orders,
    add_orders_to,
    given,
    scroll_still,
    settled,
)

pytestmark = pytest.mark.browser

VIEWPORTS = {
    "portrait phone": {"width": 390, "height": 844},
    "landscape phone": {"width": 844, "height": 390},
    "small laptop": {"width": 1024, "height": 600},
    "laptop": {"width": 1280, "height": 800},
}
PHONE = VIEWPORTS["portrait phone"]
TUCKED = "() => document.documentElement.classList.contains('bar-tucked')"


def phone(browser: Browser, **options: Any) -> Any:
    return browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, **options)


def wheel(page: Page, dy: int, times: int) -> None:
    for _ in range(times):
        page.mouse.wheel(0, dy)
        page.wait_for_timeout(40)  # pacing, as a hand's wheel


def scrolled_down(page: Page, px: int = 2500) -> None:
    page.mouse.move(page.viewport_size["width"] / 2, page.viewport_size["height"] / 2)
    for _ in range(60):
        if page.evaluate("scrollY") >= px:
            break
        wheel(page, 300, 1)
    assert page.evaluate("scrollY") >= px
    page.wait_for_function(TUCKED)


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_after_scrolling_down_the_stuck_controls_cover_at_most_a_fifth(live, browser: Browser, viewport):
    given(live, 600)
    size = VIEWPORTS[viewport]
    touch = size["width"] < 900
    context = browser.new_context(viewport=size, has_touch=touch, is_mobile=size["width"] < 500)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    scrolled_down(page)
    covered = page.evaluate(COVERED)
    assert covered <= 0.20, f"{viewport}: {covered:.0%} of the height covered"
    # Where the reader is stays readable, in view.
    position = page.locator("#find-position")
    expect(position).to_be_in_viewport()
    expect(position).to_have_text(re.compile(r"^around \w+"))
    # No row hides under what is stuck: the first row in view starts below it.
    top = page.evaluate(INSET)
    assert abs(top - covered * size["height"]) <= 2, (top, covered)
    # Scrolling up brings the controls back; down tucks them again.
    wheel(page, -120, 1)
    page.wait_for_function(f"() => !({TUCKED})()")
    expect(page.get_by_role("link", name="Top", exact=True)).to_be_in_viewport()
    assert abs(page.locator("#find-bar").evaluate("b => b.getBoundingClientRect().top")) <= 1
    wheel(page, 300, 2)
    page.wait_for_function(TUCKED)
    # The shortcut "/" brings them back with the search box focused; focus by keyboard too. The
    # bar tucks on the wheel event, before the scroll it asks for: y is read once that has landed.
    scroll_still(page)
    y = page.evaluate("scrollY")
    page.locator(ROWS).nth(10).evaluate("r => r.focus({preventScroll: true})")
    page.keyboard.press("/")
    expect(page.locator('#find-bar input[name="q"]')).to_be_focused()
    page.wait_for_function(f"() => !({TUCKED})()")
    assert page.evaluate("scrollY") == y
    wheel(page, 300, 2)
    page.wait_for_function(TUCKED)
    page.locator("#find-bar select").first.focus()
    page.wait_for_function(f"() => !({TUCKED})()")
    expect(page.locator("#find-bar select").first).to_be_in_viewport()
    context.close()


def controls(page: Page) -> list[str]:
    """A selector for every visible control of the find bar, in document order."""
    return page.eval_on_selector_all(
        "#find-bar a[href], #find-bar button, #find-bar select, #find-bar input:not([type=hidden])",
        "els => els.filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')"
        '.map((e, i) => { e.dataset.probe = i; return `[data-probe="${i}"]`; })',
    )


@pytest.mark.parametrize("viewport", ["laptop", "portrait phone"])
def test_focusing_any_control_scrolls_nothing(live, browser: Browser, viewport):
    """It scrolled the list by 373-1,373 px: the bar lay inside the root's scroll-padding-top."""
    given(live, 600)
    size = VIEWPORTS[viewport]
    context = browser.new_context(viewport=size, has_touch=size["width"] < 500)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    scrolled_down(page)
    wheel(page, -120, 1)  # the controls come back, as a reader's small scroll up does
    page.wait_for_function(f"() => !({TUCKED})()")
    settled(page)
    y = page.evaluate("scrollY")
    selectors = controls(page)
    assert len(selectors) >= 8, selectors
    # A click (or tap) on each field; links and buttons by focus (a click would act).
    for selector in selectors:
        control = page.locator(selector)
        tag = control.evaluate("e => e.tagName")
        if tag in ("INPUT", "SELECT"):
            control.click() if tag == "INPUT" else control.focus()
        else:
            control.focus()
        assert page.evaluate("scrollY") == y, (selector, page.evaluate("scrollY") - y)
        page.keyboard.press("Escape")
    # Tab through the whole bar.
    page.locator(selectors[0]).focus()
    for _ in selectors[1:]:
        page.keyboard.press("Tab")
        assert page.evaluate("scrollY") == y
    context.close()


@pytest.mark.parametrize("viewport", ["portrait phone", "landscape phone", "laptop"])
def test_focusing_a_control_of_the_tucked_bar_scrolls_nothing(live, browser: Browser, viewport):
    """Deep in the list with the bar tucked away, focus() on sort moved the list by 545 px at
    390x844 (7 rows at 844x390): Chromium scrolls a control out of view into view before focusin,
    where the bar comes back."""
    given(live, 600)
    size = VIEWPORTS[viewport]
    context = browser.new_context(viewport=size, has_touch=size["width"] < 900, is_mobile=size["width"] < 500)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    folded = page.get_by_role("button", name="Sort, search, go to")
    if folded.is_visible():  # a short screen folds the forms until asked (test_browser_landscape.py)
        folded.click()
    scrolled_down(page, 5000)
    settled(page)
    for control in ("#find-bar select", '#find-bar input[name="q"]'):
        wheel(page, 300, 2)
        page.wait_for_function(TUCKED)
        settled(page)
        first = page.evaluate(FIRST_IN_VIEW)
        where = f"() => [scrollY, document.getElementById('order-{first}').getBoundingClientRect().top]"
        before = page.evaluate(where)
        page.locator(control).first.focus()
        page.wait_for_function(f"() => !({TUCKED})()")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        # The bar back over the top rows, none of them moved.
        assert page.evaluate(where) == before, control
        expect(page.locator(control).first).to_be_in_viewport()
        page.keyboard.press("Escape")
    context.close()


@pytest.mark.parametrize("how", ["tap", "keyboard"])
def test_site_links_bring_the_footer_at_any_depth_and_it_stays(live, browser: Browser, how):
    """The footer one action away however deep the reader is (AUTO_PAGES by default never asks for
    a press): "Site links" in the bar. Rows that were loading must not push the footer away."""
    given(live, 1000)
    context = phone(browser)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    scrolled_down(page, 6000)
    wheel(page, -120, 1)  # a small scroll up brings the controls back
    page.wait_for_function(f"() => !({TUCKED})()")
    link = page.get_by_role("link", name="Site links")
    if how == "tap":
        link.tap()
    else:
        link.focus()
        page.keyboard.press("Enter")
    footer = page.locator("#site-footer")
    expect(footer).to_be_focused()
    expect(footer).to_be_in_viewport()
    rows = page.locator(ROWS).count()
    # Nothing arrives above it any more: the sentinel waits for a press instead.
    expect(page.locator("#more .next-link")).to_have_text("Load more orders")
    page.wait_for_timeout(1000)  # a negative check: an observer would have loaded rows by now
    expect(footer).to_be_in_viewport()
    assert page.locator(ROWS).count() == rows
    context.close()


def test_a_failed_or_refused_go_to_moves_nothing(live, page: Page):
    given(live, 600)
    page.goto(live.url + "/orders?sort=amount")
    expect(page.locator(ROWS).first).to_be_visible()
    field = page.get_by_label("Go to amount")
    field.fill("100")
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page).to_have_url(re.compile(r"#order-\d+$"))
    landed = page.url.rsplit("#order-", 1)[1]
    # The page above the landed one may start loading a frame after the landing (it inserts rows
    # above and so changes scrollY, not the screen): measure once nothing is loading any more.
    settled(page)
    row = page.locator(f"#order-{landed}")
    top = row.evaluate("r => r.getBoundingClientRect().top")
    y = page.evaluate("scrollY")
    # The browser refuses a negative amount (min=0) and focuses the field: nothing moves.
    field.fill("-5")
    page.get_by_role("button", name="Go", exact=True).click()
    expect(field).to_be_focused()
    assert page.evaluate("scrollY") == y
    # The server refuses a value the column cannot hold: an inline message, nothing moves.
    field.fill("99999999999")
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page.locator("#jump-message")).not_to_be_empty()
    expect(field).to_be_focused()
    assert page.evaluate("scrollY") == y
    assert abs(row.evaluate("r => r.getBoundingClientRect().top") - top) <= 1


@pytest.mark.parametrize("held", ["portrait", "landscape"])
def test_a_tap_on_a_cards_far_corner_opens_it_and_back_focuses_it(live, browser: Browser, held: str):
    """A card on a phone held upright; held sideways (844x390) the rows are a table's, and a tap
    on a row opens it too (a walk found a tap on the name doing nothing there)."""
    given(live, 200)
    size = {"width": 844, "height": 390} if held == "landscape" else PHONE
    context = browser.new_context(viewport=size, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    card = page.locator(ROWS).nth(3)
    expect(card).to_be_visible()
    order_id = card.get_attribute("data-id")
    box = card.bounding_box()
    assert box
    # The bottom right corner: the amount's side, far from the order number's link.
    page.touchscreen.tap(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    expect(page).to_have_url(re.compile(rf"/orders/{order_id}$"))
    expect(page.get_by_role("heading", name=f"Order #{order_id}")).to_be_visible()
    page.go_back()
    expect(page.locator(f"#order-{order_id}")).to_be_focused()
    context.close()


def test_every_control_is_a_thumb_sized_target_on_a_touch_screen(live, browser: Browser):
    # Locally a "Load more" button right away too; a deployment's readers meet its own controls.
    given(live, 200, **({"AUTO_PAGES": 0} if live.app else {}))
    context = phone(browser)
    page = context.new_page()
    page.goto(live.url + "/orders")
    assert page.evaluate("matchMedia('(pointer: coarse)').matches")
    expect(page.locator(ROWS).first).to_be_visible()
    small = page.eval_on_selector_all(
        "a[href], button, select, input:not([type=hidden]), [data-retry]",
        """els => els.filter(e => e.getClientRects().length && !e.closest('.visually-hidden, .skip-link')
              // A card's number link lies inside the card, which is the target (a tap anywhere).
              && !e.closest('#rows > tr[data-id]'))
           .map(e => [e.outerHTML.slice(0, 60), e.getBoundingClientRect().width,
                      e.getBoundingClientRect().height])
           .filter(([, w, h]) => w < 44 || h < 44)""",
    )
    assert small == [], small
    heights = page.eval_on_selector_all(ROWS, "rows => rows.map(r => r.getBoundingClientRect().height)")
    assert min(heights) >= 44
    context.close()


def test_the_new_orders_pill_is_a_thumb_sized_target_on_a_touch_screen(live, browser: Browser):
    """The "N new orders · show" pill was 35.97 px tall at 390x844 with touch: it is no .button,
    and the touch rule (static/controls.css) sized only those and the bar's controls."""
    given(live, 60, NEW_ORDERS_POLL_SECONDS=1)
    context = phone(browser)
    page = context.new_page()
    page.goto(live.url + "/orders")
    assert page.evaluate("matchMedia('(pointer: coarse)').matches")
    expect(page.locator(ROWS).first).to_be_visible()
    add_new_orders(live, ["New 1", "New 2"])
    # Measured in one read of the page: the poll (every second here) swaps the pill in afresh, so
    # a pill found by one call may be gone by the next (a full run's bounding_box() was None).
    box = page.wait_for_function(
        """() => { const a = document.querySelector('#new-orders a');
          if (!a || a.textContent.trim() !== '2 new orders · show') return null;
          const r = a.getBoundingClientRect();
          return {x: r.x, width: r.width, height: r.height, lines: a.getClientRects().length}; }"""
    ).json_value()
    assert box["height"] >= 44 and box["width"] >= 44, box
    # Still one line, and inside the screen.
    assert box["lines"] == 1, box
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    context.close()


CONTRAST = """el => {
  const rgb = c => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => [r, g, b]
    .map(v => (v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
    .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  let under = el.parentElement;
  while (under && rgb(getComputedStyle(under).backgroundColor).length === 4
         && rgb(getComputedStyle(under).backgroundColor)[3] === 0) under = under.parentElement;
  const back = under ? getComputedStyle(under).backgroundColor : 'rgb(255, 255, 255)';
  const style = getComputedStyle(el);
  if (style.outlineStyle === 'none' || parseFloat(style.outlineWidth) < 2) return 0;
  const [a, b] = [lum(rgb(style.outlineColor)), lum(rgb(back))];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_focus_ring_has_three_to_one_contrast(live, browser: Browser, scheme):
    given(live, 60)
    context = browser.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    ratios = {}
    page.locator("body").click(position={"x": 5, "y": 5})
    for _ in range(14):  # by keyboard, so that :focus-visible applies: the header, the bar, rows
        page.keyboard.press("Tab")
        name = page.evaluate("() => document.activeElement.outerHTML.slice(0, 50)")
        ratios[name] = page.evaluate(f"({CONTRAST})(document.activeElement)")
    # A row focused by the keys (and the row a go to landed on, on its yellow).
    page.locator(ROWS).first.focus()
    page.keyboard.press("j")
    ratios["row"] = page.evaluate(f"({CONTRAST})(document.activeElement)")
    low = {name: ratio for name, ratio in ratios.items() if ratio < 3}
    assert not low, low
    context.close()


FLING_WATCH = """() => {
  window.fling = {bad: 0, frames: 0};
  const rows = document.getElementById('rows'), footer = document.querySelector('footer');
  (function frame() {
    fling.frames++;
    const last = rows.lastElementChild;
    // The footer in view right under a row that is still on its way (a sentinel, loading or not).
    if (last && last.matches('.sentinel') && footer.checkVisibility({visibilityProperty: true})
        && footer.getBoundingClientRect().top < innerHeight) fling.bad++;
    requestAnimationFrame(frame);
  })();
}"""


def test_no_footer_right_under_a_loading_row_during_a_fast_fling(live, browser: Browser):
    """At a mid-range phone's speed (CPU 4x slower), a wheel fling of 120 px every 16 ms: the
    footer showed under a loading skeleton in 19 frames."""
    given(live, 1500, AUTO_PAGES=10_000)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 4})
    page.evaluate(FLING_WATCH)
    page.mouse.move(640, 400)
    for _ in range(100):  # a flick's speed: 50,000 px a second
        page.mouse.wheel(0, 800)
        page.wait_for_timeout(16)
    # The loads the fling started may still be on their way on a loaded machine: waited for
    # (bounded), the frames watched meanwhile counted too.
    page.wait_for_function("n => document.querySelectorAll('#rows > tr[data-id]').length > n", arg=100)
    got = page.evaluate("fling")
    assert got["frames"] > 20, got
    assert got["bad"] == 0, got
    context.close()


def test_a_fling_to_the_end_of_what_is_loaded_stops_on_rows_on_a_landscape_phone(live, browser: Browser):
    """A fling that reaches the bottom of the document before the next page (the reader sees the
    skeleton alone): the rows take the skeleton's place and the reader sees them, and loading stops
    there. Before, the drop of far rows above had nothing to hold on to and pulled the next
    skeleton into view, which loaded again: 1,000 orders streamed to the list's end in about two
    seconds while the reader saw no row."""
    given(live, 1000, AUTO_PAGES=10_000)
    context = browser.new_context(viewport=VIEWPORTS["landscape phone"], is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    page.evaluate("() => { window.__wheels = 0; addEventListener('wheel', () => window.__wheels++); }")
    page.mouse.move(200, 200)
    for _ in range(15):
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(60)
    # Every wheel reached the page before loads are counted: on a loaded machine some were still
    # queued, and the pages they loaded counted as loads after the fling.
    page.wait_for_function("() => window.__wheels >= 15")
    page.evaluate(
        "() => { window.__after = 0;"
        " document.addEventListener('orders:loaded', e => { if (!e.detail.up) window.__after++; }); }"
    )
    settled(page)
    loads = page.evaluate("window.__after")
    in_view = page.evaluate(
        "() => [...document.querySelectorAll('#rows > tr[data-id]')]"
        ".filter(r => r.getBoundingClientRect().bottom > 0 && r.getBoundingClientRect().top < innerHeight)"
        ".length"
    )
    assert in_view > 0, "the reader sees no row"
    assert loads <= 3, f"{loads} pages loaded below after the fling stopped"
    context.close()


@EVERY_ENGINE
def test_keys_move_focus_row_to_row_enter_opens_and_back_returns_to_it(live, page: Page):
    given(live, 300, AUTO_PAGES=10_000)
    page.goto(live.url + "/orders")
    rows = page.locator(ROWS)
    expect(rows.first).to_be_visible()
    rows.first.locator("a").focus()
    page.keyboard.press("j")
    expect(rows.nth(1)).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(rows.nth(2)).to_be_focused()
    page.keyboard.press("k")
    expect(rows.nth(1)).to_be_focused()
    page.keyboard.press("ArrowUp")
    expect(rows.first).to_be_focused()
    # Past the rows loaded: the next page loads and the focus goes on, each row in view.
    for _ in range(45):
        page.keyboard.press("j")
    target = page.locator(":focus")
    expect(target).to_have_attribute("data-id", rows.nth(45).get_attribute("data-id") or "")
    expect(target).to_be_in_viewport(ratio=0.99)
    assert target.evaluate(f"r => r.getBoundingClientRect().top >= {INSET} - 1")
    # Page Down and Page Up: a screenful, focus on the row then on top, shown whole below the bar.
    # (Page Up brings the bar back first and goes up by what it leaves: less than Page Down went.)
    for key, way in (("PageDown", 1), ("PageUp", -1)):
        y = page.evaluate("scrollY")
        page.keyboard.press(key)
        moved = way * (page.evaluate("scrollY") - y)
        assert moved > 0.5 * page.viewport_size["height"], (key, moved)
        focused = page.evaluate("() => document.activeElement.dataset.id")
        assert focused == page.evaluate("() => window.ordersList.firstVisibleRow().dataset.id")
        assert page.locator(":focus").evaluate(f"r => r.getBoundingClientRect().top >= {INSET} - 1"), key
    # Enter opens the focused row; Back returns focus to it (never to <body>).
    opened = page.evaluate("() => document.activeElement.dataset.id")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/orders/{opened}$"))
    page.go_back()
    expect(page.locator(f"#order-{opened}")).to_be_focused()


def test_focus_is_on_the_first_row_after_showing_new_orders(live, page: Page):
    given(live, 60, NEW_ORDERS_POLL_SECONDS=1)
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    new = add_new_orders(live, [f"New {m}" for m in (1, 2)])
    banner = page.get_by_role("link", name=re.compile("2 new orders"))
    expect(banner).to_be_visible(timeout=10_000)
    banner.click()
    expect(page.locator(ROWS).first).to_have_attribute("data-id", str(new[-1]))
    expect(page.locator(ROWS).first).to_be_focused()
    assert page.evaluate("document.activeElement !== document.body")


@pytest.mark.parametrize(("sort", "expected"), [("oldest", 1), ("newest", 2)])
def test_a_date_alone_lands_on_the_first_order_of_that_day_in_the_readers_zone(
    live, browser: Browser, sort, expected
):
    """In Tokyo (UTC+9) 2026-03-11 runs from 2026-03-10T15:00Z to 2026-03-11T15:00Z."""
    utc = dt.UTC
    ids = add_orders_to(
        live,
        [
            (dt.datetime(2026, 3, 10, 14, 59, tzinfo=utc), "Late on the 10th", Decimal("1.00"), "paid"),
            (dt.datetime(2026, 3, 10, 15, 1, tzinfo=utc), "First of the 11th", Decimal("1.00"), "paid"),
            (dt.datetime(2026, 3, 11, 14, 59, tzinfo=utc), "Last of the 11th", Decimal("1.00"), "paid"),
            (dt.datetime(2026, 3, 11, 15, 1, tzinfo=utc), "Early on the 12th", Decimal("1.00"), "paid"),
        ],
    )
    context = browser.new_context(timezone_id="Asia/Tokyo")
    page = context.new_page()
    page.goto(live.url + f"/orders?sort={sort}")
    page.get_by_label("Go to date and time").fill("2026-03-11")
    page.get_by_role("button", name="Go", exact=True).click()
    expect(page).to_have_url(re.compile(rf"#order-{ids[expected]}$"))
    expect(page.locator(f"#order-{ids[expected]}")).to_be_focused()
    expect(page.locator("#jump-message")).to_be_empty()
    context.close()
