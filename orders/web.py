"""The HTML list: full pages from a cursor (works without JavaScript) and htmx fragments."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator
from decimal import Decimal

from flask import (
    Blueprint,
    Response,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from markupsafe import Markup

from pagination import paginate

from .api import get_order_or_404
from .db import get_session
from .export import csv_chunks, export_batches
from .listing import InvalidParameter, ListRequest, parse_int
from .serialize import iso_utc

bp = Blueprint("web", __name__)


@bp.app_template_filter("money")
def money(amount: Decimal) -> str:
    return f"{amount:,.2f}"


@bp.app_template_filter("timestamp")
def timestamp(value: dt.datetime) -> Markup:
    """A <time> in UTC; app.js shows it in the reader's own timezone."""
    # Both parts are made from the datetime alone (digits, "-", ":", "T", "Z"), so nothing in them
    # needs escaping: an f-string is a tenth of the cost of Markup.format, twenty times a page.
    utc = value.astimezone(dt.UTC)
    return Markup(f'<time datetime="{iso_utc(utc)}">{utc:%Y-%m-%d %H:%M} UTC</time>')


NEW_ORDERS_CAP = 99


def is_htmx() -> bool:
    """True for requests htmx makes for a fragment (not for boosted full-page navigations)."""
    return request.headers.get("HX-Request") == "true" and request.headers.get("HX-Boosted") != "true"


@bp.get("/")
def index():  # type: ignore[no-untyped-def]
    return redirect(url_for("web.orders"))


@bp.get("/orders")
def orders():  # type: ignore[no-untyped-def]
    cfg = current_app.config
    listing = ListRequest.from_args(request.args, default_limit=cfg["PAGE_SIZE"])
    # `page` numbers the pages of this walk: it gives rows their aria-rowindex and decides
    # when the automatic loads stop and a "Load more" button takes over.
    page_number = parse_int(request.args, "page", 1, 1, 1_000_000)
    page = listing.page(get_session(), current_app.extensions["cursor_codec"])
    auto_pages = cfg["AUTO_PAGES"]
    context = {
        "listing": listing,
        "page": page,
        "page_number": page_number,
        "first_row_index": (page_number - 1) * listing.limit + 2,  # row 1 is the header
        # One url_for per page, not one per row (Werkzeug's URL building was a tenth of a page):
        # a row's link is this prefix and its id.
        "order_url_prefix": url_for("web.order_detail", order_id=0).removesuffix("0"),
        # After AUTO_PAGES automatic loads, ask for a click so the footer can be reached.
        "auto_load": (page_number - 1) % (auto_pages + 1) != auto_pages,
        "next_url": page.next_cursor
        and url_for("web.orders", **listing.query_args(after=page.next_cursor, page=page_number + 1)),
        "prev_url": page.prev_cursor
        and url_for(
            "web.orders", **listing.query_args(before=page.prev_cursor, page=max(page_number - 1, 1))
        ),
        "new_orders_url": page.head_cursor
        and listing.sort == "newest"
        and listing.before is None
        and url_for("web.new_orders", **listing.query_args(before=page.head_cursor)),
    }
    if is_htmx():
        response = Response(render_template("_rows.html", **context))
    else:
        response = Response(render_template("orders.html", **context))
    response.headers["Vary"] = "HX-Request"
    return response


@bp.get("/orders/new")
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


@bp.get("/orders/<int:order_id>")
def order_detail(order_id: int):  # type: ignore[no-untyped-def]
    return render_template("order.html", order=get_order_or_404(order_id))


@bp.get("/orders/export.csv")
def export_csv():  # type: ignore[no-untyped-def]
    """The whole (filtered) list as CSV, streamed in keyset batches in constant memory."""
    listing = ListRequest.from_args(request.args, default_limit=20)
    if listing.before is not None:
        raise InvalidParameter("an export reads forward: give after, not before")
    # The stream outlives the request (and its teardown), so it owns a session of its own.
    session = current_app.extensions["sessionmaker"]()
    try:
        batches = export_batches(session, listing, current_app.extensions["cursor_codec"])
        # Read the first batch now, so a bad cursor or a dead database is an error status,
        # not a broken download.
        first = next(batches, None)
    except Exception:
        session.close()
        raise

    def stream() -> Iterator[str]:
        try:
            yield from csv_chunks(itertools.chain([first] if first else [], batches))
        finally:
            session.close()

    filename = f"orders-{listing.sort}{'-' + listing.status if listing.status else ''}.csv"
    response = Response(
        stream(),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
    # HEAD, or a client gone before the body starts, never runs stream(): the WSGI server's
    # close() still closes the session (export_batches already ended its transaction).
    response.call_on_close(session.close)
    return response
