"""Every error maps to one status and one code, here: JSON under /api, an HTML page elsewhere.

invalid_cursor 400, cursor_mismatch 400, invalid_parameter 400, not_found 404,
method_not_allowed 405, payload_too_large 413, unsupported_media_type 415,
invalid_order 422, unavailable 503 (with Retry-After)
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify, render_template, request
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from pagination import CursorMismatch, InvalidCursor, PaginationError

from .listing import InvalidParameter

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    """An error with its HTTP status, machine code and a message a client can act on."""

    def __init__(self, status: int, code: str, message: str, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.errors = status, code, message, errors


_HTTP_CODES = {
    400: "invalid_parameter",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}
_TITLES = {
    400: "That link does not point anywhere we know",
    404: "Not found",
    405: "Method not allowed",
    413: "Request too large",
    415: "Unsupported media type",
    503: "The orders are unavailable for a moment",
}


def wants_json() -> bool:
    return request.path.startswith("/api/") or request.path in ("/healthz", "/openapi.json")


def error_response(err: ApiError) -> tuple[Response | str, int, dict[str, str]]:
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if err.status == 503 else {}
    if wants_json():
        body: dict[str, Any] = {"code": err.code, "message": err.message}
        if err.errors:
            body["errors"] = err.errors
        return jsonify(error=body), err.status, headers
    if request.headers.get("HX-Request") == "true":
        # A fragment request: htmx does not swap error responses; app.js shows a Retry row.
        headers["Vary"] = "HX-Request"
        return render_template("_error_row.html", error=err), err.status, headers
    page = render_template("error.html", error=err, title=_TITLES.get(err.status, "Error"))
    return page, err.status, headers


def database_unavailable(err: Exception) -> bool:
    """Could the same request succeed later? Yes for a database that is down, unreachable,
    out of connections, timed out (PostgreSQL's statement timeout, MariaDB's
    ER_STATEMENT_TIMEOUT 1969), deadlocked, or not migrated yet. No for a value the database
    refuses (DataError: PostgreSQL refuses NUL in text; IntegrityError): that fails the same
    way every time, so it is a bug on our side, not a reason to retry.
    """
    return not isinstance(err, DataError | IntegrityError)


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(err: ApiError):  # type: ignore[no-untyped-def]
        return error_response(err)

    @app.errorhandler(InvalidCursor)
    def _invalid_cursor(err: InvalidCursor):  # type: ignore[no-untyped-def]
        return error_response(ApiError(400, "invalid_cursor", str(err)))

    @app.errorhandler(CursorMismatch)
    def _cursor_mismatch(err: CursorMismatch):  # type: ignore[no-untyped-def]
        return error_response(ApiError(400, "cursor_mismatch", str(err)))

    @app.errorhandler(PaginationError)
    @app.errorhandler(InvalidParameter)
    def _invalid_parameter(err: ValueError):  # type: ignore[no-untyped-def]
        return error_response(ApiError(400, "invalid_parameter", str(err)))

    @app.errorhandler(DBAPIError)
    @app.errorhandler(PoolTimeout)
    def _database_error(err: Exception):  # type: ignore[no-untyped-def]
        if not database_unavailable(err):
            return _unexpected(err)  # a value the database refuses: a bug, retrying cannot help
        # Never show SQL or a stack trace: log it, tell the client to come back.
        log.warning("database unavailable: %s", str(err).splitlines()[0][:300])
        return error_response(
            ApiError(503, "unavailable", "the database is not answering; retry in a few seconds")
        )

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException):  # type: ignore[no-untyped-def]
        status = err.code or 500
        code = _HTTP_CODES.get(status, "error")
        return error_response(ApiError(status, code, err.description or err.name))

    @app.errorhandler(Exception)
    def _unexpected(err: Exception):  # type: ignore[no-untyped-def]
        log.exception("unexpected error")
        return error_response(ApiError(500, "internal_error", "something went wrong on our side"))
