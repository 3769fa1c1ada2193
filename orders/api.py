"""The JSON API: pages of orders by cursor, one order, create and delete, health."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from flask import Blueprint, current_app, jsonify, request, url_for
from sqlalchemy import delete, text

from .db import get_session
from .errors import ApiError
from .listing import ListRequest
from .models import CUSTOMER_MAX_LENGTH, STATUSES, Order
from .serialize import order_json

bp = Blueprint("api", __name__)

MAX_ID = 2**63 - 1
MAX_AMOUNT = Decimal("9999999999.99")  # NUMERIC(12, 2)
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def not_found(order_id: int) -> ApiError:
    return ApiError(404, "not_found", f"no order with id {order_id}")


def get_order_or_404(order_id: int) -> Order:
    order = get_session().get(Order, order_id) if 1 <= order_id <= MAX_ID else None
    if order is None:
        raise not_found(order_id)
    return order


@bp.get("/api/orders")
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


def validate_order(body: Any) -> dict[str, Any]:
    """The fields of a new order, or ApiError 422 listing every field that is wrong."""
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_order", "the body must be a JSON object", {"body": "not an object"})
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    unknown = sorted(set(body) - {"customer", "amount", "status", "created_at"})
    for name in unknown:
        errors[name] = "unknown field"

    customer = body.get("customer")
    if not isinstance(customer, str) or not customer.strip():
        errors["customer"] = "required: a non-empty string"
    elif len(customer.strip()) > CUSTOMER_MAX_LENGTH:
        errors["customer"] = f"at most {CUSTOMER_MAX_LENGTH} characters"
    elif _CONTROL_CHARS.search(customer):
        errors["customer"] = "must not contain control characters"
    elif not _encodable(customer):
        # JSON can carry a lone surrogate ("\ud800"); no database driver can store one.
        errors["customer"] = "must be valid Unicode text (no lone surrogates)"
    else:
        values["customer"] = customer.strip()

    amount = body.get("amount")
    try:
        if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
            raise InvalidOperation
        parsed = Decimal(str(amount))
        if not parsed.is_finite() or parsed != parsed.quantize(Decimal("0.01")):
            raise InvalidOperation
        if not Decimal(0) <= parsed <= MAX_AMOUNT:
            errors["amount"] = f"must be between 0 and {MAX_AMOUNT}"
        else:
            values["amount"] = parsed.quantize(Decimal("0.01"))
    except (InvalidOperation, ValueError):
        errors["amount"] = 'required: a decimal with at most 2 places, e.g. "12.34"'

    status = body.get("status", "pending")
    if status not in STATUSES:
        errors["status"] = f"must be one of {', '.join(STATUSES)}"
    else:
        values["status"] = status

    created_at = body.get("created_at")
    if created_at is None:
        values["created_at"] = dt.datetime.now(dt.UTC)
    else:
        try:
            if not isinstance(created_at, str):
                raise ValueError
            parsed_at = dt.datetime.fromisoformat(created_at)
            if parsed_at.tzinfo is None:
                errors["created_at"] = "needs a timezone, e.g. 2026-03-11T10:39:00.123456Z"
            elif not 1970 <= parsed_at.astimezone(dt.UTC).year <= 9998:
                errors["created_at"] = "must be a date between 1970 and 9998"
            else:
                values["created_at"] = parsed_at.astimezone(dt.UTC)
        except (ValueError, OverflowError):
            errors["created_at"] = "must be an ISO 8601 timestamp with a timezone"
    if errors:
        raise ApiError(422, "invalid_order", "the order has invalid fields", errors)
    return values


@bp.post("/api/orders")
def create_order():  # type: ignore[no-untyped-def]
    if not request.is_json:
        raise ApiError(415, "unsupported_media_type", "send the order as application/json")
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # deeply nested arrays or objects: the parser gives up, not a ValueError
        body = None
    if body is None:
        raise ApiError(422, "invalid_order", "the body is not valid JSON", {"body": "not valid JSON"})
    order = Order(**validate_order(body))
    session = get_session()
    session.add(order)
    session.commit()
    location = url_for("api.get_order", order_id=order.id)
    return jsonify(order_json(order)), 201, {"Location": location}


@bp.delete("/api/orders/<int:order_id>")
def delete_order(order_id: int):  # type: ignore[no-untyped-def]
    # One DELETE statement, not a read and then a delete: of two concurrent DELETEs for the
    # same order exactly one removes it (204) and the other finds nothing (404). Read first,
    # both found the order and both answered 204.
    session = get_session()
    deleted = 0
    if 1 <= order_id <= MAX_ID:
        deleted = session.execute(delete(Order).where(Order.id == order_id)).rowcount
        session.commit()
    if not deleted:
        raise not_found(order_id)
    return "", 204


@bp.get("/healthz")
def healthz():  # type: ignore[no-untyped-def]
    get_session().execute(text("SELECT 1"))  # a database error becomes 503 in errors.py
    return jsonify(status="ok")
