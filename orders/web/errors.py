"""The error handlers: every exception a request can end in becomes one code of ERRORS,
answered as JSON under /api (and /healthz, /openapi.json), an error row to htmx, a page elsewhere."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote_to_bytes

from flask import Flask, Response, jsonify, render_template, request, url_for
from flask.globals import request_ctx
from flask.typing import ResponseReturnValue
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException, NotFound, SecurityError

from orders.core.errors import ERRORS, RETRY_AFTER_SECONDS, ApiError, retryable, too_large
from orders.finding.params import InvalidParameter
from orders.web import htmx
from pagination import CursorMismatch, InvalidCursor, PaginationError

log = logging.getLogger(__name__)

# The code a werkzeug HTTPException of each status becomes (routing, body size, Host checks).
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


# Paths no person reads: health for balancers, the spec, and the live stream, whose client is an
# EventSource (its refusal, one stream too many, is a status and a Retry-After, never a page).
_JSON_PATHS = ("/healthz", "/healthz/live", "/openapi.json", "/orders/stream")


def wants_json() -> bool:
    return request.path.startswith("/api/") or request.path in _JSON_PATHS


def error_response(err: ApiError) -> tuple[Response | str, int, dict[str, str]]:
    headers = dict(err.headers)
    if err.code == "unavailable":
        headers.setdefault("Retry-After", str(RETRY_AFTER_SECONDS))
    missing = [name for name in ERRORS[err.code].headers if name not in headers]
    assert not missing, f"{err.code} answers must carry {missing}"  # the table promises them
    if wants_json():
        body: dict[str, Any] = {"code": err.code, "message": err.message}
        if err.errors:
            body["errors"] = err.errors
        return jsonify(error=body), err.status, headers
    if request_ctx.url_adapter is None:
        # The Host was refused (TRUSTED_HOSTS) before routing: no page can build its links.
        return Response(err.message + "\n", mimetype="text/plain"), err.status, headers
    kind = ERRORS[err.code]
    if htmx.wants_fragment():
        # A fragment request: htmx does not swap error responses; static/js/scroll-window.js
        # shows this row: Retry where asking again can succeed, else the way to the list's first
        # page (a Retry that asked for a stale cursor again could never work).
        headers["Vary"] = htmx.VARY_HEADER
        first_page = None if kind.later else url_for("list_page.orders", **_same_list(err.code))
        return render_template("_error_row.html", error=err, first_page=first_page), err.status, headers
    page = render_template("error.html", error=err, title=kind.title, kind=kind)
    return page, err.status, headers


def _same_list(code: str) -> dict[str, Any]:
    """The list a stale cursor was for (its sort, status and search), to start it again; for any
    other error the top of the orders (the parameters themselves may be what was wrong)."""
    if code not in ("invalid_cursor", "cursor_mismatch"):
        return {}
    return {name: value for name in ("sort", "status", "q") if (value := request.args.get(name))}


def check_query_is_utf8() -> None:
    """A query string whose percent-escapes are not UTF-8 (`q=%FF`) is a 400 `invalid_parameter`:
    werkzeug keeps such an escape as the literal text `%FF` (or a U+FFFD), so the search looked
    for text the client never sent and answered 200 with no rows."""
    try:
        unquote_to_bytes(request.query_string).decode("utf-8")
    except UnicodeDecodeError as err:
        raise ApiError("invalid_parameter", f"the query string is not UTF-8 (byte {err.start})") from None


def init_app(app: Flask) -> None:
    app.before_request(check_query_is_utf8)

    @app.errorhandler(ApiError)
    def _api_error(err: ApiError) -> ResponseReturnValue:
        return error_response(err)

    @app.errorhandler(InvalidCursor)
    def _invalid_cursor(err: InvalidCursor) -> ResponseReturnValue:
        return error_response(ApiError("invalid_cursor", str(err)))

    @app.errorhandler(CursorMismatch)
    def _cursor_mismatch(err: CursorMismatch) -> ResponseReturnValue:
        return error_response(ApiError("cursor_mismatch", str(err)))

    @app.errorhandler(PaginationError)
    @app.errorhandler(InvalidParameter)
    def _invalid_parameter(err: ValueError) -> ResponseReturnValue:
        return error_response(ApiError("invalid_parameter", str(err)))

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PoolTimeout)
    def _database_error(err: Exception) -> ResponseReturnValue:
        if not retryable(err):
            return _unexpected(err)  # a bug: retrying cannot help, and its trace must be seen
        # Never show SQL or a stack trace: log one line, tell the client to come back.
        log.warning("database unavailable: %s", str(err).splitlines()[0][:300])
        return error_response(
            ApiError("unavailable", "the database is not answering; retry in a few seconds")
        )

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> ResponseReturnValue:
        status = err.code or 500
        code = _HTTP_CODES.get(status)
        if code is None:
            # A status no view raises (e.g. 416 for a bad Range on a static file): werkzeug's own.
            return err
        # Keep what the exception says about itself: Allow on a 405, Retry-After on a 429.
        headers = {k: v for k, v in err.get_headers() if k.lower() != "content-type"}
        message = err.description or err.name
        if isinstance(err, SecurityError):  # werkzeug's message repeats the Host it refused
            message = "this server does not serve that Host (TRUSTED_HOSTS)"
        elif isinstance(err, NotFound) and err.description == NotFound.description:
            # No route matched: werkzeug's words are for a person who typed a URL into a browser
            # ("If you entered the URL manually..."); an API client is told which path.
            message = f"nothing is at {request.path[:200]!r}"
        elif status == 413:  # werkzeug's "exceeds the capacity limit": the chunked 413's words
            message = too_large(request.max_content_length)
        return error_response(ApiError(code, message, headers=headers))

    @app.errorhandler(Exception)
    def _unexpected(err: Exception) -> ResponseReturnValue:
        log.error("unexpected error", exc_info=err)
        return error_response(ApiError("internal_error", "something went wrong on our side"))
