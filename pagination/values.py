"""Key values between rows, cursors and the database: normalizing, checking, engine quirks.

A cursor holds plain values (see cursor.py). What a row gives back is not always one, nor what
the column compares as:
- SQLite and MariaDB return naive datetimes for ``DateTime(timezone=True)``: they are UTC.
- A column of a Python ``Enum`` class gives members: the cursor holds the member's name and
  gets the member back from the column's type.
- Any other Python type reaches a cursor through ``CursorCodec(types=...)`` (see cursor.py).
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    BigInteger,
    Double,
    Enum,
    Float,
    Integer,
    Interval,
    Numeric,
    String,
    Text,
    cast,
)
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.types import TypeDecorator, UserDefinedType

_PLAIN = (
    bool,
    int,
    Decimal,
    str,
    dt.datetime,
    dt.date,
    dt.time,
    dt.timedelta,
    float,
    bytes,
    uuid.UUID,
    enum.Enum,
)


def _impl(type_: Any) -> Any:
    return type_.impl_instance if isinstance(type_, TypeDecorator) else type_


def _python_type(type_: Any) -> type | None:
    try:
        found = type_.python_type
    except NotImplementedError:
        return None
    return found if isinstance(found, type) else None


def to_cursor(type_: Any, value: Any) -> Any:
    """The value a row gave for a key, as a cursor holds it."""
    if isinstance(value, dt.datetime) and value.tzinfo is None and getattr(_impl(type_), "timezone", False):
        # The engine dropped the offset of a value it stored in UTC (SQLite, MariaDB).
        return value.replace(tzinfo=dt.UTC)
    if isinstance(value, enum.Enum) and _python_type(type_) is type(value):
        return value.name
    return value


def from_cursor(type_: Any, value: Any) -> Any:
    """A cursor's value as the column's Python type (a no-op but for enum classes)."""
    cls = _python_type(type_)
    if (
        isinstance(cls, type)
        and issubclass(cls, enum.Enum)
        and isinstance(value, str)
        and not isinstance(value, cls)
    ):
        return cls.__members__.get(value, value)  # an unknown name stays text: misfit() refuses it
    return value


def is_number(type_: Any) -> bool:
    return isinstance(_impl(type_), (Integer, Numeric))


def loose_number(type_: Any, value: Any) -> Any:
    """A number for a computed numeric term (SUM, AVG, arithmetic), whose Python type is what
    the engine returns rather than what SQLAlchemy's type says (MariaDB's SUM of an Integer is
    a Decimal, SQLite's AVG a float): the value as it is, an integral one as an int for an
    Integer-typed term (every driver binds an int)."""
    if not (isinstance(value, (Decimal, float)) and isinstance(_impl(type_), Integer)):
        return value
    integral = value == value.to_integral_value() if isinstance(value, Decimal) else value.is_integer()
    return int(value) if integral else value


# The types a key value of an Integer-typed term is bound as when the engine returned another
# kind of number for it (see bound_kind).
BOUND_KINDS: dict[str, Any] = {"numeric": Numeric(), "double": Double()}


class SqliteNumber(UserDefinedType[Decimal]):
    """A NUMERIC key on SQLite as the file holds it. SQLite keeps a NUMERIC value as a 64-bit
    integer or an 8-byte float, and SQLAlchemy reads both through a float (``"%.2f" % value``):
    10^18 + 1 came back as 10^18, two rows shared a key and the walk repeated one. Read raw, an
    integer is exact and a float is its shortest exact decimal; bound back, each is again the
    integer or the float the row holds, so the seek compares the row's own value."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "NUMERIC"

    def bind_processor(self, dialect: Any) -> Any:
        def process(value: Any) -> Any:
            if not isinstance(value, Decimal) or not value.is_finite():
                return value
            if value == value.to_integral_value() and -(2**63) <= value < 2**63:
                return int(value)
            return float(value)

        return process

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        def process(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return value
            return Decimal(value) if isinstance(value, int) else Decimal(repr(value))

        return process


class IntervalText(TypeDecorator[str]):
    """An ``interval`` key on PostgreSQL as PostgreSQL writes it. psycopg reads an interval of
    months or years as days (1 year: 365 days), while PostgreSQL compares a month as 30 days
    (1 year: 360): a cursor bound back as 365 days skipped every row between. Read as text and
    cast back in the seek, the key is the database's own value, compared by the database."""

    impl = Text
    cache_ok = True

    def column_expression(self, column: Any) -> Any:
        return cast(column, Text)

    def bind_expression(self, bindvalue: Any) -> Any:
        return cast(bindvalue, INTERVAL)

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        if isinstance(value, dt.timedelta):  # a position given with start_at()
            return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
        return value

    @staticmethod
    def ordered(column: Any) -> Any:
        """A read's column of it, ordered as an interval again (not as text)."""
        return cast(column, INTERVAL)


def _is_interval(type_: Any) -> bool:
    # sqlalchemy.Interval is a TypeDecorator over DateTime; PostgreSQL's INTERVAL is its own.
    return isinstance(type_, (Interval, INTERVAL)) or isinstance(_impl(type_), (Interval, INTERVAL))


def carrier(type_: Any, dialect: Any) -> Any:
    """The type a key of this column type is read and bound as on this engine, when a driver
    would carry it inexactly (None: the column's own type)."""
    impl = type_.load_dialect_impl(dialect) if isinstance(type_, TypeDecorator) else type_
    if dialect.name == "sqlite" and isinstance(impl, Numeric) and not isinstance(impl, Float):
        return SqliteNumber()
    if dialect.name == "postgresql" and _is_interval(type_):
        return IntervalText()
    return None


def bound_kind(type_: Any, value: Any) -> str | None:
    """The kind of number to bind a key value as when it is not what the term's type says (None:
    the term's own type). SQLAlchemy types ``extract()``, ``date_part()`` and arithmetic over
    integers as Integer, but PostgreSQL 14+ returns a fractional NUMERIC for ``extract('epoch',
    ts)``, and an engine may return a value beyond a 32-bit integer: bound as the term's type
    (psycopg casts it ``::INTEGER``) the key would be rounded or overflow, and the seek would
    compare another value than the row's. Bound as the kind the row held, it compares exactly."""
    if isinstance(value, bool) or not isinstance(_impl(type_), Integer):
        return None
    if isinstance(value, Decimal):
        return "numeric"
    if isinstance(value, float):
        return "double"
    if isinstance(value, int):
        bits = 63 if isinstance(_impl(type_), BigInteger) else 31
        return None if -(2**bits) <= value < 2**bits else "numeric"
    return None


def misfit(type_: Any, value: Any, *, computed: bool = False, sealed: bool = False) -> str | None:
    """Why `value` could not be a value of a column of `type_` (None when it could). Refuses,
    before the database sees it, a key the column cannot hold (it would fail while binding,
    or overflow in the server). A `computed` numeric term (an aggregate, arithmetic) takes any
    finite number: its values are of the engine's type, not the column's. A `sealed` value
    (from a cursor the server made from a row) may also be PostgreSQL's NUMERIC NaN or
    Infinity; a value a caller gives (start_at) may not: no other engine holds them."""
    impl = _impl(type_)
    expected = _python_type(type_)
    if value is None:
        return None  # whether the term may be NULL is the sort's to say (Keyset.accept)
    if (
        computed
        and is_number(type_)
        and isinstance(value, (int, Decimal, float))
        and not isinstance(value, bool)
    ):
        finite = (
            value.is_finite() if isinstance(value, Decimal) else value == value and abs(value) != float("inf")
        )
        return None if finite or sealed else "not a finite number"
    if sealed and _is_interval(type_) and isinstance(value, str):
        return None  # PostgreSQL's own text of it (IntervalText)
    if expected is None or not isinstance(value, _PLAIN):
        return None  # a type taught to the codec (CursorCodec(types=...)) is trusted
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        return f"a {type(value).__name__}, where a {expected.__name__} is needed"
    if (
        isinstance(value, (dt.datetime, dt.time))
        and getattr(impl, "timezone", False)
        and value.tzinfo is None
    ):
        return "a time without a timezone, for a timezone-aware column"
    if isinstance(impl, Integer) and isinstance(value, int):
        bits = 63 if isinstance(impl, BigInteger) else 31
        if not -(2**bits) <= value < 2**bits:
            return f"out of range for a {bits + 1}-bit integer"
    if isinstance(impl, Numeric) and not isinstance(impl, Float) and isinstance(value, Decimal):
        if sealed:  # the row's own value: SQLite does not hold a NUMERIC to its declared range
            return None
        if not value.is_finite():
            return "not a finite number"
        # copy_abs(), not abs(): abs() rounds to the context's 28 digits, and NUMERIC(38, 18)
        # holds 38 (99999999999999999999.99... became 1E+20, out of its own range).
        if impl.precision is not None and value.copy_abs() >= Decimal(10) ** (
            impl.precision - (impl.scale or 0)
        ):
            return f"out of range for NUMERIC({impl.precision}, {impl.scale or 0})"
    if isinstance(impl, String) and isinstance(value, str):
        # No engine keeps NUL in text (PostgreSQL refuses it outright), so no row has one.
        if "\x00" in value:
            return "text with a NUL character"
        if impl.length is not None and len(value) > impl.length:
            return f"longer than {impl.length} characters"
    return None


def dialect_problem(type_: Any, dialect: Any) -> str | None:
    """Why keys of this type would page wrongly on this engine (None when they do not)."""
    impl = type_.load_dialect_impl(dialect) if isinstance(type_, TypeDecorator) else type_
    name = dialect.name
    if isinstance(impl, JSON):
        return (
            "is JSON, which has no order that is the same on every engine (nor any on some): sort by a "
            "typed value of it instead, e.g. column['key'].as_string() or .as_integer()"
        )
    if isinstance(impl, ARRAY):
        return "is an ARRAY: sort by one element of it, e.g. column[1], or by a column of its own"
    if isinstance(impl, Float) and name != "sqlite":
        compiled = impl.compile(dialect=dialect).upper()
        precision = int(compiled[6:-1].split(",")[0]) if compiled.startswith("FLOAT(") else None
        if name == "postgresql":  # FLOAT is double precision there, REAL and FLOAT(1-24) are not
            single = compiled in ("REAL", "FLOAT4") or (precision is not None and precision <= 24)
        else:  # MySQL/MariaDB: FLOAT and FLOAT(1-24) are 4 bytes, DOUBLE and REAL 8
            single = compiled.startswith("FLOAT") and (precision is None or precision <= 24)
        if single:
            return (
                f"is {compiled}, a 4-byte float on {name}: the driver returns it rounded, so a "
                "cursor's value never equals its own row's and pages repeat or skip rows; declare "
                "it Double (8 bytes) or Numeric to sort by it"
            )
    if isinstance(impl, Enum) and impl.native_enum and name in ("mysql", "mariadb"):
        declared = list(impl.enums)
        if declared != sorted(declared) or declared != sorted(declared, key=str.casefold):
            return (
                f"is a native ENUM declared out of alphabetical order ({', '.join(declared)}): MariaDB "
                "and MySQL sort it by declared position but compare it with text, so pages would "
                "skip rows; declare the values in alphabetical order or use Enum(native_enum=False)"
            )
    return None
