"""The JSON API: pages of orders by cursor, one order, create and delete, health."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request, url_for
from sqlalchemy import CursorResult, delete

from . import grammar, health, idempotency
from .auth import write_access
from .db import get_session
from .errors import ApiError
from .listing import ListRequest
from .models import STATUSES, Order
from .routes import list_read, unlimited
from .serialize import order_json

bp = Blueprint("api", __name__)

try:  # gunicorn is how production serves the app, but the app must not need it
    from gunicorn.http.errors import ParseException as _GunicornParseError
except ImportError:  # pragma: no cover
    _GunicornParseError = ValueError  # a stand-in class when gunicorn is absent
BODY_READ_ERRORS = (OSError, ValueError, _GunicornParseError)

MAX_ID = 2**63 - 1


def not_found(order_id: int) -> ApiError:
    return ApiError("not_found", f"no order with id {order_id}")


def get_order_or_404(order_id: int) -> Order:
    order = get_session().get(Order, order_id) if 1 <= order_id <= MAX_ID else None
    if order is None:
        raise not_found(order_id)
    return order


@bp.get("/api/orders")
@list_read
def list_orders():  # type: ignore[no-untyped-def]
    listing = ListRequest.from_args(request.args, default_limit=20)
    page = listing.page(get_session(), current_app.extensions["cursor_codec"])
    return jsonify(
        items=[order_json(o) for o in page.items],
        next_cursor=page.next_cursor,
        prev_cursor=page.prev_cursor,
        has_more=page.has_more,
        has_previous=page.has_previous,
    )


@bp.get("/api/orders/<int:order_id>")
def get_order(order_id: int):  # type: ignore[no-untyped-def]
    return jsonify(order_json(get_order_or_404(order_id)))


def validate_order(body: Any, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """The fields of a new order, or ApiError 422 listing every field that is wrong."""
    if not isinstance(body, dict):
        raise ApiError("invalid_order", "the body must be a JSON object", {"body": "not an object"})
    now = now or dt.datetime.now(dt.UTC)
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    unknown = sorted(set(body) - {"customer", "amount", "status", "created_at"})
    for name in unknown:
        errors[name] = "unknown field"

    for name, parse in (("customer", grammar.customer_name), ("amount", grammar.amount)):
        try:
            values[name] = parse(body.get(name))
        except grammar.GrammarError as err:
            errors[name] = str(err)

    status = body.get("status", "pending")
    if not isinstance(status, str) or status not in STATUSES:
        errors["status"] = f"must be one of {', '.join(STATUSES)}"
    else:
        values["status"] = status

    try:
        values["created_at"] = created_at(body.get("created_at"), now)
    except ValueError as err:
        errors["created_at"] = str(err)
    if errors:
        raise ApiError("invalid_order", "the order has invalid fields", errors)
    return values


def created_at(value: Any, now: dt.datetime) -> dt.datetime:
    """When the order was made: now, or a client's timestamp (with a timezone) from 1970 up to
    CREATED_AT_MAX_SKEW_SECONDS after the server's clock. Backdating is allowed (imports, offline
    tills): such an order appears in its place, below what a reader has seen. Future dates are
    not: an order dated 9998 would sit above every new order in "newest", and the "N new orders"
    banner, which counts orders above the first row shown, would never count one again."""
    if value is None:
        return now
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 timestamp with a timezone")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 timestamp with a timezone") from None
    if parsed.tzinfo is None:
        raise ValueError("needs a timezone, e.g. 2026-03-11T10:39:00.123456Z")
    skew = current_app.config["CREATED_AT_MAX_SKEW_SECONDS"]
    future = f"must not be in the future (at most {skew} s ahead of the server's clock)"
    try:
        utc = parsed.astimezone(dt.UTC)
    except (
        OverflowError
    ):  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC, 9999-12-31T23:59-01:00 after 9999
        raise ValueError(future if parsed.year > 1970 else "must be a date from 1970 on") from None
    if utc.year < 1970:
        raise ValueError("must be a date from 1970 on")
    if utc > now + dt.timedelta(seconds=skew):
        raise ValueError(future)
    return utc


def read_json_body() -> Any:
    """The request body parsed by the strict grammar, or the ApiError that describes why not."""
    if not request.is_json:
        raise ApiError("unsupported_media_type", "send the order as application/json")
    try:
        data = request.get_data(cache=True)
    except BODY_READ_ERRORS:
        # A malformed chunked body: werkzeug's reader raises OSError/ValueError, gunicorn's its
        # own ParseException (InvalidChunkSize, ChunkMissingTerminator, ...). The client's fault.
        raise ApiError(
            "bad_request", "the request body could not be read (malformed chunked encoding)"
        ) from None
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(data) >= limit and _more_body():
        # A chunked body has no Content-Length to refuse up front, and werkzeug stops reading at
        # the limit without saying so: what it gives us would be a truncated body (a 422). A body
        # of exactly the limit is whole (as it is with Content-Length): one byte more tells them apart.
        raise ApiError("payload_too_large", f"the body is larger than {limit} bytes")
    try:
        return grammar.loads(data)
    except grammar.DuplicateKey as err:
        raise ApiError("invalid_order", "the body is not valid JSON", {"body": str(err)}) from None
    except (ValueError, RecursionError):  # deep nesting makes the parser give up: RecursionError
        raise ApiError("invalid_order", "the body is not valid JSON", {"body": "not valid JSON"}) from None


def _more_body() -> bool:
    """Whether the server's (de-chunked) input has a byte beyond what werkzeug's limit let through."""
    try:
        return bool(request.environ["wsgi.input"].read(1))
    except BODY_READ_ERRORS:
        return True


@bp.post("/api/orders")
@write_access
def create_order():  # type: ignore[no-untyped-def]
    body = read_json_body()
    order = Order(**validate_order(body))
    # Commits it; with an Idempotency-Key header at most once per key (orders/idempotency.py).
    return idempotency.create(get_session(), order, body, created)


def created(order: Order) -> tuple[Response, int, dict[str, str]]:
    return jsonify(order_json(order)), 201, {"Location": url_for("api.get_order", order_id=order.id)}


@bp.delete("/api/orders/<int:order_id>")
@write_access
def delete_order(order_id: int):  # type: ignore[no-untyped-def]
    # One DELETE statement, not a read and then a delete: of two concurrent DELETEs for the
    # same order exactly one removes it (204) and the other finds nothing (404). Read first,
    # both found the order and both answered 204.
    session = get_session()
    deleted = 0
    if 1 <= order_id <= MAX_ID:
        result: CursorResult[Any] = session.execute(delete(Order).where(Order.id == order_id))  # type: ignore[assignment]  # a DELETE gives a CursorResult
        deleted = result.rowcount
        session.commit()
    if not deleted:
        raise not_found(order_id)
    return "", 204


@bp.get("/healthz")
@unlimited
def healthz():  # type: ignore[no-untyped-def]
    # Each dependency within HEALTHZ_TIMEOUT_MS, hung or refused: 503 `unavailable` otherwise.
    health.check()
    return jsonify(status="ok")
