"""One order by its number: the order page and the JSON API look it up here."""

from __future__ import annotations

from orders.core.errors import ApiError
from orders.data.db import get_session
from orders.data.models import MAX_ID, Order


def not_found(order_id: int) -> ApiError:
    return ApiError("not_found", f"no order with id {order_id}")


def order_or_404(order_id: int) -> Order:
    """The order, or ApiError `not_found` (404)."""
    order = get_session().get(Order, order_id) if 1 <= order_id <= MAX_ID else None
    if order is None:
        raise not_found(order_id)
    return order
