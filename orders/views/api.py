"""The JSON API: pages of orders by cursor, the rail of a sort, one order, create and delete."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy import CursorResult, delete

from orders.core.errors import ApiError, too_large
from orders.data.db import get_session
from orders.data.models import LIST_ROW, MAX_ID, Order
from orders.data.types import iso_utc
from orders.finding import rail, reader
from orders.finding.order import not_found, order_or_404
from orders.finding.params import InvalidParameter
from orders.finding.request import ListRequest
from orders.web.auth import write_access
from orders.web.routes import list_read
from orders.writing import grammar, idempotency
from orders.writing.validation import validate_order

bp = Blueprint("api", __name__)

try:  # gunicorn is how production serves the app, but the app must not need it
    from gunicorn.http.errors import ParseException as _GunicornParseError
except ImportError:  # pragma: no cover
    _GunicornParseError = ValueError  # a stand-in class when gunicorn is absent
BODY_READ_ERRORS = (OSError, ValueError, _GunicornParseError)


@bp.get("/api/orders")
@list_read
def list_orders(listing: ListRequest) -> ResponseReturnValue:
    page = reader.page(listing, get_session())
    return jsonify(
        items=[row_json(*row) for row in page.items],
        next_cursor=page.next_cursor,
        prev_cursor=page.prev_cursor,
        has_more=page.has_more,
        has_previous=page.has_previous,
    )


@bp.get("/api/orders/rail")
@list_read
def list_rail(listing: ListRequest) -> ResponseReturnValue:
    """The scrubber rail of a sort and status (orders/finding/rail.py): its buckets, each with its
    count and a cursor at its first row; 304 when the client's ETag is still the rail's."""
    if listing.position is not None or listing.goto is not None:
        raise InvalidParameter("the rail is the whole list's: give sort and status, not after, before or to")
    built = rail.build(listing, get_session().connection())
    response = jsonify(built.as_json())
    response.set_etag(built.etag())
    return response.make_conditional(request)


@bp.get("/api/orders/<int:order_id>")
def get_order(order_id: int) -> ResponseReturnValue:
    return jsonify(order_json(order_or_404(order_id)))


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
        raise ApiError("payload_too_large", too_large(limit))
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
def create_order() -> ResponseReturnValue:
    body = read_json_body()
    order = Order(**validate_order(body))
    # Commits it; with an Idempotency-Key header at most once per key (orders/writing/idempotency.py).
    return idempotency.create(get_session(), order, body, created)


def created(order: Order) -> tuple[Response, int, dict[str, str]]:
    return jsonify(order_json(order)), 201, {"Location": url_for("api.get_order", order_id=order.id)}


@bp.delete("/api/orders/<int:order_id>")
@write_access
def delete_order(order_id: int) -> ResponseReturnValue:
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


def order_json(order: Order) -> dict[str, Any]:
    """An order as the API shows it (and as a replayed Idempotency-Key answers it)."""
    return row_json(*(getattr(order, column) for column in LIST_ROW))


def row_json(
    id: int, customer: str, customer_key: str, amount: Any, status: str, created_at: Any
) -> dict[str, Any]:
    """A list row as the API shows it, given as its columns in the table's order (models.LIST_ROW):
    a page's rows are unpacked, not read by name (a fourteenth of a JSON page's instructions)."""
    return {
        "id": str(id),
        "customer": customer,
        "amount": str(amount),
        "status": status,
        "created_at": iso_utc(created_at),
    }
