"""One order's page, or the page that says it is gone, each with a way back to the reader's place."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from flask import Blueprint, render_template, request, url_for
from flask.typing import ResponseReturnValue

from orders.core.errors import ApiError
from orders.finding.order import order_or_404
from orders.web import htmx

bp = Blueprint("order_page", __name__)
bp.after_request(htmx.vary)

# The headers the "Back to the list" link is made from: order pages vary with them (Vary).
BACK_HEADERS = ("HX-Current-URL", "Referer")


def _back_to_list() -> str:
    """Where "Back to the list" goes: the list page the reader came from, at the same place.

    htmx sends the address bar (which static/js/scroll-window.js keeps at the reader's position)
    as HX-Current-URL; without JavaScript the Referer is the list page that was shown. Only a
    path of this site's list is taken from either, never a host, so the link cannot lead
    elsewhere.
    """
    list_path = url_for("list_page.orders")
    for header in BACK_HEADERS:
        parts = urlsplit(request.headers.get(header, ""))
        if parts.path == list_path and parts.netloc in ("", request.host):
            return urlunsplit(("", "", parts.path, parts.query, parts.fragment))
    return list_path


@bp.get("/orders/<int:order_id>")
def order_detail(order_id: int) -> ResponseReturnValue:
    try:
        order = order_or_404(order_id)
    except ApiError as err:
        if err.status != 404:
            raise
        # Orders are deleted while people read the list: say so, and lead back to where they were.
        page = render_template("order_gone.html", order_id=order_id, back_url=_back_to_list())
        return page, 404, {"Vary": ", ".join(BACK_HEADERS)}
    return render_template("order.html", order=order, back_url=_back_to_list()), {
        "Vary": ", ".join(BACK_HEADERS)
    }
