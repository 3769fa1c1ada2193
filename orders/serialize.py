"""How an order looks in JSON and CSV: ids and amounts as strings, UTC timestamps with microseconds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from .models import Order

CSV_COLUMNS = ["id", "customer", "amount", "status", "created_at"]


def iso_utc(value: dt.datetime) -> str:
    # isoformat is C code, several times faster than strftime: it matters in an export.
    if value.tzinfo is not dt.UTC:
        value = value.astimezone(dt.UTC)
    return value.isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def order_json(order: Order) -> dict[str, Any]:
    return {
        "id": str(order.id),
        "customer": order.customer,
        "amount": str(order.amount),
        "status": order.status,
        "created_at": iso_utc(order.created_at),
    }


def csv_row(values: Sequence[Any]) -> list[Any]:
    """The values of CSV_COLUMNS, in that order (more may follow), as csv.writer takes them:
    only the timestamp needs formatting; the writer turns ids and amounts into text itself."""
    *leading, created_at = values[: len(CSV_COLUMNS)]
    return [*leading, iso_utc(created_at)]
