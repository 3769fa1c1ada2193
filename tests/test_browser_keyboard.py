"""Tab and Shift+Tab through the rows' links never leave focus under the sticky bar, in
Chromium, Firefox and WebKit at a desktop's and a phone's width.

A keyboard walk found 2 of every 10 Shift+Tab stops on a row link wholly under the sticky find
bar or the column headers: the browser scrolls a focused element into view only when it lies
outside the viewport, and under a sticky bar it is inside it. static/js/reader.js now shows such
a row whole below the bar (the rows' own scroll-margin-top, what "on top" means everywhere).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from playwright.sync_api import Page
from werkzeug.datastructures import EnvironHeaders

from .browsers import EVERY_ENGINE, GECKO_TOO, expect, known_bug
from .live import FIRST_IN_VIEW, INSET, ROWS, given, local_only, scroll_still, settled

pytestmark = [pytest.mark.browser]

# The focused element's row: its top and bottom against the list area's top and the viewport.
FOCUSED_ROW = f"""() => {{
  const row = document.activeElement && document.activeElement.closest('#rows tr[data-id]');
  if (!row) return null;
  const box = row.getBoundingClientRect();
  return {{id: row.dataset.id, top: box.top, bottom: box.bottom, inset: {INSET}, height: innerHeight,
          link: document.activeElement !== row}};
}}"""


# MiniBrowser's window (WebKit's WebDriver) is at least 447 px wide: the phone in Firefox only.
@pytest.mark.parametrize(
    "size",
    [
        pytest.param({"width": 1280, "height": 800}, id="desktop", marks=EVERY_ENGINE),
        pytest.param({"width": 390, "height": 844}, id="phone", marks=GECKO_TOO),
    ],
)
def test_shift_tab_and_tab_through_row_links_show_each_row_below_the_bar(live, page: Page, size):
    given(live, 200)
    page.set_viewport_size(size)
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(10)).to_be_attached()
    # Read a while down the list (the bar tucks), then go back up by keyboard from a row's link.
    page.mouse.move(size["width"] / 2, size["height"] / 2)
    for _ in range(4):
        page.mouse.wheel(0, 500)
        page.wait_for_timeout(150)
    row = page.locator(ROWS).nth(24)
    expect(row).to_be_attached()
    row.get_by_role("link").first.focus()
    seen = []
    for key in ["Shift+Tab"] * 12 + ["Tab"] * 12:
        page.keyboard.press(key)
        where = page.evaluate(FOCUSED_ROW)
        if where is None or not where["link"]:
            continue
        seen.append(where)
        assert where["top"] >= where["inset"] - 1, f"after {key}, row {where['id']} is under the bar: {where}"
        assert where["bottom"] <= where["height"] + 1, f"after {key}, row {where['id']} is below the screen"
    assert len({w["id"] for w in seen}) >= 6, f"the keys went through too few rows: {seen}"


# The row the focus is on, and whether it is shown whole below the sticky bar.
FOCUSED_IN_VIEW = f"""() => {{
  const row = document.activeElement;
  if (!row || !row.matches('#rows > tr[data-id]')) return null;
  const box = row.getBoundingClientRect();
  return {{id: row.dataset.id, whole: box.top >= {INSET} - 1 && box.bottom <= innerHeight + 1}};
}}"""


@EVERY_ENGINE
@pytest.mark.parametrize("key", ["ArrowUp", "k"])
def test_after_end_the_keys_up_go_on_from_the_end_to_the_rows_above(
    live, page: Page, key, request, browser_name
):
    """End puts the focus on "End of orders." (the next Tab is the footer), and "the next key goes
    on from there": a QA trial found Up scrolling 40 px and k doing nothing until Shift+Tab, as
    static/js/reader.js moved the focus only from a row. Up and k now reach the last row, then
    the one above it."""
    known_bug(
        request,
        browser_name,
        ("webkit",),
        "once in a full run (2026-12-07, night; early, when every worker starts its browsers) End "
        "left the focus on the first row for 30 s; never alone (3 of 3 passed after it), as "
        "test_browser_place.py's two WebKit focus bugs of full runs",
        strict=False,
    )
    given(live, 100)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.bring_to_front()  # focus is only shown in the page that has the window's focus
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(10)).to_be_attached()
    page.locator(ROWS).first.focus()  # a reader in the list (End is the list's key, not a field's)
    expect(page.locator(ROWS).first).to_be_focused()
    page.keyboard.press("End")
    expect(page.locator("#end-of-list")).to_be_focused()
    # Read from the end in one go: rows load above meanwhile (the list opened at its end).
    last, above = page.evaluate(
        "() => { const last = document.getElementById('end-of-list').previousElementSibling;"
        " return [last.dataset.id, last.previousElementSibling.dataset.id]; }"
    )
    page.keyboard.press(key)
    expect(page.locator(f"#order-{last}")).to_be_focused()
    page.keyboard.press(key)
    expect(page.locator(f"#order-{above}")).to_be_focused()
    assert page.evaluate(FOCUSED_IN_VIEW) == {"id": above, "whole": True}


# The focused row against the sticky area as the page draws it: the find bar's bottom and, on
# tables, the column headers' (measured, not the rows' scroll-margin-top the script goes by).
FOCUSED_BELOW_THE_BAR = """() => {
  const row = document.activeElement;
  if (!row || !row.matches('#rows > tr[data-id]')) return null;
  const bar = document.getElementById('find-bar').getBoundingClientRect();
  const th = document.querySelector('#orders thead th');
  const head = th && th.getClientRects().length ? th.getBoundingClientRect().bottom : 0;
  const box = row.getBoundingClientRect();
  return {id: row.dataset.id, top: box.top, bottom: box.bottom, sticky: Math.max(bar.bottom, head, 0),
          height: innerHeight, tucked: document.documentElement.classList.contains('bar-tucked')};
}"""


@EVERY_ENGINE
def test_page_down_and_page_up_focus_a_row_shown_whole_below_the_bar(live, page: Page):
    """A reader's trial (Chromium, Firefox, WebKit at 1280x800): after "Skip to the orders", the
    2nd Page Down focused a row with 31.7 of its 41.8 px under the column headers (the first row
    at least partly in view), and Page Up brought the bar back over the row it had just focused,
    wholly hidden, so Enter opened an order the reader could not see. After every key the focused
    row is whole, below the sticky bar and headers as drawn and above the viewport's bottom."""
    given(live, 300)
    _into_the_rows(live, page)
    seen = []
    for key in ["PageDown"] * 6 + ["PageUp"] * 2:
        # At a reader's pace: the rows a key brought near are in before the next key (a key past
        # the rows loaded is another matter), and arriving or going they keep the place.
        page.wait_for_function("() => !window.ordersList.busy()")
        page.keyboard.press(key)
        page.wait_for_timeout(100)
        page.wait_for_function("() => !window.ordersList.busy()")
        where = page.evaluate(FOCUSED_BELOW_THE_BAR)
        assert where is not None, f"after {key} no row has the focus"
        seen.append((key, where))
        row = f"after {key} #{where['id']}"
        assert where["top"] >= where["sticky"] - 1, f"{row} is under the bar: {seen}"
        assert where["bottom"] <= where["height"] + 1, f"{row} is below the screen: {seen}"
    assert len({w["id"] for _, w in seen}) == len(seen), f"a key did not move the focus: {seen}"


class HeldRows:
    """The app's answers with the next rows (htmx's fragments: not a page, nor open()'s whole
    list for End) held back until `let_go()`: the end of the rows loaded, reached at any pace, as
    WebKit's reader reached it (its next page comes later than Chromium's)."""

    def __init__(self, live: Any):
        from orders.web.htmx import Kind, classify

        self.fragment = lambda environ: classify(EnvironHeaders(environ)) is Kind.FRAGMENT
        self.gone = threading.Event()
        self.wsgi = live.app.wsgi_app
        live.app.wsgi_app = self

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/orders" and self.fragment(environ):
            self.gone.wait(30)
        return self.wsgi(environ, start_response)

    def let_go(self) -> None:
        self.gone.set()


# The focused row is at or after (`after`: 1) or before (-1) row `id`, or is that row (0).
FOCUS_FROM = """([id]) => {
  const row = document.getElementById('order-' + id), active = document.activeElement;
  if (!row || row === active) return 0;
  return row.compareDocumentPosition(active) & Node.DOCUMENT_POSITION_FOLLOWING ? 1 : -1;
}"""


# The row beside row `id` (`side`: nextElementSibling or previousElementSibling) is a row: the
# next page is in.
NEXT_ROW_IN = """([id, side]) => {
  const row = document.getElementById('order-' + id), next = row && row[side];
  return !!next && next.hasAttribute('data-id');
}"""


def _into_the_rows(live: Any, page: Page) -> None:
    """The list at 1280x800, the focus on its first row as a keyboard reader puts it there: Tab to
    "Skip to the orders", then Enter."""
    page.set_viewport_size({"width": 1280, "height": 800})
    page.bring_to_front()  # focus is only shown in the page that has the window's focus
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(10)).to_be_attached()
    page.keyboard.press("Tab")
    expect(page.locator("a.skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(ROWS).first).to_be_focused()


def _shown_whole(page: Page, key: str, seen: list[Any]) -> dict[str, Any]:
    where = page.evaluate(FOCUSED_BELOW_THE_BAR)
    seen.append((key, where))
    assert where is not None, f"after {key} no row has the focus: {seen}"
    row = f"after {key} #{where['id']}"
    assert where["top"] >= where["sticky"] - 1, f"{row} is above the screen or under the bar: {seen}"
    assert where["bottom"] <= where["height"] + 1, f"{row} is below the screen: {seen}"
    return where  # type: ignore[no-any-return]  # the page's JSON: Any


@EVERY_ENGINE
def test_page_down_past_the_rows_loaded_keeps_the_focus_in_view_and_goes_on_with_the_next_page(
    live, page: Page
):
    """A reader's trial in WebKit (1280x800): a Page Down that reached the end of the rows loaded
    before the next page came left the focus on a row above the screen (the view went on into
    the next page's skeleton, where there is no row to focus). Page Down goes no further than the
    last row loaded on top, focused; the keys go on once the next page is in, and a held key
    while pages load keeps the focus in view, never going back. Here the next pages wait until
    let go, so it happens in every engine (Chromium and Firefox did the same, only later)."""
    local_only(live, "holds the app's answers back")
    given(live, 300)
    held = HeldRows(live)
    try:
        _into_the_rows(live, page)
        last = page.locator(ROWS).last.get_attribute("data-id")
        seen: list[Any] = []
        for key in ["PageDown"] * 4:  # the 2nd reaches the last row loaded, the rest a held key
            page.keyboard.press(key)
            _shown_whole(page, key, seen)
        assert seen[-1][1]["id"] == last, f"the keys stopped short of the last row, #{last}: {seen}"
        held.let_go()
        page.wait_for_function(NEXT_ROW_IN, arg=[last, "nextElementSibling"])
        page.wait_for_function("() => !window.ordersList.busy()")
        page.keyboard.press("PageDown")
        _shown_whole(page, "PageDown", seen)
        assert page.evaluate(FOCUS_FROM, [last]) == 1, f"the key did not go on from #{last}: {seen}"
        for _ in range(6):  # held while the pages load
            before = seen[-1][1]["id"]
            page.keyboard.press("PageDown")
            _shown_whole(page, "PageDown", seen)
            assert page.evaluate(FOCUS_FROM, [before]) >= 0, f"the focus went back from #{before}: {seen}"
    finally:
        held.let_go()


@EVERY_ENGINE
def test_after_end_page_up_focuses_a_row_in_view_while_the_rows_above_load(live, page: Page):
    """End puts the focus on "End of orders."; Page Up from there scrolled the page the browser's
    way and left the focus there, below the screen (every engine). It goes on as from the last
    row: a screenful up, the row on top focused; with the rows above still on their way, the first
    row loaded, whole; and on up as they come."""
    local_only(live, "holds the app's answers back")
    given(live, 300)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.bring_to_front()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(10)).to_be_attached()
    page.wait_for_function("() => window.ordersList && !window.ordersList.busy()")
    held = HeldRows(live)
    try:
        page.locator(ROWS).first.focus()
        page.keyboard.press("End")
        expect(page.locator("#end-of-list")).to_be_focused()
        seen: list[Any] = []
        for key in ["PageUp"] * 3:  # the 2nd reaches the first row loaded, the 3rd a held key
            page.keyboard.press(key)
            _shown_whole(page, key, seen)
        first = page.locator(ROWS).first.get_attribute("data-id")
        assert seen[-1][1]["id"] == first, f"the keys stopped short of the first row, #{first}: {seen}"
        held.let_go()
        page.wait_for_function(NEXT_ROW_IN, arg=[first, "previousElementSibling"])
        for _ in range(4):
            before = seen[-1][1]["id"]
            page.keyboard.press("PageUp")
            _shown_whole(page, "PageUp", seen)
            assert page.evaluate(FOCUS_FROM, [before]) <= 0, f"the focus went down from #{before}: {seen}"
        assert page.evaluate(FOCUS_FROM, [first]) == -1, f"the keys did not go on above #{first}: {seen}"
    finally:
        held.let_go()


# How far row `id` lies below the top of the list area (negative: under the sticky bar).
ROW_OFFSET = f"id => document.getElementById('order-' + id).getBoundingClientRect().top - {INSET}"


@EVERY_ENGINE
def test_a_resize_keeps_the_focused_row_on_top(live, page: Page):
    """A reader who read down by Page Down and then resized the window lost their row: in WebKit
    at 620x800 (cards) it lay 85 px under the bar, the next row on top: the bar's height changes
    with the size, WebKit measured it (controls.js) before the resize event, and the row went
    back to where it was on the screen, under the taller bar; WebKit also lays the new size out
    after the event, at times frames later. In Chromium at 844x390 after 620x800 it lay 27 px under
    the bar: the row above it, all but 1.6 px under the bar as a card, had kept its 70 px offset as
    a table row of 42. The focused row stays on top, whole below the bar (within 2 px: whole
    pixels of scroll, fractional rows), through each resize (two steps each in WebKit's adapter)."""
    given(live, 400)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.bring_to_front()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(10)).to_be_attached()
    page.locator(ROWS).first.focus()
    for _ in range(5):
        page.wait_for_function("() => window.ordersList && !window.ordersList.busy()")
        page.keyboard.press("PageDown")
    row = page.evaluate("document.activeElement.dataset.id")
    settled(page)
    expect(page).to_have_url(re.compile(rf"#order-{row}$"))  # the place is noted
    seen = [("1280x800", page.evaluate(ROW_OFFSET, row))]
    for width, height in ((620, 800), (844, 390), (1280, 800)):
        page.set_viewport_size({"width": width, "height": height})
        scroll_still(page, 400)
        seen.append((f"{width}x{height}", page.evaluate(ROW_OFFSET, row), page.evaluate(FIRST_IN_VIEW)))
        assert -1 <= seen[-1][1] <= 2, (
            f"#{row} is not on top at {width}x{height} (px below the top, first): {seen}"
        )
        expect(page.locator(f"#order-{row}")).to_be_focused()
