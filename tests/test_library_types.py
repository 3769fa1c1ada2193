"""Key types beyond the statement tests' table: `Interval`, `LargeBinary` and `Time` keys page
exactly like the unpaged query on every engine (walked both ways, limit 1 to 3), with ties."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, Integer, Interval, LargeBinary, Time, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pagination import Keyset

from .databases import ENGINES
from .library import library_engine, unpaged, walk, walk_back


class Base(DeclarativeBase):
    pass


class Span(Base):
    __tablename__ = "lib_spans"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    length: Mapped[dt.timedelta] = mapped_column(Interval)
    blob: Mapped[bytes] = mapped_column(LargeBinary(64))
    clock: Mapped[dt.time] = mapped_column(Time)


LENGTHS = [
    dt.timedelta(days=1),
    dt.timedelta(hours=24),
    dt.timedelta(seconds=90),
    dt.timedelta(0),
    dt.timedelta(days=400),
]
BLOBS = [b"", b"\x00", b"\x00\x01", b"\xff", b"abc", b"ab"]
CLOCKS = [dt.time(0, 0), dt.time(23, 59, 59), dt.time(12, 30), dt.time(12, 30, 1)]
ROWS = [
    {"id": i, "length": LENGTHS[i % 5], "blob": BLOBS[i % 6], "clock": CLOCKS[i % 4]} for i in range(1, 31)
]


@pytest.fixture(scope="module", params=ENGINES)
def spans(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    kind, tmp = request.param, tmp_path_factory.mktemp("libtypes")
    with library_engine(kind, tmp, "libtypes", Base.metadata, {Span: ROWS}) as engine:
        yield engine


SORTS = [
    Keyset("length", Span.length.desc(), Span.id),
    Keyset("blob", Span.blob, Span.id.desc()),
    Keyset("clock", Span.clock, Span.length, Span.id),
]


@pytest.mark.parametrize("sort", SORTS, ids=[s.name for s in SORTS])
@pytest.mark.parametrize("limit", [1, 3])
def test_interval_binary_and_time_keys_page_like_the_unpaged_query(spans, sort, limit):
    with Session(spans) as session:
        expected = unpaged(session, select(Span), sort)
        assert len(expected) == len(ROWS)
        backward, forward, _ = walk(session, select(Span), sort, limit)
        assert backward == [] and forward == expected
        assert walk_back(session, select(Span), sort, limit) == expected
