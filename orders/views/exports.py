"""The CSV download: the whole (filtered) list, streamed in keyset batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from flask import Blueprint, Response, current_app, request

from orders.exports.stream import FIRST_BATCH_SIZE, close_after_stream, csv_chunks, export_chunks
from orders.finding.params import InvalidParameter, parse_int
from orders.finding.request import ListRequest
from orders.web import htmx, metrics
from orders.web.routes import streaming_read

bp = Blueprint("exports", __name__)
bp.after_request(htmx.vary)


@bp.get("/orders/export.csv")
@streaming_read
def export_csv(listing: ListRequest) -> Response:
    """The whole (filtered) list as CSV, streamed in keyset batches in constant memory."""
    if listing.backward:
        raise InvalidParameter("an export reads forward: give after, not before")
    bom = parse_int(request.args, "bom", 0, 0, 1) == 1  # the page's link asks for it (csv_header)
    # The stream outlives the request (and its teardown), so it owns a session of its own.
    session = current_app.extensions["sessionmaker"]()
    try:
        chunks = export_chunks(session, listing, first_batch_size=FIRST_BATCH_SIZE)
        # Read the first batch now, so a bad cursor or a dead database is an error status,
        # not a broken download.
        first = next(chunks, None)
    except Exception:
        session.close()
        raise

    def stream() -> Iterator[bytes]:
        try:
            batches = metrics.counted_rows(itertools.chain([first] if first else [], chunks))
            yield from csv_chunks(batches, after=listing.cursor, bom=bom)
        finally:
            close_after_stream(session)

    filename = f"orders-{listing.sort_name}{'-' + listing.status if listing.status else ''}.csv"
    response = Response(
        stream(),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
    # HEAD, or a client gone before the body starts, never runs stream(): the WSGI server's
    # close() still closes the session (export_chunks already ended its transaction).
    response.call_on_close(session.close)
    return response
