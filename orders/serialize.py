"""How an order looks in JSON and CSV: ids and amounts as strings, UTC timestamps with microseconds."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal

from .models import Order

CSV_COLUMNS = ["id", "customer", "amount", "status", "created_at"]
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection"):
# `=HYPERLINK(...)`, `+cmd|' /C calc'!A0`, `@SUM(1+1)`, `-2+3`; tab and carriage return too.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# The file is written with "," but a spreadsheet in most European locales splits on ";", and
# then the quotes around a field protect nothing: `a;=2+5;b` becomes a cell `=2+5`. So a trigger
# right after either separator is neutralized too (`a;'=2+5;b`), after any quotes there (`a;"=1`
# is `a;""=1` in the file, and a ";" reader unquotes that to `=1`), and after a line break (a
# reader that lost the quoting starts a row there).
_AFTER_SEPARATOR = r'([,;\r\n]"*)(?=[=+\-@\t\r])'
_AFTER_SEPARATOR_RE = re.compile(_AFTER_SEPARATOR)
_SEPARATORS = (",", ";", "\r", "\n")


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
    and with ' after each separator ("," or ";", quotes after it, a line break) that a trigger
    follows (a spreadsheet may split there). neutralize_sql() is the same in SQL.

    Only text cells are touched. Ids and amounts are numbers the database typed and we format
    (an amount is never negative: the API refuses it; and a number with a leading "-" is a
    number to a spreadsheet, not a formula), statuses come from a fixed list and timestamps
    start with a digit: prefixing those would only corrupt them.
    """
    if any(separator in text for separator in _SEPARATORS):
        text = _AFTER_SEPARATOR_RE.sub(r"\1'", text)
    return "'" + text if text.startswith(FORMULA_TRIGGERS) else text


def neutralize_sql(column: ColumnElement[str], dialect: str) -> ColumnElement[str]:
    """neutralize() as a PostgreSQL or MariaDB expression (both regular expression engines take
    the same pattern, lookahead included), so that the server writes the cells Python would."""
    first: ColumnElement[str] = func.left(column, 1)
    if dialect != "postgresql":
        # MariaDB compares by the column's collation, where a full-width "＝" may equal "=":
        # compared by code point, as Python does.
        first = first.collate("utf8mb4_bin")
    # The replacement only inserts after a separator, so the first character is the column's:
    # tested on the column, the (costlier) regexp_replace runs once per row.
    leading = first.in_([literal(t) for t in FORMULA_TRIGGERS])
    # Most names hold no separator: a character class test is cheaper than the replacement.
    has_separator = column.regexp_match(literal("[,;\r\n]"))
    every = [literal("g")] if dialect == "postgresql" else []  # MariaDB's replaces every match
    separated = func.regexp_replace(column, literal(_AFTER_SEPARATOR), literal("\\1'"), *every)
    return case((leading, literal("'")), else_=literal("")) + case((has_separator, separated), else_=column)


def iso_utc_sql(column: ColumnElement[Any], dialect: str) -> ColumnElement[str]:
    """iso_utc() as a PostgreSQL or MariaDB expression (MariaDB keeps the UTC time naive)."""
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", column), literal('YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
    return func.date_format(column, literal("%Y-%m-%dT%H:%i:%s.%fZ"))


def csv_line(values: Sequence[Any], *, raw: bool = False) -> str:
    """One order as a CSV line from the values of CSV_COLUMNS (more may follow): the customer
    neutralized (unless raw) and always quoted, as PostgreSQL's COPY ... FORCE_QUOTE (customer)
    writes it; the other cells never hold a separator, a quote or a line break."""
    order_id, customer, amount, status, created_at = values[: len(CSV_COLUMNS)]
    name = (customer if raw else neutralize(customer)).replace('"', '""')
    return f'{order_id},"{name}",{amount},{status},{iso_utc(created_at)}\n'
