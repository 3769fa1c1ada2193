"""The HTML list: full pages from a cursor (works without JavaScript), its htmx fragments, "Go to"
and the new-orders banner."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlencode

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from orders.data.db import get_session
from orders.finding.estimates import estimate, rounded
from orders.finding.listing import ListRequest
from orders.finding.params import InvalidParameter, parse_int
from orders.finding.sorts import NEWEST
from orders.web import htmx
from orders.web.routes import list_read
from pagination import Page

bp = Blueprint("list_page", __name__)


NEW_ORDERS_CAP = 99


bp.after_request(htmx.vary)


@bp.get("/")
def index() -> ResponseReturnValue:
    return redirect(url_for("list_page.orders"))


# What werkzeug leaves unquoted in a query (werkzeug.urls._urlencode, the WHATWG's set).
_QUERY_SAFE = "!$'()*,/:;?@"


def list_link(list_url: str, args: Mapping[str, object]) -> str:
    """`url_for("list_page.orders", **args)` from that route's URL built once per request: the
    same string (tests/test_pages.py compares them), without a URL build per link (a page makes
    four to six, and werkzeug's build with its query encoding was a tenth of the fragment)."""
    if not args:
        return list_url
    return f"{list_url}?{urlencode([(k, v) for k, v in args.items() if v is not None], safe=_QUERY_SAFE)}"


def _page_urls(listing: ListRequest, page: Page, page_number: int, list_url: str) -> dict[str, str | None]:
    """The URLs the rows of a page carry, so the browser can come back to any page edge.

    `pos` opens the list at the page's first row (the address bar keeps it while the reader is
    on that page; the top of the list is plain /orders). `before`/`after` load the rows next to
    the page's edges again after static/js/scroll-window.js dropped them to keep the document small.
    """

    def link(**changes: object) -> str:
        return list_link(list_url, listing.query_args(**changes))

    # A page that had no successor when drawn needs no way to reload one: nothing follows it.
    after = page.next_cursor and link(after=page.next_cursor, page=page_number + 1)
    if not page.items:
        # A page of a several-word search may end its bounded window empty, with rows past it
        # (orders/finding/listing.py windowed_page): its edges still lead on.
        return {"pos": None, "before": page.prev_cursor and link(before=page.prev_cursor), "after": after}
    return {
        "pos": link(after=listing.cursor_at(page.items[0])) if page.prev_cursor else link(),
        "before": link(before=page.head_cursor),
        "after": after,
    }


def _jump(listing: ListRequest) -> ResponseReturnValue:
    """ "Go to": a redirect to the position URL of the first row at or past the value typed, or
    a 400 that says nothing is there (and the list stays where it was).

    A redirect, so the address is the same kind of position URL as any other: reload, Back and
    sharing behave alike, and the value typed is not re-applied by a reload.
    """
    cursor = listing.start(get_session())
    return redirect(url_for("list_page.orders", **listing.query_args(after=cursor)), 303)


@bp.get("/orders")
@list_read
def orders(listing: ListRequest) -> ResponseReturnValue:
    cfg = current_app.config
    if listing.goto is not None:
        return _jump(listing)
    search = listing.search
    missing_order = None
    # `page` numbers the pages of this walk downwards: it decides when the automatic loads stop
    # and a "Load more" button takes over, so the footer can be reached.
    page_number = parse_int(request.args, "page", 1, 1, 1_000_000)
    page = listing.page(get_session())
    at_top = listing.position is None
    if search is not None and search.order_id is not None and at_top:
        # An order number in the search box opens that order if the list holds it (its status
        # filter too: the API and the export read the same list), or says it is not there.
        if page.items:
            return redirect(url_for("order_page.order_detail", order_id=search.order_id), 303)
        missing_order = search.order_id
    auto_pages = cfg["AUTO_PAGES"]
    fragment = htmx.wants_fragment()
    list_url = url_for("list_page.orders")
    urls = _page_urls(listing, page, page_number, list_url)
    show_top = not fragment or listing.backward
    context = {
        "listing": listing,
        "page": page,
        "page_number": page_number,
        "urls": urls,
        # A `before` fragment goes above the rows (its own top sentinel, no bottom control); an
        # `after` fragment goes below them; a full page has both ends.
        "show_top": show_top,
        "show_bottom": not fragment or not listing.backward,
        # One url_for per page, not one per row (Werkzeug's URL building was a tenth of a page):
        # a row's link is this prefix and its id.
        "order_url_prefix": url_for("order_page.order_detail", order_id=0).removesuffix("0"),
        # After AUTO_PAGES automatic loads, ask for a click so the footer can be reached.
        "auto_load": (page_number - 1) % (auto_pages + 1) != auto_pages,
        "list_url": list_url,
        # The same URL as the page's `after` edge (no rows, no next cursor): built once.
        "next_url": urls["after"],
        "next_args": page.next_cursor and listing.query_args(after=page.next_cursor, page=page_number + 1),
        # Only what comes above the rows uses it: a full page or a `before` fragment.
        "prev_url": show_top
        and page.prev_cursor
        and list_link(list_url, listing.query_args(before=page.prev_cursor)),
    }
    if fragment:
        # _rows.html alone: the find bar's links (Top, End with its own sealed cursor), the
        # new-orders banner and the estimates belong to the full page only.
        return render_template("_rows.html", **context)
    context.update(
        {
            # The banner counts rows above the top of the list, so only a list opened at its top polls.
            "new_orders_url": page.head_cursor
            and listing.sort == NEWEST
            and not page.prev_cursor
            and url_for("list_page.new_orders", **listing.query_args(before=page.head_cursor)),
            "max_rows": cfg["MAX_ROWS_IN_PAGE"],
            # Top: the list's first rows; End: its last rows (a `before` cursor past the end).
            "top_url": list_link(list_url, listing.query_args()),
            "end_url": list_link(list_url, listing.query_args(before=listing.end_cursor())),
            "missing_order": missing_order,
            # About how many orders (planner statistics, never COUNT(*)): for a search, no estimate.
            "estimates": None if search else estimate(get_session()),
            "rounded": rounded,
        }
    )
    return render_template("orders.html", **context), 404 if missing_order else 200


@bp.get("/orders/new")
@list_read
def new_orders(listing: ListRequest) -> ResponseReturnValue:
    """How many orders arrived above the first row shown (capped): the "N new orders" banner."""
    if listing.position is not None and not listing.backward:
        raise InvalidParameter("new orders are counted above a position: give before, not after")
    if listing.goto is not None:
        raise InvalidParameter("new orders are counted above a position: give before, not to")
    page = replace(listing, limit=NEW_ORDERS_CAP).page(get_session())
    count = len(page.items) if listing.position is not None else 0
    return render_template(
        "_new_orders.html",
        count=count,
        capped=page.has_previous,
        top_url=url_for("list_page.orders", **listing.query_args()),
    )
