"""What a person reads on a narrow screen: a phone (390 px; 375 and 360 px for the selects), the
narrowest phones (320 px, WCAG's reflow width) and a phone at 200% zoom (195 px), all touch:
every card's order number whole (a user's trial read "#300..."), every card's time whole beside
the largest amounts, on cards of one height (320 to 447 px), Top and End beside the title and
the estimate, never on them, and each select box showing its chosen value (Sort and Status
were a letter wide at 195 px, Status cut at 390 px). Measured as drawn: text against its box,
boxes against each other. Chromium, and Firefox (classic scrollbars) for the cards and selects;
WebKit too for the cards' time at 447 px (MiniBrowser's narrowest window).

Locally the store is made to look as large as the trial's: three orders with 7-, 8- and
19-digit numbers, and counts that read "about 300,000" (the estimates are the kept counts,
docs/finding.md). A deployment is measured with its own orders and counts.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route
from sqlalchemy import text
from sqlalchemy.orm import Session

from orders.data.models import STATUSES, Order, OrderCount

from .browsers import EVERY_ENGINE, GECKO_TOO, expect
from .helpers import BASE
from .live import ROWS, add_orders_to, given

pytestmark = pytest.mark.browser

# (width, height, device pixels per CSS pixel): 200% zoom is half the CSS pixels, twice as dense.
SIZES = {
    "phone": (390, 844, 3),
    "small-phone": (375, 667, 2),
    "smaller-phone": (360, 780, 3),
    "narrowest-phone": (320, 568, 2),
    "phone-at-200%": (195, 422, 4),
    "phone-landscape": (844, 390, 3),
}
NARROW = ["phone", "narrowest-phone", "phone-at-200%"]
# The numbers a growing store reaches: whole on one line up to eight digits, wrapped beyond.
LONG_IDS = (3_000_000, 30_000_000, 9_000_000_000_000_000_000)
ONE_LINE_DIGITS = 8
BIG_COUNT = 75_000  # per status: "about 300,000 orders" in all


def narrow_page(browser: Browser, size: str, browser_name: str) -> Page:
    width, height, scale = SIZES[size]
    # Playwright's Firefox has no mobile emulation; its touch and pixel density it has.
    mobile = {"is_mobile": True} if browser_name == "chromium" else {}
    context = browser.new_context(
        viewport={"width": width, "height": height}, device_scale_factor=scale, has_touch=True, **mobile
    )
    return context.new_page()


@pytest.fixture
def large_store(live: Any) -> Iterator[None]:
    """Locally: 40 orders, three more numbered as a large store's (the newest, "Cancelled", the
    widest badge) and counts of about 300,000; taken back after the test (the database and its id
    sequence serve the session's other tests). A deployment as it is."""
    given(live, 40)  # before the large numbers: ids go on from the largest
    if getattr(live, "app", None) is None:
        yield
        return
    engine = live.app.extensions["engine"]
    newest = max(BASE, dt.datetime.now(dt.UTC)) + dt.timedelta(minutes=1)  # the first page's
    with Session(engine) as session:
        for n, order_id in enumerate(LONG_IDS):
            when = newest - dt.timedelta(seconds=n)
            session.add(
                Order(
                    id=order_id, created_at=when, customer="Large", amount=Decimal("12.5"), status="cancelled"
                )
            )
        for status in STATUSES:
            count = session.get(OrderCount, (status, 0)) or OrderCount(status=status, stripe=0, n=0)
            count.n += BIG_COUNT
            session.add(count)
        session.commit()
    try:
        yield
    finally:
        with Session(engine) as session:
            for order_id in LONG_IDS:
                session.execute(text("DELETE FROM orders WHERE id = :id"), {"id": order_id})
            for status in STATUSES:
                count = session.get(OrderCount, (status, 0))
                assert count is not None
                count.n -= BIG_COUNT
            if engine.dialect.name == "sqlite":  # AUTOINCREMENT would go on from the largest
                largest = "SELECT COALESCE(MAX(id), 0) FROM orders"
                session.execute(text(f"UPDATE sqlite_sequence SET seq = ({largest}) WHERE name = 'orders'"))
            session.commit()


# Each card's number: its text, and whether the cell shows all of it (no part cut away sideways
# or below) and on how many lines.
NUMBERS = """rows => rows.map(row => {
  const cell = row.querySelector('td.id'), link = cell.querySelector('a');
  return {id: row.dataset.id, text: link.textContent,
          cut: cell.scrollWidth > cell.clientWidth + 0.5 || cell.scrollHeight > cell.clientHeight + 0.5,
          lines: link.getClientRects().length};
})"""

SKELETON = """() => ({skeleton: document.querySelector('#more .sk').getBoundingClientRect().height,
  card: [...document.querySelectorAll('#rows > tr[data-id]')].pop().getBoundingClientRect().height})"""


@GECKO_TOO
@pytest.mark.parametrize("size", NARROW)
def test_every_cards_order_number_shows_whole(live, browser: Browser, browser_name, large_store, size):
    page = narrow_page(browser, size, browser_name)
    held: list[Route] = []  # the next page's request: its skeleton stays
    page.route(re.compile(r".*/orders\?.*after=.*page="), lambda route: held.append(route))
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).nth(19)).to_be_attached()
    numbers = page.locator(ROWS).evaluate_all(NUMBERS)
    if getattr(live, "app", None) is not None:
        assert {int(n["id"]) for n in numbers} >= set(LONG_IDS), (
            "the large store's orders are not on the page"
        )
    assert [n for n in numbers if n["text"] != "#" + n["id"] or n["cut"]] == [], "numbers not shown whole"
    short = [n for n in numbers if len(n["id"]) <= ONE_LINE_DIGITS]
    assert [n for n in short if n["lines"] != 1] == [], f"up to {ONE_LINE_DIGITS} digits on one line"
    # A loading page's skeleton rows are a card's height (the last card's: a short number), so
    # nothing moves when the cards take their place.
    page.locator("#more").scroll_into_view_if_needed()
    heights = page.evaluate(SKELETON)
    assert abs(heights["skeleton"] - heights["card"]) <= 0.5, heights
    page.context.close()


# Where the title, the estimate and the ends of the list are drawn: each line of the estimate's
# text on its own (a wrapped inline's bounding box would also cover the space beside its lines).
HEAD = """() => {
  const rects = el => el ? [...el.getClientRects()]
    .map(r => ({name: el.className || el.tagName, l: r.left, r: r.right, t: r.top, b: r.bottom})) : [];
  const bar = document.getElementById('find-bar');
  return {title: [...rects(bar.querySelector('h1')), ...rects(bar.querySelector('.estimate'))],
          ends: [...bar.querySelectorAll('.find-ends a')].flatMap(rects),
          width: document.documentElement.clientWidth};
}"""


def overlaps(a: dict, b: dict) -> bool:
    return min(a["r"], b["r"]) - max(a["l"], b["l"]) > 0.5 and min(a["b"], b["b"]) - max(a["t"], b["t"]) > 0.5


@pytest.mark.parametrize("size", [*NARROW, "phone-landscape"])
def test_top_and_end_never_cover_the_title_or_the_estimate(
    live, browser: Browser, browser_name, large_store, size
):
    page = narrow_page(browser, size, browser_name)
    page.goto(live.url + "/orders")
    expect(page.locator(ROWS).first).to_be_visible()
    head = page.evaluate(HEAD)
    assert len(head["title"]) >= 2 and len(head["ends"]) == 3, head
    if getattr(live, "app", None) is not None:
        expect(page.locator("#find-bar .estimate")).to_contain_text("about 300,000 orders")
    assert [(t, e) for t in head["title"] for e in head["ends"] if overlaps(t, e)] == []
    inside = [box["l"] >= 0 and box["r"] <= head["width"] + 0.5 for box in head["title"] + head["ends"]]
    assert all(inside), head
    page.context.close()


# Each select of the bar: its box, and the width the browser gives the same select (same rules,
# same place) holding only the chosen option and sized to it: what the chosen value needs to show
# whole, with the box's padding and arrow.
SELECTS = """bar => [...bar.querySelectorAll('select')].map(select => {
  const alone = select.cloneNode(false);
  alone.append(select.selectedOptions[0].cloneNode(true));
  Object.assign(alone.style,
                {position: 'absolute', width: 'auto', minWidth: '0', maxWidth: 'none', visibility: 'hidden'});
  select.after(alone);
  const needs = alone.getBoundingClientRect().width;
  alone.remove();
  const box = select.getBoundingClientRect();
  return {name: select.name, value: select.selectedOptions[0].text, needs,
          width: box.width, height: box.height, left: box.left, right: box.right};
})"""
# The bar's controls in view smaller than a thumb's target.
SMALL = """bar => [...bar.querySelectorAll('a[href], button, select, input:not([type=hidden])')]
  .filter(e => e.getClientRects().length && !e.closest('.visually-hidden'))
  .map(e => [e.outerHTML.slice(0, 50), e.getBoundingClientRect().width, e.getBoundingClientRect().height])
  .filter(([, w, h]) => w < 44 || h < 44)"""
# The longest sort and status values: "Largest amount", "Customer A–Z", "Cancelled".
CHOICES = [("newest", ""), ("amount", "cancelled"), ("customer", "shipped")]


@GECKO_TOO
@pytest.mark.parametrize("size", [*NARROW, "small-phone", "smaller-phone", "phone-landscape"])
def test_each_select_shows_its_chosen_value(live, browser: Browser, browser_name, large_store, size):
    page = narrow_page(browser, size, browser_name)
    for sort, status in CHOICES:
        page.goto(f"{live.url}/orders?sort={sort}&status={status}")
        expect(page.locator(ROWS).first).to_be_visible()
        toggle = page.locator("#find-bar .find-toggle")
        if toggle.is_visible():  # a short screen: the forms are folded away until asked for
            toggle.click()
        expect(page.locator("#find-bar select").first).to_be_visible()
        selects = page.locator("#find-bar").evaluate(SELECTS)
        width = page.evaluate("document.documentElement.clientWidth")
        assert [s["name"] for s in selects] == ["sort", "status"], selects
        cut = [s for s in selects if s["needs"] > s["width"] + 0.5]
        assert cut == [], f"{sort}, {status or 'any'}: a chosen value does not fit its box"
        # Inside the page's width, each a thumb-sized target on a touch screen (WCAG 2.5.5; a
        # touch screen to CSS: Playwright's Firefox keeps a fine pointer with touch events).
        assert all(s["left"] >= 0 and s["right"] <= width for s in selects), selects
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        if page.evaluate("matchMedia('(pointer: coarse)').matches"):
            small = page.locator("#find-bar").evaluate(SMALL)
            assert small == [], f"smaller than 44x44 px: {small}"
    page.context.close()


# A search's words as the bar repeats them: a long name word (from about twelve letters it ran
# under Top, End and Site links at 390 px) and the longest word the box takes whole (62 letters
# made the page 869 px wide).
LONG_WORDS = ["Wolfeschlegelsteinhausenbergerdorff", "W" * 62]
# The status text's lines as drawn (a range over its text: each line's own box, the overflowing
# part of an unbroken word included), the ends of the list's boxes, and the page's width.
STATUS_TEXT = """() => {
  const rects = list => [...list].map(r => ({l: r.left, r: r.right, t: r.top, b: r.bottom}));
  const where = document.querySelector('#find-bar .find-where');
  const walk = document.createTreeWalker(where, NodeFilter.SHOW_TEXT);
  const text = [];
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    if (!node.textContent.trim() || node.parentElement.closest('.visually-hidden')) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    text.push(...rects(range.getClientRects()));
  }
  const ends = [...document.querySelectorAll('#find-bar .find-ends a')];
  return {text, ends: ends.flatMap(a => rects(a.getClientRects())),
          scroll: document.documentElement.scrollWidth, width: innerWidth,
          client: document.documentElement.clientWidth};
}"""


@GECKO_TOO
@pytest.mark.parametrize("size", ["phone", "small-phone", "narrowest-phone", "phone-landscape"])
def test_a_long_search_word_wraps_beside_top_and_end(live, browser: Browser, browser_name, size):
    given(live, 20)
    page = narrow_page(browser, size, browser_name)
    for word in LONG_WORDS:
        page.goto(f"{live.url}/orders?q={word}")
        status = page.locator("#find-bar .find-where")
        expect(status).to_contain_text(f"starting with each word of “{word}”")
        drawn = page.evaluate(STATUS_TEXT)
        assert drawn["text"] and len(drawn["ends"]) == 3, drawn
        over = [(t, e) for t in drawn["text"] for e in drawn["ends"] if overlaps(t, e)]
        assert over == [], f"{size}, {len(word)} letters: the status text runs under the ends of the list"
        assert all(t["l"] >= 0 and t["r"] <= drawn["client"] + 0.5 for t in drawn["text"]), drawn
        assert drawn["scroll"] <= drawn["width"], f"{size}, {len(word)} letters: the page scrolls sideways"
    page.context.close()


# The amounts a growing store reaches, up to the largest an order holds (NUMERIC(12, 2)).
LARGE_AMOUNTS = ("99999.99", "9999999.99", "99999999.99", "999999999.99", "9999999999.99")
# These orders' cards in the document: each time and amount as drawn (the text's own box: a cut
# text's box runs past its cell), whether the cell cuts it, and whether they run into each other
# or out of the card; the height of every card in the document and of a skeleton row.
CARD_LINES = """ids => {
  const drawn = el => { const range = document.createRange(); range.selectNodeContents(el);
                        return range.getBoundingClientRect(); };
  const cards = ids.map(id => document.getElementById('order-' + id)).filter(row => row).map(row => {
    const card = row.getBoundingClientRect();
    const time = row.querySelector('td.created'), amount = row.querySelector('td.amount');
    const [t, a, cell] = [drawn(time), drawn(amount), time.getBoundingClientRect()];
    return {time: time.textContent, amount: amount.textContent,
            cut: time.scrollWidth > time.clientWidth
                 || t.left < cell.left - 0.5 || t.right > cell.right + 0.5,
            clipped: amount.scrollWidth > amount.clientWidth,
            out: Math.max(t.right, a.right) > card.right + 0.5,
            over: Math.min(t.right, a.right) - Math.max(t.left, a.left) > 0.5
                  && Math.min(t.bottom, a.bottom) - Math.max(t.top, a.top) > 0.5};
  });
  const skeleton = document.querySelector('#more .sk');
  const rows = [...document.querySelectorAll('#rows > tr[data-id]')];
  return {cards, heights: rows.map(r => r.getBoundingClientRect().height),
          skeleton: skeleton && skeleton.getBoundingClientRect().height,
          sideways: document.documentElement.scrollWidth > document.documentElement.clientWidth};
}"""
NEXT_PAGE = re.compile(r".*/orders\?.*after=.*page=")


# MiniBrowser's window (WebKit's WebDriver) is at least 447 px wide: the narrower phones in
# Chromium and Firefox (a classic scrollbar, 12 px less) only.
# The widths in one test, its orders written once: on a deployment they go through its API, whose
# writes are rate-limited (RATELIMIT_WRITES, 60 a minute by default; a width a test wrote 56).
@pytest.mark.parametrize(
    "widths",
    [
        pytest.param((320, 360, 375, 390, 414), id="phones", marks=GECKO_TOO),
        pytest.param((447,), id="447px", marks=EVERY_ENGINE),
    ],
)
def test_a_cards_time_shows_whole_beside_the_largest_amounts_and_every_card_is_one_height(
    live, page: Page, browser_name, widths
):
    """A card's time read "Dec 7, 202..." beside 999,999,999.99 at 390 px: the time gave way to
    the amount. A card whose amount took a third line instead was 98 px tall among 71 px ones, and
    the skeleton rows and the place kept as rows load assume one card height."""
    given(live, 100)  # pages below, each with its skeleton rows until it loads
    # The widest times, newer than every other order: a two-digit day and hour in each month (the
    # longest month name is the locale's), twice, each beside the largest amount, and December's
    # beside each of the large ones: the first page and 8 cards of the next, which the scroll
    # window loads (their times are written before they go in).
    year = max(BASE, dt.datetime.now(dt.UTC)).year + 1
    largest, *others = reversed(LARGE_AMOUNTS)
    rows = [(dt.datetime(year, m, d, 22, 59, tzinfo=dt.UTC), largest) for m in range(1, 13) for d in (26, 27)]
    rows += [(dt.datetime(year, 12, 27, 22, 58 - n, tzinfo=dt.UTC), a) for n, a in enumerate(others)]
    local = getattr(live, "app", None) is not None
    if not local:  # the API makes each of them now (no time in the future): one of each amount
        rows = rows[-len(LARGE_AMOUNTS) :]
    ids = add_orders_to(live, [(when, "Ana", Decimal(a), "cancelled") for when, a in rows])
    shown = {f"{Decimal(a):,}" for a in LARGE_AMOUNTS}
    # Whole, and with its year: a shorter time that dropped it would read the same every year (a
    # deployment's API makes these orders now, in this year).
    shown_year = str(year) if local else r"\d{4}"

    def cards_are_whole_and_one_height(where: str, count: int) -> None:
        drawn = page.evaluate(CARD_LINES, ids)
        cards = drawn["cards"]
        assert len(cards) == count and {c["amount"] for c in cards} == shown, (where, cards)
        assert all(re.search(shown_year, c["time"]) for c in cards), (where, cards)
        bad = [c for c in cards if c["cut"] or c["clipped"] or c["out"] or c["over"]]
        assert bad == [], f"{where}: times cut, or amounts, beside the largest amounts: {bad}"
        assert not drawn["sideways"], f"{where}: the page scrolls sideways"
        # One card height, a skeleton row's: nothing moves as rows replace the skeleton.
        assert drawn["skeleton"], f"{where}: no skeleton row below"
        off = [h for h in drawn["heights"] if abs(h - drawn["skeleton"]) > 0.5]
        assert off == [], f"{where}: cards not the skeleton row's {drawn['skeleton']} px: {off}"

    held: list[Route] = []  # the next page, while the first is measured beside its skeleton
    # Dark too in Chromium (the same layout, other colours); Firefox here is held light
    # (devtools/firefox_bidi.py) and the WebKit adapter has no media emulation.
    schemes = ("light", "dark") if browser_name == "chromium" else ("light",)
    for width, scheme in ((width, scheme) for width in widths for scheme in schemes):
        page.set_viewport_size({"width": width, "height": 600})
        if browser_name == "chromium":
            page.emulate_media(color_scheme=scheme)
        if browser_name != "webkit":  # the adapter cannot hold a request: the next page is far below
            page.route(NEXT_PAGE, lambda route: held.append(route))
        page.goto(live.url + "/orders")
        expect(page.locator(ROWS).nth(19)).to_be_attached()
        expect(page.locator(f"{ROWS} time[data-localized]").first).to_be_attached()  # all at once
        cards_are_whole_and_one_height(f"{width} px, {scheme}, the first page", 20 if local else len(ids))
        if browser_name != "webkit":
            page.unroute(NEXT_PAGE)
            while held:
                held.pop().continue_()
        page.mouse.wheel(0, 1500)
        for order_id in ids:
            expect(page.locator(f"#order-{order_id} time[data-localized]")).to_be_attached()
        cards_are_whole_and_one_height(f"{width} px, {scheme}, a page loaded", len(ids))
