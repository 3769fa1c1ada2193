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
# Their full-width and small forms too (＝1+1: an IME's sign, which spreadsheets in East Asian
# locales read as the ASCII one).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠", "﹦", "﹢", "﹣", "﹫")


# Every character that shows nothing before a trigger: the space separators (Unicode's Zs:
# U+00A0, U+3000, ...), the format characters (Cf: U+200B, U+FEFF, bidi marks, ...) and the
# Hangul fillers, as code point ranges (tests/test_security_csv.py checks them against
# unicodedata, which would read every code point's category at each start); a quote too. What may stand
# between a cell's start (or a separator) and a trigger without making it safe.
_BLANK_RANGES = (
    (0x0020, 0x0020),
    (0x00A0, 0x00A0),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x1680, 0x1680),
    (0x180E, 0x180E),
    (0x2000, 0x200F),
    (0x202A, 0x202F),
    (0x205F, 0x2064),
    (0x2066, 0x206F),
    (0x3000, 0x3000),
    (0x3164, 0x3164),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
LEADING_BLANKS = '"' + "".join(chr(cp) for low, high in _BLANK_RANGES for cp in range(low, high + 1))


def _class(characters: str) -> str:
    """A bracket expression of `characters`, runs written as ranges; the same in Python,
    PostgreSQL and MariaDB (none of the characters is special inside brackets but "-", which is
    written first, where it is literal in all three)."""
    points = sorted({ord(c) for c in characters if c != "-"})
    parts, start = ["-"] if "-" in characters else [], 0
    while start < len(points):
        end = start
        while end + 1 < len(points) and points[end + 1] == points[end] + 1:
            end += 1
        low, high = chr(points[start]), chr(points[end])
        parts.append(low if end == start else f"{low}{high}" if end == start + 1 else f"{low}-{high}")
        start = end + 1
    return "[" + "".join(parts) + "]"


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
_BLANK, _TRIGGER = _class(LEADING_BLANKS), _class("".join(FORMULA_TRIGGERS))
_LEADING = f"^{_BLANK}*{_TRIGGER}"
_AFTER_SEPARATOR = f'([,;\r\n]"*)(?={_BLANK}*{_TRIGGER})'
_LEADING_RE = re.compile(_LEADING)
_AFTER_SEPARATOR_RE = re.compile(_AFTER_SEPARATOR)
_SEPARATORS = (",", ";", "\r", "\n")
# Every ASCII character that may start a neutralized cell (a trigger, a space, a quote) sorts
# below "A", and every other one (U+00A0, U+200B, U+3000, ＝ ...) at or above U+00A0: a cell
# between the two (by code point) that holds no separator needs no regular expression. Most
# names pass these comparisons.
_BELOW_EVERY_SAFE_START = "A"
_FROM_UNSAFE_STARTS = "\u00a0"


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
    if not _BELOW_EVERY_SAFE_START <= text < _FROM_UNSAFE_STARTS or any(
        separator in text for separator in _SEPARATORS
    ):
        prefix = "'" if _LEADING_RE.match(text) else ""
        return prefix + _AFTER_SEPARATOR_RE.sub(r"\1'", text)
    return text


def neutralize_sql(column: ColumnElement[str], dialect: str) -> ColumnElement[str]:
    """neutralize() as a PostgreSQL, MariaDB or SQLite expression, so that the server writes the
    cells Python would. PostgreSQL and MariaDB run the same regular expression; SQLite has none
    built in, so it calls neutralize() itself (registered by orders/exports/stream.py) for the rows the guard
    lets through, which for real names are almost none."""
    # The guard, cheap per row: compared by code point (PostgreSQL "C", MariaDB utf8mb4_nopad_bin,
    # SQLite's BINARY default), and searched for each separator without a regular expression.
    # NO PAD on MariaDB: utf8mb4_bin pads with spaces, so "\xa0\t=1" (a tab sorts below a
    # space) compared below "\xa0" and went out unneutralized (found by random examples).
    binary: ColumnElement[str] = column
    if dialect == "postgresql":
        binary, find = column.collate("C"), func.strpos
    elif dialect == "sqlite":
        find = func.instr
    else:
        binary, find = column.collate("utf8mb4_nopad_bin"), func.instr
    guard = or_(
        binary < literal(_BELOW_EVERY_SAFE_START),
        binary >= literal(_FROM_UNSAFE_STARTS),
        *(find(column, literal(s)) > 0 for s in _SEPARATORS),
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
