"""How an order looks in JSON and CSV: ids and amounts as strings, UTC timestamps with microseconds."""

from __future__ import annotations

import datetime as dt
from typing import Any

from .models import Order

CSV_COLUMNS = ["id", "customer", "amount", "status", "created_at"]


def iso_utc(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def order_json(order: Order) -> dict[str, Any]:
    return {
        "id": str(order.id),
        "customer": order.customer,
        "amount": str(order.amount),
        "status": order.status,
        "created_at": iso_utc(order.created_at),
    }


def order_csv_row(order: Order) -> list[str]:
    return [str(order.id), order.customer, str(order.amount), order.status, iso_utc(order.created_at)]
