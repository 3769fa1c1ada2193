"""A generated matrix: every key type x direction x NULL placement, on every engine, walked
forward and backward (and back from the last page) with page sizes 1 and 3, compared with the
unpaged ORDER BY. Each type's values span its whole range (the extremes it holds, zero, ties,
text that collations fold, bytes with NUL and 0xFF), and a NULL every seventh row.

15 types x 2 directions x 3 placements = 90 sorts per engine (360 on SQLite, PostgreSQL 15 and
18, MariaDB); `test_the_matrix_is_whole` counts them, so a case dropped from it is seen.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import (
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Double,
    Engine,
    Enum,
    Integer,
    Interval,
    LargeBinary,
    Numeric,
    SmallInteger,
    String,
    Time,
    Uuid,
    insert,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Session, mapped_column

from pagination import Keyset

from .databases import ENGINES
from .library import library_engine, unpaged, walk, walk_back


class Base(DeclarativeBase):
    pass


class Colour(enum.Enum):
    red = "r"
    green = "g"
    blue = "b"


UTC = dt.UTC
# name: (column type, values across its range). The engines' own limits: MariaDB's DATETIME and
# DATE start at year 1000; its DATETIME and TIME keep whole seconds unless declared with fsp.
TYPES: dict[str, tuple[Any, list[Any]]] = {
    "integer": (Integer, [-(2**31), -1, 0, 1, 2**31 - 1]),
    "bigint": (BigInteger, [-(2**63), -(2**31) - 1, 0, 2**53 + 1, 2**63 - 1]),
    "smallint": (SmallInteger, [-(2**15), 0, 2**15 - 1]),
    "numeric38": (
        Numeric(38, 18),
        [
            Decimal("-99999999999999999999.999999999999999999"),
            Decimal("0"),
            Decimal("1E-18"),
            Decimal("12345678901234567890.123456789012345678"),
            Decimal("99999999999999999999.999999999999999999"),
        ],
    ),
    "numeric": (
        Numeric(10, 2),
        [Decimal("-99999999.99"), Decimal("-0.01"), Decimal("0"), Decimal("0.10"), Decimal("99999999.99")],
    ),
    "double": (Double, [-1.7976931348623157e308, -1.0, -5e-324, 0.0, 5e-324, 0.1, 1.7976931348623157e308]),
    "string": (String(20), ["", "a", "A", "a ", "b", "é", "E", "\U0001f600", "zz"]),
    "boolean": (Boolean, [False, True]),
    "date": (Date, [dt.date(1000, 1, 1), dt.date(1969, 12, 31), dt.date(1970, 1, 1), dt.date(9999, 12, 31)]),
    "datetime": (
        DateTime(timezone=True),
        [
            dt.datetime(1000, 1, 1, tzinfo=UTC),
            dt.datetime(1970, 1, 1, tzinfo=UTC),
            dt.datetime(2026, 3, 11, 10, 0, 1, tzinfo=UTC),
            dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
        ],
    ),
    "time": (Time, [dt.time(0, 0), dt.time(12, 30, 1), dt.time(23, 59, 59)]),
    "interval": (
        Interval,
        [dt.timedelta(0), dt.timedelta(seconds=1), dt.timedelta(days=1), dt.timedelta(days=400, seconds=5)],
    ),
    "binary": (LargeBinary(16), [b"", b"\x00", b"\x00\x01", b"a", b"\xff" * 16]),
    "uuid": (
        Uuid,
        [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1), uuid.UUID("12345678-1234-5678-1234-567812345678")],
    ),
    "enum": (Enum(Colour, native_enum=False), list(Colour)),
}
ROWS = 24


class Matrix(Base):
    __tablename__ = "lib_matrix"
    id = mapped_column(Integer, primary_key=True, autoincrement=False)


for _name, (_type, _) in TYPES.items():
    setattr(Matrix, _name, mapped_column(_type, nullable=True))


def _value(name: str, i: int) -> Any:
    values = TYPES[name][1]
    return None if i % 7 == 3 else values[(i * 5) % len(values)]  # ties, in no order of id


PLACEMENTS = ["engine", "nulls_first", "nulls_last"]
SORTS = [
    (f"{name}-{way}-{placement}", name, way, placement)
    for name in TYPES
    for way in ("asc", "desc")
    for placement in PLACEMENTS
]


def _sort(name: str, way: str, placement: str) -> Keyset:
    term = getattr(getattr(Matrix, name), way)()
    if placement != "engine":
        term = getattr(term, placement)()
    return Keyset(f"{name}-{way}-{placement}", term, Matrix.id)


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with library_engine(request.param, tmp_path_factory.mktemp("libmatrix"), "libmatrix") as engine:
        Base.metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(insert(Matrix), [{"id": i, **{n: _value(n, i) for n in TYPES}} for i in range(ROWS)])
        yield engine


def test_the_matrix_is_whole():
    assert len(TYPES) == 15 and len(SORTS) == 90


@pytest.mark.parametrize(("case", "name", "way", "placement"), SORTS, ids=[s[0] for s in SORTS])
def test_every_type_direction_and_null_placement_pages_exactly(engine, case, name, way, placement):
    sort = _sort(name, way, placement)
    with Session(engine) as session:
        expected = unpaged(session, select(Matrix), sort)
        assert len(expected) == ROWS
        for limit in (1, 3):
            backward, forward, _ = walk(session, select(Matrix), sort, limit)
            assert backward == [] and forward == expected, f"{case}, limit {limit}"
            assert walk_back(session, select(Matrix), sort, limit) == expected, f"{case}, limit {limit}"
