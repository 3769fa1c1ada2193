"""The CSV format: columns, one line per order, and formulas neutralized (in Python and in SQL)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, case, func, literal, or_

from orders.data.types import iso_utc

CSV_COLUMNS = ["id", "customer", "amount", "status", "created_at"]
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection"):
# `=HYPERLINK(...)`, `+cmd|' /C calc'!A0`, `@SUM(1+1)`, `-2+3`; tab and carriage return too.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
# The file is written with "," but a spreadsheet in most European locales splits on ";", and
# then the quotes around a field protect nothing: `a;=2+5;b` becomes a cell `=2+5`. So a trigger
# right after either separator is neutralized too (`a;'=2+5;b`), after any quotes there (`a;"=1`
# is `a;""=1` in the file, and a ";" reader unquotes that to `=1`), and after a line break (a
# reader that lost the quoting starts a row there). Spaces (and quotes) before the trigger do not
# make it safe: an import that trims cells turns `Ana; =HYPERLINK(...)` into a formula. The ' goes
# at the cell's start, before those spaces: a spreadsheet hides a leading ' and shows the rest.
# The same patterns for Python, PostgreSQL and MariaDB (their regular expression engines agree on
# them, lookahead included: tests/test_security_csv.py compares their bytes on generated names).
# Every match of _AFTER_SEPARATOR holds its separator: the engines treat an empty match next to
# another one differently ("\r =x" would get one ' from PostgreSQL and two from Python).
_LEADING = r'^[ "]*[=+\-@\t\r]'
_AFTER_SEPARATOR = r'([,;\r\n]"*)(?=[ "]*[=+\-@\t\r])'
_LEADING_RE = re.compile(_LEADING)
_AFTER_SEPARATOR_RE = re.compile(_AFTER_SEPARATOR)
_SEPARATORS = (",", ";", "\r", "\n")
# Every character that may start a neutralized cell (a trigger, a space, a quote) sorts below "A":
# a cell that sorts at or above "A" (by code point) and holds no separator needs no regular
# expression. Most names pass this one comparison.
_BELOW_EVERY_SAFE_START = "A"


def neutralize(text: str) -> str:
    """A text cell a spreadsheet shows as text: prefixed with ' when its first character other
    than spaces (and quotes) would start a formula, and with ' after each separator ("," or
    ";", quotes after it, a line break) that such a character follows (a spreadsheet may split
    there). neutralize_sql() is the same in SQL.

    Only text cells are touched. Ids and amounts are numbers the database typed and we format
    (an amount is never negative: the API refuses it; and a number with a leading "-" is a
    number to a spreadsheet, not a formula), statuses come from a fixed list and timestamps
    start with a digit: prefixing those would only corrupt them.
    """
    if text < _BELOW_EVERY_SAFE_START or any(separator in text for separator in _SEPARATORS):
        prefix = "'" if _LEADING_RE.match(text) else ""
        return prefix + _AFTER_SEPARATOR_RE.sub(r"\1'", text)
    return text


def neutralize_sql(column: ColumnElement[str], dialect: str) -> ColumnElement[str]:
    """neutralize() as a PostgreSQL, MariaDB or SQLite expression, so that the server writes the
    cells Python would. PostgreSQL and MariaDB run the same regular expression; SQLite has none
    built in, so it calls neutralize() itself (registered by export.py) for the rows the guard
    lets through, which for real names are almost none."""
    # The guard, cheap per row: compared by code point (PostgreSQL "C", MariaDB utf8mb4_bin,
    # SQLite's BINARY default), and searched for each separator without a regular expression.
    binary: ColumnElement[str] = column
    if dialect == "postgresql":
        binary, find = column.collate("C"), func.strpos
    elif dialect == "sqlite":
        find = func.instr
    else:
        binary, find = column.collate("utf8mb4_bin"), func.instr
    guard = or_(
        binary < literal(_BELOW_EVERY_SAFE_START), *(find(column, literal(s)) > 0 for s in _SEPARATORS)
    )
    if dialect == "sqlite":
        neutralized: ColumnElement[str] = getattr(func, SQLITE_NEUTRALIZE)(column)
    else:
        every = [literal("g")] if dialect == "postgresql" else []  # MariaDB's replaces every match
        separated = func.regexp_replace(column, literal(_AFTER_SEPARATOR), literal("\\1'"), *every)
        prefix = case((column.regexp_match(literal(_LEADING)), literal("'")), else_=literal(""))
        neutralized = func.concat(prefix, separated)
    return case((guard, neutralized), else_=column)


# The name under which SQLite calls neutralize() (orders/exports/stream.py registers it per connection).
SQLITE_NEUTRALIZE = "csv_neutralize"


def iso_utc_sql(column: ColumnElement[Any], dialect: str) -> ColumnElement[str]:
    """iso_utc() as a PostgreSQL, MariaDB or SQLite expression (MariaDB and SQLite keep the UTC
    time naive)."""
    if dialect == "postgresql":
        return func.to_char(func.timezone("UTC", column), literal('YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
    if dialect == "sqlite":
        # UTCDateTime stores SQLAlchemy's text "YYYY-MM-DD HH:MM:SS.ffffff" (microseconds always).
        return func.replace(column, literal(" "), literal("T")).op("||")(literal("Z"))
    return func.date_format(column, literal("%Y-%m-%dT%H:%i:%s.%fZ"))


def csv_line(values: Sequence[Any], *, raw: bool = False) -> str:
    """One order as a CSV line from the values of CSV_COLUMNS (more may follow): the customer
    neutralized (unless raw) and always quoted, as PostgreSQL's COPY ... FORCE_QUOTE (customer)
    writes it; the other cells never hold a separator, a quote or a line break."""
    order_id, customer, amount, status, created_at = values[: len(CSV_COLUMNS)]
    name = (customer if raw else neutralize(customer)).replace('"', '""')
    return f'{order_id},"{name}",{amount},{status},{iso_utc(created_at)}\n'
