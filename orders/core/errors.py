"""Every error the app answers with, in one table (ERRORS): JSON under /api, an HTML page elsewhere.

ERRORS maps each machine `code` to its HTTP status, the title of its HTML page and what it
means. The handlers (orders/web/errors.py), the OpenAPI document (orders/views/openapi.py) and
the README's list are all made from it or checked against it (tests/test_security_errors.py),
so a code cannot be answered without being documented, or documented without existing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from orders.core.settings import MAX_BODY_BYTES

RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class ErrorKind:
    """One error a client can get: its status, the HTML page's title, what it means, the
    response headers it always carries, and whether asking the same again later can succeed
    (the HTML offers "Try again" and the list's failed load "Retry" only then)."""

    status: int
    title: str
    meaning: str
    headers: tuple[str, ...] = ()
    later: bool = False


ERRORS: dict[str, ErrorKind] = {
    "invalid_cursor": ErrorKind(
        400,
        "That link does not point anywhere we know",
        "The cursor is malformed, altered, too long, sealed with another key, or of an older or"
        " unknown version.",
    ),
    "cursor_mismatch": ErrorKind(
        400,
        "That link does not point anywhere we know",
        "The cursor was made for another sort, direction or filter.",
    ),
    "invalid_parameter": ErrorKind(
        400,
        "That link does not point anywhere we know",
        "A query parameter breaks its rules (unknown sort or status, limit out of 1-100, "
        "a parameter given twice, after and before together).",
    ),
    "bad_request": ErrorKind(
        400,
        "Bad request",
        "The request itself cannot be read: a malformed (chunked) body, or a Host the server "
        "does not serve (TRUSTED_HOSTS).",
    ),
    "unauthorized": ErrorKind(
        401,
        "Unauthorized",
        "A write without a valid `Authorization: Bearer <token>` (one of API_TOKENS).",
        ("WWW-Authenticate",),
    ),
    "not_found": ErrorKind(404, "Not found", "No such order or page."),
    "method_not_allowed": ErrorKind(
        405, "Method not allowed", "The URL exists but not with this method.", ("Allow",)
    ),
    "request_timeout": ErrorKind(
        408,
        "Request timeout",
        "The request's body did not arrive within 10 s (the production front's bound on slow "
        "clients); the request was not served, and sending it again whole can succeed.",
        later=True,
    ),
    "payload_too_large": ErrorKind(
        413,
        "Request too large",
        f"The body is larger than {MAX_BODY_BYTES // 1024} KiB (chunked bodies included).",
    ),
    "unsupported_media_type": ErrorKind(415, "Unsupported media type", "The body is not application/json."),
    "invalid_order": ErrorKind(
        422,
        "Invalid order",
        "The order has invalid fields (or is not a JSON object); `errors` maps each field to what "
        "is wrong with it.",
    ),
    "rate_limited": ErrorKind(
        429,
        "Too many requests",
        "This client sent more requests than its limit allows (RATELIMIT_READS, RATELIMIT_WRITES).",
        ("Retry-After",),
        later=True,
    ),
    "internal_error": ErrorKind(
        500,
        "Something went wrong on our side",
        "A bug: the trace is logged, nothing of it is sent. Retrying will not help.",
    ),
    "unavailable": ErrorKind(
        503,
        "The orders are unavailable for a moment",
        "The database cannot answer now (down, unreachable, out of connections, statement "
        "timeout, deadlock, read-only or in recovery), or the front found no app server free or "
        "answering; retrying later can succeed.",
        ("Retry-After",),
        later=True,
    ),
}


def too_large(limit: int | None) -> str:
    """The one message of a body over the limit, whether its Content-Length said so (werkzeug's
    413) or a chunked body ran past it (orders/views/api.py)."""
    return f"the body is larger than {limit} bytes"


# The code a werkzeug HTTPException of each status becomes (routing, body size, Host checks).
class ApiError(Exception):
    """An error a client can act on: a code of ERRORS (which fixes the status) and a message."""

    def __init__(
        self,
        code: str,
        message: str,
        errors: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.code, self.message, self.errors = code, message, errors
        self.status = ERRORS[code].status
        self.headers = dict(headers or {})


# --- Could the same request succeed later? -------------------------------------------------------

# PostgreSQL SQLSTATEs (Appendix A of its manual) that a later retry can get past.
_PG_RETRYABLE = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "55P03",  # lock_not_available (lock_timeout)
    "57014",  # query_canceled: statement_timeout
    "57P01",  # admin_shutdown
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: starting up, or in recovery
    "57P05",  # idle_session_timeout
    "53300",  # too_many_connections
    "25006",  # read_only_sql_transaction: a standby, or a primary being failed over
}
# MariaDB/MySQL error numbers with the same meaning.
_MYSQL_RETRYABLE = {
    1040,  # ER_CON_COUNT_ERROR: too many connections
    1053,  # ER_SERVER_SHUTDOWN
    1205,  # ER_LOCK_WAIT_TIMEOUT
    1213,  # ER_LOCK_DEADLOCK
    1290,  # ER_OPTION_PREVENTS_STATEMENT: --read-only
    1317,  # ER_QUERY_INTERRUPTED
    1792,  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    1927,  # ER_CONNECTION_KILLED (MariaDB)
    1969,  # ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
    3024,  # ER_QUERY_TIMEOUT (MySQL max_execution_time)
    2002,  # CR_CONNECTION_ERROR
    2003,  # CR_CONN_HOST_ERROR: refused
    2006,  # CR_SERVER_GONE_ERROR
    2013,  # CR_SERVER_LOST
    2055,  # CR_SERVER_LOST_EXTENDED
    4031,  # ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8)
}
# Of those, the ones where the engine chose this transaction as the victim of a conflict with
# another and rolled all of it back (a deadlock; PostgreSQL's serialization failure): nothing of
# it was kept, and the same writes sent again at once will very likely pass (write_retry.py).
_CONFLICTS: dict[str, set[str | int | None]] = {"psycopg": {"40001", "40P01"}, "pymysql": {1213}}
# SQLite primary result codes: another writer holds the file, or it cannot be opened or read.
_SQLITE_RETRYABLE = {
    sqlite3.SQLITE_BUSY,
    sqlite3.SQLITE_LOCKED,
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL,
}


def _engine_code(orig: BaseException | None) -> tuple[str, str | int | None]:
    """The driver's family ("psycopg", "pymysql" or "" for another) and the engine's own code:
    PostgreSQL's SQLSTATE (None when the client library failed before the server said anything),
    MariaDB's error number (PyMySQL's SQLSTATE is mostly the catch-all HY000)."""
    driver = type(orig).__module__
    if driver.startswith("psycopg"):
        return "psycopg", getattr(orig, "sqlstate", None)
    if driver.startswith("pymysql"):
        args = getattr(orig, "args", ())
        return "pymysql", args[0] if args and isinstance(args[0], int) else None
    return "", None


def conflicted(err: BaseException) -> bool:
    """True when the engine rolled the whole transaction back as a conflict's victim (a
    deadlock): the writes are undone and may be sent again at once."""
    if not isinstance(err, DBAPIError):
        return False
    driver, code = _engine_code(err.orig)
    return code in _CONFLICTS.get(driver, set())


def retryable(err: BaseException) -> bool:
    """True when the database could not answer now but may later (503 + Retry-After); False for
    everything else, which fails the same way every time (a missing column after a deploy that
    forgot its migration, a value the database refuses): that is a bug, answered 500 with its
    trace logged, never disguised as an outage."""
    if isinstance(err, PoolTimeout):
        return True  # every connection is busy: the pool gives none within its timeout
    if not isinstance(err, DBAPIError):
        return False
    if err.connection_invalidated:
        return True  # SQLAlchemy recognised a disconnect
    orig = err.orig
    driver, code = _engine_code(orig)
    if driver == "psycopg":
        if code is None:
            # No SQLSTATE: the client library failed before the server said anything (refused,
            # unreachable, a connect or read timeout). psycopg raises OperationalError or one of
            # its subclasses (ConnectionTimeout), which SQLAlchemy wraps in its OperationalError:
            # asked by class, never by name.
            return isinstance(err, OperationalError)
        return str(code).startswith("08") or code in _PG_RETRYABLE
    if driver == "pymysql":
        return code in _MYSQL_RETRYABLE
    if isinstance(orig, sqlite3.Error):
        return (getattr(orig, "sqlite_errorcode", 0) & 0xFF) in _SQLITE_RETRYABLE
    return False
