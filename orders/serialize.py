"""How an order looks in JSON and CSV: ids and amounts as strings, UTC timestamps with microseconds."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from .models import Order

CSV_COLUMNS = ["id", "customer", "amount", "status", "created_at"]
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection"):
# `=HYPERLINK(...)`, `+cmd|' /C calc'!A0`, `@SUM(1+1)`, `-2+3`; tab and carriage return too.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# The file is written with "," but a spreadsheet in most European locales splits on ";", and
# then a quote in the middle of a field protects nothing: `a;=2+5;b` becomes a cell `=2+5`.
# So a trigger right after either separator is neutralized too (`a;'=2+5;b`), and a field with
# ";" is quoted like one with "," (export.csv_text).
_AFTER_SEPARATOR = re.compile(r"([,;])(?=[=+\-@\t\r])")


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


def neutralize(text: str) -> str:
    """A text cell a spreadsheet shows as text: prefixed with ' when it would start a formula,
    and with ' after each "," or ";" that a trigger follows (a spreadsheet may split there).

    Only text cells are touched. Ids and amounts are numbers the database typed and we format
    (an amount is never negative: the API refuses it; and a number with a leading "-" is a
    number to a spreadsheet, not a formula), statuses come from a fixed list and timestamps
    start with a digit: prefixing those would only corrupt them.
    """
    if "," in text or ";" in text:
        text = _AFTER_SEPARATOR.sub(r"\1'", text)
    return "'" + text if text.startswith(FORMULA_TRIGGERS) else text


def csv_row(values: Sequence[Any], *, raw: bool = False) -> list[Any]:
    """The values of CSV_COLUMNS, in that order (more may follow), as csv.writer takes them:
    the customer neutralized (unless raw), the timestamp formatted; the writer turns ids and
    amounts into text itself."""
    order_id, customer, amount, status, created_at = values[: len(CSV_COLUMNS)]
    return [order_id, customer if raw else neutralize(customer), amount, status, iso_utc(created_at)]
