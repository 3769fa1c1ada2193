"""Column types that behave the same on PostgreSQL, MariaDB/MySQL and SQLite."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, DateTime, Integer, Numeric
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.types import TypeDecorator

UTC = dt.UTC


class UTCDateTime(TypeDecorator[dt.datetime]):
    """An aware UTC timestamp with microseconds on every engine.

    PostgreSQL keeps `timestamptz`; MariaDB gets DATETIME(6) (plain DATETIME drops the
    microseconds that tell tied rows apart); SQLite stores ISO text. Values always come back
    timezone-aware in UTC, and naive values are refused rather than guessed.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.TIMESTAMP(timezone=True))
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: give created_at with a timezone")
        value = value.astimezone(UTC)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None or value.tzinfo is UTC:  # PostgreSQL sessions run in UTC (db.py)
            return value
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @property
    def python_type(self) -> type:
        return dt.datetime


class Money(TypeDecorator[Decimal]):
    """NUMERIC(12, 2), exact everywhere: SQLite has no decimal type, so it stores integer cents."""

    impl = Numeric(12, 2)
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(Integer())
        return dialect.type_descriptor(Numeric(12, 2))

    def process_bind_param(self, value: Decimal | None, dialect: Any) -> Any:
        if value is None:
            return None
        value = Decimal(value).quantize(Decimal("0.01"))
        return int(value * 100) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Any) -> Decimal | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return (Decimal(int(value)) / 100).quantize(Decimal("0.01"))
        return Decimal(value)  # NUMERIC(12, 2) already comes back as a Decimal with two places

    @property
    def python_type(self) -> type:
        return Decimal


# A 64-bit identity key; SQLite only auto-increments a column declared exactly INTEGER.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def iso_utc(value: dt.datetime) -> str:
    """A timestamp as the API and the CSV show it: ISO 8601 in UTC, microseconds, a Z."""
    # isoformat is C code, several times faster than strftime: it matters in an export.
    if value.tzinfo is not dt.UTC:
        value = value.astimezone(dt.UTC)
    return value.isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"
