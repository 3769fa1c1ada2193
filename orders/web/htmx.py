"""What kind of answer an htmx (or plain) request wants: one function, used by views and errors.

htmx (4) sends `HX-Request: true` on everything it asks for, including requests that must get a
whole page: a boosted navigation (`HX-Boosted`), one that selects its part from the whole page
(`HX-Request-Type: full`: the list opened in place by Top, End, go to and the new-orders pill)
and a history restore (`HX-History-Restore-Request`; htmx 4 sends it alone, htmx 2 with
`HX-Request`). Answering any of them with a bare rows fragment replaces the page body (or the
list) with a few table rows, so the classification lives here once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from flask import Response, request

# Every request header that changes the answer of a page that has a fragment form: a shared cache
# must keep the full page and the fragment of one URL apart.
VARY = ("HX-Request", "HX-Boosted", "HX-Request-Type", "HX-History-Restore-Request")
# The Vary header werkzeug writes for them alone (HeaderSet.to_header: the names, ", " between).
VARY_HEADER = ", ".join(VARY)


class Kind(enum.Enum):
    PAGE = "page"  # a plain browser request (or htmx disabled): the whole page
    FRAGMENT = "fragment"  # htmx asks for a piece to swap in: rows, a banner, an error row
    BOOSTED = "boosted"  # a boosted link or form: htmx swaps the whole body
    FULL = "full"  # htmx selects its part from the whole page (HX-Request-Type: full)
    HISTORY_RESTORE = "history-restore"  # Back/Forward without a snapshot: the whole page


def classify(headers: Mapping[str, str] | None = None) -> Kind:
    if headers is None:
        headers = request.headers  # type: ignore[assignment]  # werkzeug's Headers reads like a Mapping
    assert headers is not None
    if headers.get("HX-History-Restore-Request") == "true":
        return Kind.HISTORY_RESTORE
    if headers.get("HX-Request") != "true":
        return Kind.PAGE
    if headers.get("HX-Boosted") == "true":
        return Kind.BOOSTED
    if headers.get("HX-Request-Type") == "full":
        return Kind.FULL
    return Kind.FRAGMENT


def wants_fragment(headers: Mapping[str, str] | None = None) -> bool:
    return classify(headers) is Kind.FRAGMENT


def vary(response: Response) -> Response:
    """An after_request hook for the HTML routes: their answers (a page, a fragment, an error row
    or an error page) differ by the htmx headers, and a shared cache must keep them apart."""
    if "Vary" not in response.headers:
        # The usual case, one header set: werkzeug's .vary parses a header set and writes it back.
        response.headers["Vary"] = VARY_HEADER
        return response
    response.vary.update(VARY)  # one update: each .vary.add() parsed and rewrote the header again
    return response
