"""A landscape phone (under 500 px tall) shows rows at the top of the list (issue 41, item 2), in
a real Chromium: the site header and the find bar take at most half the height at the top, at
most a fifth while reading, and the folded forms come back when asked for (the button, "/").
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from .live import COVERED, ROWS, given

pytestmark = pytest.mark.browser

LANDSCAPE = {"844x390": {"width": 844, "height": 390}, "740x360": {"width": 740, "height": 360}}
# How far down the screen the site header and the find bar reach, as a share of its height.
BAR_BOTTOM = "() => document.getElementById('find-bar').getBoundingClientRect().bottom / innerHeight"
# The same with the column headers, while reading (the bar tucked).


def landscape(browser: Browser, live: Any, size: str) -> Page:
    given(live, 300)
    context = browser.new_context(viewport=LANDSCAPE[size], is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    return page


@pytest.mark.parametrize("size", LANDSCAPE)
def test_at_the_top_the_header_and_bar_take_at_most_half_and_rows_show(live, browser: Browser, size):
    page = landscape(browser, live, size)
    share = page.evaluate(BAR_BOTTOM)
    assert share <= 0.5, f"{size}: header and bar reach {share:.0%} of the height"
    # Whole rows show below the bar and the column headers.
    expect(page.locator(ROWS).first).to_be_in_viewport(ratio=1)
    expect(page.locator(ROWS).nth(1)).to_be_in_viewport(ratio=1)
    # While reading: at most a fifth, as on every screen.
    page.mouse.move(LANDSCAPE[size]["width"] / 2, LANDSCAPE[size]["height"] / 2)
    for _ in range(40):
        if page.evaluate("scrollY") >= 2500:
            break
        page.mouse.wheel(0, 300)
        page.wait_for_timeout(40)  # pacing, as a hand's wheel
    page.wait_for_function("() => document.documentElement.classList.contains('bar-tucked')")
    covered = page.evaluate(COVERED)
    assert covered <= 0.2, f"{size}: {covered:.0%} covered while reading"
    page.context.close()


def test_the_folded_forms_open_by_their_button_and_by_slash(live, browser: Browser):
    page = landscape(browser, live, "844x390")
    toggle = page.get_by_role("button", name="Sort, search, go to")
    search = page.get_by_role("searchbox")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(search).to_be_hidden()
    toggle.tap()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(search).to_be_visible()
    expect(page.get_by_role("combobox", name="Sort")).to_be_visible()
    assert page.evaluate("scrollY") == 0  # opening them scrolled nothing
    toggle.tap()
    expect(search).to_be_hidden()
    # "/" opens them and puts the focus in the search box.
    page.locator(ROWS).first.focus()
    page.keyboard.press("/")
    expect(search).to_be_focused()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    page.context.close()


def test_deep_in_the_list_at_200_percent_the_open_forms_reach_go(live, browser: Browser):
    """A phone at 200% zoom (195x422 CSS px): the open forms make the bar 531 px tall, and stuck to
    the top deep in the list its last 110 px (the go-to field's Go) lay below the screen, out of
    reach of any scroll (the page's scroll tucks the bar). The bar scrolls within itself there."""
    given(live, 300)
    context = browser.new_context(viewport={"width": 195, "height": 422}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    page.mouse.move(97, 300)
    for _ in range(12):
        page.mouse.wheel(0, 300)
        page.wait_for_timeout(40)
    page.mouse.wheel(0, -60)  # a small scroll up brings the bar back, stuck to the top
    page.wait_for_function("() => !document.documentElement.classList.contains('bar-tucked')")
    page.get_by_role("button", name="Sort, search, go to").tap()
    go = page.get_by_role("button", name="Go", exact=True)
    expect(go).to_be_visible()
    assert page.evaluate("scrollY") > 1000  # still deep in the list
    go.scroll_into_view_if_needed()  # as a finger's swipe over the bar, or Tab, brings it
    expect(go).to_be_in_viewport(ratio=1)
    box = page.locator("#find-bar").bounding_box()
    assert box and box["y"] >= -0.5 and box["y"] + box["height"] <= 422.5, box
    context.close()
