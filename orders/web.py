"""The HTML list: full pages from a cursor (works without JavaScript) and htmx fragments."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from decimal import Decimal
from urllib.parse import urlsplit, urlunsplit

from flask import (
    Blueprint,
    Response,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.blueprints import BlueprintSetupState
from markupsafe import Markup

from pagination import Page, paginate, start_at

from . import htmx, jump
from .api import get_order_or_404
from .db import get_session
from .errors import ApiError
from .estimates import estimate, rounded
from .export import csv_chunks, export_chunks
from .listing import InvalidParameter, ListRequest, parse_int
from .models import STATUSES, Order
from .routes import list_read, streaming_read
from .serialize import iso_utc
from .sorts import SORTS

bp = Blueprint("web", __name__)


@bp.record_once
def _template_globals(state: BlueprintSetupState) -> None:
    # The Sort and Status controls list what the registries hold (set once, not per render).
    state.app.jinja_env.globals.update(sorts=list(SORTS.values()), statuses=STATUSES)


@bp.app_template_filter("money")
def money(amount: Decimal) -> str:
    return f"{amount:,.2f}"


@bp.app_template_filter("timestamp")
def timestamp(value: dt.datetime) -> Markup:
    """A <time> in UTC; app.js shows it in the reader's own timezone."""
    # Both parts are made from the datetime alone (digits, "-", ":", "T", "Z"), so nothing in them
    # needs escaping: an f-string is a tenth of the cost of Markup.format, twenty times a page.
    # The shown part is cut from the ISO text (strftime was a fifth of a row's rendering); below
    # year 1000 ISO pads the year and strftime does not, so those keep strftime.
    utc = value if value.tzinfo is dt.UTC else value.astimezone(dt.UTC)
    iso = iso_utc(utc)
    shown = f"{iso[:10]} {iso[11:16]}" if utc.year >= 1000 else f"{utc:%Y-%m-%d %H:%M}"
    return Markup(f'<time datetime="{iso}">{shown} UTC</time>')


NEW_ORDERS_CAP = 99


@bp.after_request
def _vary(response: Response) -> Response:
    # Error answers of these routes (an error row or an error page) differ by the same headers.
    for header in htmx.VARY:
        response.vary.add(header)
    return response


@bp.get("/")
def index():  # type: ignore[no-untyped-def]
    return redirect(url_for("web.orders"))


def _position(listing: ListRequest, row: object) -> str:
    """An inclusive `after` cursor at `row`'s whole key: the list opened there starts with it."""
    keys = [getattr(row, str(column.expr.key)) for column in listing.keyset.columns]
    return start_at(
        listing.keyset,
        keys,
        codec=current_app.extensions["cursor_codec"],
        filters=listing.filters,
        # Read where this page was read (the WAL position, when reads go to replicas).
        meta=get_session().info.get("cursor_meta"),
    )


def _page_urls(listing: ListRequest, page: Page, page_number: int) -> dict[str, str | None]:
    """The URLs the rows of a page carry, so the browser can come back to any page edge.

    `pos` opens the list at the page's first row (the address bar keeps it while the reader is
    on that page; the top of the list is plain /orders). `before`/`after` load the rows next to
    the page's edges again after app.js dropped them to keep the document small.
    """
    if not page.items:
        return {"pos": None, "before": None, "after": None}

    def link(**changes: object) -> str:
        return url_for("web.orders", **listing.query_args(**changes))

    # A page that had no successor when drawn needs no way to reload one: nothing follows it.
    after = page.next_cursor and link(after=page.next_cursor, page=page_number + 1)
    return {
        "pos": link(after=_position(listing, page.items[0])) if page.prev_cursor else link(),
        "before": link(before=page.head_cursor),
        "after": after,
    }


def _jump(listing: ListRequest, to: str):  # type: ignore[no-untyped-def]
    """ "Go to": a redirect to the position URL of the first row at or past the value typed.

    A redirect, so the address is the same kind of position URL as any other: reload, Back and
    sharing behave alike, and the value typed is not re-applied by a reload.
    """
    if listing.after is not None or listing.before is not None:
        raise InvalidParameter("give either to or a cursor (after/before), not both")
    cursor = start_at(
        listing.keyset,
        [jump.value_for(listing.sort, to, jump.single(request.args, "tz"))],
        codec=current_app.extensions["cursor_codec"],
        filters=listing.filters,
    )
    return redirect(url_for("web.orders", **listing.query_args(after=cursor)), 303)


@bp.get("/orders")
@list_read
def orders():  # type: ignore[no-untyped-def]
    cfg = current_app.config
    listing = ListRequest.from_args(request.args, default_limit=cfg["PAGE_SIZE"])
    to = jump.single(request.args, "to")
    if to is not None:
        return _jump(listing, to)
    search = listing.search
    missing_order = None
    at_top = listing.after is None and listing.before is None
    if search is not None and search.order_id is not None and at_top:
        # An order number in the search box opens that order, or says on the list that it is not there.
        if get_session().get(Order, search.order_id) is not None:
            return redirect(url_for("web.order_detail", order_id=search.order_id), 303)
        missing_order = search.order_id
    # `page` numbers the pages of this walk downwards: it decides when the automatic loads stop
    # and a "Load more" button takes over, so the footer can be reached.
    page_number = parse_int(request.args, "page", 1, 1, 1_000_000)
    codec = current_app.extensions["cursor_codec"]
    page = listing.page(get_session(), codec)
    auto_pages = cfg["AUTO_PAGES"]
    fragment = htmx.wants_fragment()
    urls = _page_urls(listing, page, page_number)
    show_top = not fragment or listing.before is not None
    context = {
        "listing": listing,
        "page": page,
        "page_number": page_number,
        "urls": urls,
        # A `before` fragment goes above the rows (its own top sentinel, no bottom control); an
        # `after` fragment goes below them; a full page has both ends.
        "show_top": show_top,
        "show_bottom": not fragment or listing.before is None,
        # One url_for per page, not one per row (Werkzeug's URL building was a tenth of a page):
        # a row's link is this prefix and its id.
        "order_url_prefix": url_for("web.order_detail", order_id=0).removesuffix("0"),
        # After AUTO_PAGES automatic loads, ask for a click so the footer can be reached.
        "auto_load": (page_number - 1) % (auto_pages + 1) != auto_pages,
        "list_url": url_for("web.orders"),
        # The same URL as the page's `after` edge (no rows, no next cursor): built once.
        "next_url": urls["after"],
        "next_args": page.next_cursor and listing.query_args(after=page.next_cursor, page=page_number + 1),
        # Only what comes above the rows uses it: a full page or a `before` fragment.
        "prev_url": show_top
        and page.prev_cursor
        and url_for("web.orders", **listing.query_args(before=page.prev_cursor)),
    }
    if fragment:
        # _rows.html alone: the find bar's links (Top, End with its own sealed cursor), the
        # new-orders banner and the estimates belong to the full page only.
        return render_template("_rows.html", **context)
    context.update(
        {
            # The banner counts rows above the top of the list, so only a list opened at its top polls.
            "new_orders_url": page.head_cursor
            and listing.sort == "newest"
            and not page.prev_cursor
            and url_for("web.new_orders", **listing.query_args(before=page.head_cursor)),
            "max_rows": cfg["MAX_ROWS_IN_PAGE"],
            "jump_label": listing.sort_spec.goto_label,
            # Top: the list's first rows; End: its last rows (a `before` cursor past the end).
            "top_url": url_for("web.orders", **listing.query_args()),
            "end_url": url_for("web.orders", **listing.query_args(before=jump.end_cursor(listing, codec))),
            "missing_order": missing_order,
            # About how many orders (planner statistics, never COUNT(*)): for a search, no estimate.
            "estimates": None if search else estimate(get_session()),
            "rounded": rounded,
        }
    )
    return render_template("orders.html", **context), 404 if missing_order else 200


@bp.get("/orders/new")
@list_read
def new_orders():  # type: ignore[no-untyped-def]
    """How many orders arrived above the first row shown (capped): the "N new orders" banner."""
    listing = ListRequest.from_args(request.args, default_limit=NEW_ORDERS_CAP)
    if listing.after is not None:
        raise InvalidParameter("new orders are counted above a position: give before, not after")
    page = paginate(
        get_session(),
        listing.statement(),
        listing.keyset,
        limit=NEW_ORDERS_CAP,
        codec=current_app.extensions["cursor_codec"],
        before=listing.before,
        filters=listing.filters,
    )
    count = len(page.items) if listing.before else 0
    return render_template(
        "_new_orders.html",
        count=count,
        capped=page.has_previous,
        top_url=url_for("web.orders", **listing.query_args()),
    )


# The headers the "Back to the list" link is made from: order pages vary with them (Vary).
BACK_HEADERS = ("HX-Current-URL", "Referer")


def _back_to_list() -> str:
    """Where "Back to the list" goes: the list page the reader came from, at the same place.

    htmx sends the address bar (which app.js keeps at the reader's position) as HX-Current-URL;
    without JavaScript the Referer is the list page that was shown. Only a path of this site's
    list is taken from either, never a host, so the link cannot lead elsewhere.
    """
    list_path = url_for("web.orders")
    for header in BACK_HEADERS:
        parts = urlsplit(request.headers.get(header, ""))
        if parts.path == list_path and parts.netloc in ("", request.host):
            return urlunsplit(("", "", parts.path, parts.query, parts.fragment))
    return list_path


@bp.get("/orders/<int:order_id>")
def order_detail(order_id: int):  # type: ignore[no-untyped-def]
    try:
        order = get_order_or_404(order_id)
    except ApiError as err:
        if err.status != 404:
            raise
        # Orders are deleted while people read the list: say so, and lead back to where they were.
        page = render_template("order_gone.html", order_id=order_id, back_url=_back_to_list())
        return page, 404, {"Vary": ", ".join(BACK_HEADERS)}
    return render_template("order.html", order=order, back_url=_back_to_list()), {
        "Vary": ", ".join(BACK_HEADERS)
    }


@bp.get("/orders/export.csv")
@streaming_read
def export_csv():  # type: ignore[no-untyped-def]
    """The whole (filtered) list as CSV, streamed in keyset batches in constant memory."""
    listing = ListRequest.from_args(request.args, default_limit=20)
    if listing.before is not None:
        raise InvalidParameter("an export reads forward: give after, not before")
    # The stream outlives the request (and its teardown), so it owns a session of its own.
    session = current_app.extensions["sessionmaker"]()
    try:
        chunks = export_chunks(session, listing, current_app.extensions["cursor_codec"])
        # Read the first batch now, so a bad cursor or a dead database is an error status,
        # not a broken download.
        first = next(chunks, None)
    except Exception:
        session.close()
        raise

    def stream() -> Iterator[bytes]:
        try:
            yield from csv_chunks(itertools.chain([first] if first else [], chunks), after=listing.after)
        finally:
            session.close()

    filename = f"orders-{listing.sort}{'-' + listing.status if listing.status else ''}.csv"
    response = Response(
        stream(),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
    # HEAD, or a client gone before the body starts, never runs stream(): the WSGI server's
    # close() still closes the session (export_chunks already ended its transaction).
    response.call_on_close(session.close)
    return response
