"""The HTML list: full pages from a cursor (works without JavaScript), its htmx fragments, "Go to"
and the new-orders banner."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from urllib.parse import urlencode

from flask import Blueprint, current_app, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from orders.data.db import get_session
from orders.finding import reader
from orders.finding.estimates import estimate, number_digits, rounded
from orders.finding.params import InvalidParameter, parse_int
from orders.finding.request import ListRequest, PageLinks, RefusedField
from orders.web import htmx
from orders.web.read_routing import ReadPolicy
from orders.web.routes import list_read

bp = Blueprint("list_page", __name__)


NEW_ORDERS_CAP = 99


bp.after_request(htmx.vary)


@bp.get("/")
def index() -> ResponseReturnValue:
    return redirect(url_for("list_page.orders"))


# What werkzeug leaves unquoted in a query (werkzeug.urls._urlencode, the WHATWG's set).
_QUERY_SAFE = "!$'()*,/:;?@"
# A text that quoting leaves as it is: the unreserved characters and the safe set above. Cursors
# (URL-safe base64), sort and status names and page numbers are all such text.
_AS_IS = re.compile(r"[A-Za-z0-9_.~!$'()*,/:;?@-]*")


def list_link(list_url: str, args: Mapping[str, object]) -> str:
    """`url_for("list_page.orders", **args)` from that route's URL built once per request: the
    same string (tests/test_pages.py compares them), without a URL build per link (a page makes
    four to six, and werkzeug's build with its query encoding was a tenth of the fragment).
    Arguments that quoting would leave as they are are joined as they are (urlencode quotes
    each part through three calls: 8 of a link's 10 us)."""
    parts = []
    for name, value in args.items():
        if value is None:
            continue
        text = value if type(value) is str else str(value)
        if not (_AS_IS.fullmatch(text) and _AS_IS.fullmatch(name)):
            pairs = [(k, v) for k, v in args.items() if v is not None]
            return f"{list_url}?{urlencode(pairs, safe=_QUERY_SAFE)}"
        parts.append(f"{name}={text}")
    return f"{list_url}?{'&'.join(parts)}" if parts else list_url


def _urls(links: PageLinks, list_url: str) -> dict[str, str | None]:
    """The URLs of a page's links (PageLinks: which exist and their arguments, asked once)."""
    return {
        name: None if args is None else list_link(list_url, args)
        for name, args in vars(links).items()
        if name != "new_orders"
    }


def _goto(listing: ListRequest) -> ResponseReturnValue:
    """ "Go to": a redirect to the position URL of the first row at or past the value typed, or
    a 400 that says nothing is there (and the list stays where it was).

    A redirect, so the address is the same kind of position URL as any other: reload, Back and
    sharing behave alike, and the value typed is not re-applied by a reload.
    """
    position = reader.start(listing, get_session())
    # Sealed here, once, for the address: the library read the position itself.
    cursor = None if position is None else listing.codec.encode(position)
    return redirect(url_for("list_page.orders", **listing.query_args(after=cursor)), 303)


@bp.get("/orders")
@list_read
def orders(listing: ListRequest) -> ResponseReturnValue:
    if listing.goto is not None:
        return _goto(listing)
    return _page(listing)


@bp.errorhandler(RefusedField)
def refused_field(refused: RefusedField) -> ResponseReturnValue:
    """A search the box cannot run (RefusedSearch: 11 words, no letters), or a go-to the list
    cannot read (RefusedGoto: `2026-02-30`): the list page, not an error page in its place. The list is the
    same list without the search or the go-to, from its top, read as any list page is (the app's
    read policy, orders/web/read_routing.py); the field keeps the text, marked invalid, with its
    message. A 400, as the missing order's page is a 404: the search was not run, and a
    client or a check that reads the status learns so, while a browser shows the page all the same.

    Only a page: a fragment asks for rows to put in a list, and `HX-Request-Type: full`
    (static/js/scroll-window.js open()) for a list to put in place of the one shown: both get the
    error answer every bad parameter gets, which neither swaps into the list; so does /orders/new.
    The API and the export are other blueprints: their 400s are as they were (orders/web/errors.py)."""
    part_of_a_list = htmx.classify() in (htmx.Kind.FRAGMENT, htmx.Kind.FULL)
    if request.endpoint != "list_page.orders" or part_of_a_list:
        # A go-to refused is told in the find bar (static/js/controls.js reads the message of the
        # error answer open() got): the reader's sentence, as the page without JavaScript shows it.
        told = f"Go to {refused.reason}." if refused.field == "to" and part_of_a_list else str(refused)
        return current_app.handle_user_exception(InvalidParameter(told))
    policy: ReadPolicy = current_app.extensions["read_policy"]
    try:
        page: ResponseReturnValue = policy.run(partial(_page, refused=refused), "page", refused.listing)
    except Exception as err:
        # Raised in an error handler, it would be a bare 500: the app's handlers answer it (a
        # database not answering is a 503 with Retry-After here too).
        return current_app.handle_user_exception(err)
    return page


def _page(listing: ListRequest, refused: RefusedField | None = None) -> ResponseReturnValue:
    """The list page, or its rows alone for a fragment request; `refused`: shown in place of a
    search or a go-to the list page could not run (refused_field)."""
    cfg = current_app.config
    search = listing.search
    missing_order = None
    # `page` numbers the pages of this walk downwards: it decides when the automatic loads stop
    # and a "Load more" button takes over, so the footer can be reached.
    page_number = parse_int(request.args, "page", 1, 1, 1_000_000)
    page = reader.page(listing, get_session())
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
    links = listing.links(page, page_number, full=not fragment)
    urls = _urls(links, list_url)
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
        # One url_for per page, not one per row (Werkzeug builds each URL through the rule's
        # converters, the same work for every row): a row's link is this prefix and its id.
        "order_url_prefix": url_for("order_page.order_detail", order_id=0).removesuffix("0"),
        # After AUTO_PAGES automatic loads, ask for a click so the footer can be reached.
        "auto_load": (page_number - 1) % (auto_pages + 1) != auto_pages,
        "list_url": list_url,
        # The same URL as the page's `after` edge (no rows, no next cursor): built once.
        "next_url": urls["after"],
        "next_args": links.after,
        # Only what comes above the rows uses it: a full page or a `before` fragment.
        "prev_url": show_top and urls["prev"],
    }
    if fragment:
        # _rows.html alone: the find bar's links (Top, End with its own sealed cursor), the
        # new-orders banner and the estimates belong to the full page only.
        return render_template("_rows.html", **context)
    context.update(
        {
            "new_orders_url": links.new_orders and url_for("list_page.new_orders", **links.new_orders),
            "max_rows": cfg["MAX_ROWS_IN_PAGE"],
            # Top: the list's first rows; End: its last rows (a `before` cursor past the end).
            "top_url": urls["top"],
            "end_url": urls["end"],
            "missing_order": missing_order,
            "refused": refused,
            # About how many orders (planner statistics, never COUNT(*)): for a search, no estimate.
            "estimates": None if search else estimate(get_session()),
            "number_digits": number_digits(get_session()),
            "rounded": rounded,
        }
    )
    status = 400 if refused is not None else 404 if missing_order is not None else 200
    return render_template("orders.html", **context), status


@bp.get("/orders/new")
@list_read
def new_orders(listing: ListRequest) -> ResponseReturnValue:
    """How many orders arrived above the first row shown (capped): the "N new orders" banner."""
    if listing.position is not None and not listing.backward:
        raise InvalidParameter("new orders are counted above a position: give before, not after")
    if listing.goto is not None:
        raise InvalidParameter("new orders are counted above a position: give before, not to")
    page = reader.page(replace(listing, limit=NEW_ORDERS_CAP), get_session())
    count = len(page.items) if listing.position is not None else 0
    return render_template(
        "_new_orders.html",
        count=count,
        capped=page.has_previous,
        top_url=url_for("list_page.orders", **listing.query_args()),
    )
