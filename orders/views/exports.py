"""The CSV download: the whole (filtered) list, streamed in keyset batches."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Iterator
from urllib.parse import quote

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

    response = Response(
        stream(), mimetype="text/csv", headers={"Content-Disposition": content_disposition(listing)}
    )
    # HEAD, or a client gone before the body starts, never runs stream(): the WSGI server's
    # close() still closes the session (export_chunks already ended its transaction).
    response.call_on_close(session.close)
    return response


# What a download's name keeps of the words searched: letters and digits (Unicode's), each run of
# anything else one "-"; so no quote, backslash, separator, path, control or bidi character
# reaches the header or the file system. At most SEARCH_IN_NAME characters of them.
_NOT_WORD = re.compile(r"[\W_]+")
SEARCH_IN_NAME = 40


def content_disposition(listing: ListRequest) -> str:
    """The download's name says which list it holds: orders-SORT[-STATUS].csv for the whole list,
    orders-SORT[-STATUS]-search-WORDS.csv for a search, so a search's CSV is never saved under
    the whole list's name. A name that is not ASCII goes as filename* (RFC 6266, RFC 5987: UTF-8,
    percent-encoded) after an ASCII filename for clients that know no other (its letters without
    their accents; "search" alone where none is Latin), as werkzeug's send_file names a file."""
    parts = ["orders", listing.sort_name, listing.status or ""]
    if listing.search is not None:
        parts += ["search", _words(listing.search.text)[:SEARCH_IN_NAME]]
    name = _file_name(parts)
    plain = _file_name(
        unicodedata.normalize("NFKD", part).encode("ascii", "ignore").decode() for part in parts
    )
    if plain == name:
        return f'attachment; filename="{name}"'
    # Only letters, digits, "-" and "." are in a name: quote() leaves the ASCII ones as they are.
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


def _words(text: str) -> str:
    return _NOT_WORD.sub("-", text).strip("-")


def _file_name(parts: Iterable[str]) -> str:
    return "-".join(words for part in parts if (words := _words(part))) + ".csv"
