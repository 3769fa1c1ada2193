"""Exact for every value a database can hold (issue 55): no walk can loop, no row is lost, a
cursor the library made is never refused as the client's, what cannot be paged is a KeysetError
naming the term before any SQL, and a cursor opens only the sort it was made for.

Each case runs on every engine it applies to; `test_library_matrix.py` generates the column
types x directions x NULL placements.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from collections.abc import Iterator
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

import pytest
from sqlalchemy import (
    JSON,
    Double,
    Engine,
    ForeignKey,
    Integer,
    Interval,
    Numeric,
    String,
    extract,
    func,
    insert,
    select,
    text,
    type_coerce,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, joinedload, mapped_column, relationship
from sqlalchemy.types import DateTime, TypeDecorator

from pagination import (
    CursorMismatch,
    Keyset,
    KeysetError,
    Position,
    iterate,
    iterate_ranges,
    paginate,
    start_at,
)

from .databases import ENGINES, POSTGRESQL
from .library import CODEC, library_engine, statements_of, unpaged, walk, walk_back


class Base(DeclarativeBase):
    pass


class Stamp(Base):
    __tablename__ = "lib_exact_stamps"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    ts: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    frac: Mapped[Decimal] = mapped_column(Numeric(12, 3))


T0 = dt.datetime(2026, 3, 11, 10, 0, tzinfo=dt.UTC)
# 40 rows, fractional seconds, four to a second: extract('epoch') ties on the whole second only.
STAMPS = [
    {"id": i, "ts": T0 + dt.timedelta(seconds=i // 4, microseconds=250_000 * (i % 4)), "frac": Decimal(i) / 4}
    for i in range(40)
]


class Floored(TypeDecorator[float]):
    """A bind type that rounds a key value down: the seek compares another value than the row
    holds (what psycopg's ``::INTEGER`` did to a fractional ``extract('epoch')``)."""

    impl = Double
    cache_ok = True
    rounding = ROUND_FLOOR

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return None if value is None else float(Decimal(value).to_integral_value(self.rounding))


class Ceiled(Floored):
    """Rounding up: reading descending, the rounded key lies before its own row again."""

    cache_ok = True
    rounding = ROUND_CEILING


class Author(Base):
    __tablename__ = "lib_exact_authors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(20))
    books: Mapped[list[Book]] = relationship(back_populates="author", order_by="Book.id")


class Book(Base):
    __tablename__ = "lib_exact_books"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    author_id: Mapped[int] = mapped_column(ForeignKey("lib_exact_authors.id"))
    a: Mapped[int] = mapped_column(Integer)
    b: Mapped[int] = mapped_column(Integer)
    author: Mapped[Author] = relationship(back_populates="books")


class Wide(Base):
    """Values at the edge of what their columns hold."""

    __tablename__ = "lib_exact_wide"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    n38: Mapped[Decimal] = mapped_column(Numeric(38, 18))
    n20: Mapped[Decimal] = mapped_column(Numeric(20, 2))
    data: Mapped[Any] = mapped_column(JSON)


class Odd(Base):
    """PostgreSQL's own values: NUMERIC NaN and Infinity, intervals of months and years."""

    __tablename__ = "lib_exact_odd"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    num: Mapped[Decimal] = mapped_column(Numeric)
    span: Mapped[dt.timedelta] = mapped_column(Interval)
    double: Mapped[float] = mapped_column(Double)


# Twelve authors, four of them without books: an inner join drops those.
AUTHORS = [{"id": i, "name": f"author{i % 5}"} for i in range(12)]
BOOKS = [{"id": i, "author_id": (i * 5) % 8, "a": i % 5, "b": (i * 3) % 7} for i in range(20)]
# NUMERIC(38, 18) near its top (38 digits: Python's default context holds 28) and NUMERIC(20, 2)
# near 10^18, ties among them, both signs.
WIDE = [
    {
        "id": i,
        "n38": Decimal(f"{'-' if i % 4 == 3 else ''}99999999999999999999.{999999999999999999 - i // 2:018d}"),
        # Whole values are INTEGERs in SQLite's file, the others floats.
        "n20": Decimal(
            f"{'-' if i % 4 == 3 else ''}99999999999999{9999 - i // 2}.{i % 3 * 5 if i % 2 else 0:02d}"
        ),
        "data": {"k": i},
    }
    for i in range(14)
]
ODD_NUMS = ["NaN", "Infinity", "-Infinity", "0", "1.5", "-1e30", "1e30", "NaN", "Infinity"]
ODD_SPANS = ["1 year", "362 days", "1 mon", "30 days", "31 days", "1 year 1 day", "11 mons", "2 days", "0"]


def _sqlite_text(value: Decimal) -> str:
    """A NUMERIC as SQLite reads it exactly: a whole value without ".00" (which it reads as a
    float first and rounds: 999999999999999998.00 becomes 10^18)."""
    return str(int(value)) if value == value.to_integral_value() else str(value)


def _fill(engine: Engine) -> None:
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(Stamp), STAMPS)
        conn.execute(insert(Author), AUTHORS)
        conn.execute(insert(Book), BOOKS)
        conn.execute(insert(Wide), WIDE)
        if engine.dialect.name == "sqlite":  # as SQLite holds them, not through Python's floats
            exact = text("UPDATE lib_exact_wide SET n20 = CAST(:n20 AS NUMERIC) WHERE id = :id")
            conn.execute(exact, [{"id": w["id"], "n20": _sqlite_text(w["n20"])} for w in WIDE])
        if engine.dialect.name == "postgresql":
            for i, (num, span) in enumerate(zip(ODD_NUMS, ODD_SPANS, strict=True)):
                conn.execute(
                    text(
                        "INSERT INTO lib_exact_odd VALUES "
                        "(:i, CAST(:n AS NUMERIC), CAST(:s AS INTERVAL), CAST(:n AS DOUBLE PRECISION))"
                    ),
                    {"i": i, "n": num, "s": span},
                )


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with library_engine(request.param, tmp_path_factory.mktemp("libexact"), "libexact") as engine:
        _fill(engine)
        yield engine


@pytest.fixture(scope="module", params=POSTGRESQL)
def postgresql(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with library_engine(request.param, tmp_path_factory.mktemp("libexactpg"), "libexactpg") as engine:
        _fill(engine)
        yield engine


def _exact(session: Session, stmt: Any, sort: Keyset, limit: int) -> None:
    expected = unpaged(session, stmt, sort)
    backward, forward, _ = walk(session, stmt, sort, limit)
    assert backward == [] and forward == expected
    assert walk_back(session, stmt, sort, limit) == expected


@pytest.mark.parametrize("way", ["asc", "desc"])
def test_extract_epoch_of_a_fractional_timestamp_walks_exactly(postgresql, way):
    """SQLAlchemy types extract() as Integer; PostgreSQL 14+ returns a fractional NUMERIC. Bound
    as ``::INTEGER`` the key was rounded and the walk repeated the same rows without end.
    (PostgreSQL's: SQLite has no EXTRACT, MariaDB no epoch.)"""
    engine = postgresql
    sort = Keyset("epoch", getattr(extract("epoch", Stamp.ts), way)(), Stamp.id)
    with Session(engine) as session:
        for limit in (1, 3, 7):
            _exact(session, select(Stamp), sort, limit)
        assert [b.items for b in iterate(session, select(Stamp.id), sort, batch_size=3)]
        ranges = list(iterate_ranges(session, select(Stamp.id), sort, batch_size=3))
        assert sum(r.rows for r in ranges) == len(STAMPS)


@pytest.mark.parametrize("way", ["asc", "desc"])
def test_a_term_typed_integer_holding_fractions_walks_exactly(engine, way):
    """``frac`` typed as Integer (SQLAlchemy's guess for much arithmetic): the key values are
    bound as what the engine returned (a Decimal, a float), not as an INTEGER."""
    term = type_coerce(Stamp.frac, Integer)
    sort = Keyset("frac", getattr(term, way)(), Stamp.id)
    with Session(engine) as session:
        for limit in (1, 3):
            _exact(session, select(Stamp), sort, limit)


@pytest.mark.parametrize("way", ["asc", "desc"])
def test_a_walk_that_cannot_advance_is_a_keyset_error_not_an_endless_loop(engine, way):
    """A term whose key values the bind rounds toward the rows already read (down ascending,
    up descending): the page after a row begins at that row again. Each read is checked to
    begin strictly past its cursor. (Rounded the other way a bind skips rows instead, which no
    check of the rows read can see: hence key values bound as the engine returned them.)"""
    term = type_coerce(Stamp.frac, Floored() if way == "asc" else Ceiled())
    sort = Keyset("floored", getattr(term, way)(), Stamp.id)
    stmt = select(Stamp)
    with Session(engine) as session:
        pages = 0
        with pytest.raises(KeysetError, match="cannot advance") as refusal:
            page = paginate(session, stmt, sort, limit=3, codec=CODEC)
            while page.has_more and pages < 100:
                page = paginate(session, stmt, sort, limit=3, codec=CODEC, after=page.next_cursor)
                pages += 1
            while page.has_previous and pages < 200:
                page = paginate(session, stmt, sort, limit=3, codec=CODEC, before=page.prev_cursor)
                pages += 1
        assert pages < 100, "walked on past the table"
        assert "frac" in str(refusal.value)
        with pytest.raises(KeysetError, match="cannot advance"):
            for _ in iterate(session, stmt, sort, batch_size=3):
                pass


class Other(Base):
    """Another table with the same column names: its "default" sort is another sort."""

    __tablename__ = "lib_exact_others"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    frac: Mapped[Decimal] = mapped_column(Numeric(12, 3))


def _legacy_cursor(position: Position) -> str:
    """A cursor sealed as before cursors carried their sort's terms (five elements): what only
    the server can do, so with the codec's own cipher (version byte 2, a nonce, the sealed text)."""
    keys = [
        part for v in position.keys for part in (("d", str(v)) if isinstance(v, Decimal) else ("i", str(v)))
    ]
    plain = json.dumps([position.sort, "a", position.filters, keys, {}]).encode()
    header, nonce = bytes([2]), os.urandom(12)
    sealed = header + nonce + CODEC._sealer.encrypt(nonce, plain, header)
    return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode()


def test_a_cursor_opens_only_the_sort_it_was_made_for(engine):
    """Sorts named alike per resource ("default"): the cursor carries a fingerprint of the terms,
    their directions and NULL placements, so another sort of the same name refuses it."""
    made = Keyset("default", Stamp.frac, Stamp.id)
    others = [
        Keyset("default", Other.frac, Other.id),
        Keyset("default", Stamp.frac.desc(), Stamp.id),
        Keyset("default", Stamp.frac.nulls_last(), Stamp.id),
        Keyset("default", Stamp.frac, Stamp.id.desc()),
        Keyset("default", Stamp.ts, Stamp.id),
    ]
    with Session(engine) as session:
        cursor = paginate(session, select(Stamp), made, limit=3, codec=CODEC).next_cursor
        assert cursor is not None
        same = Keyset("default", Stamp.frac, Stamp.id)  # built anew per request: the same sort
        assert len(paginate(session, select(Stamp), same, limit=3, codec=CODEC, after=cursor).items) == 3
        for other in others:
            stmt = select(Other) if other.columns[0].expr.table is Other.__table__ else select(Stamp)
            with pytest.raises(CursorMismatch, match="another sort named 'default'"):
                paginate(session, stmt, other, limit=3, codec=CODEC, after=cursor)
        # A cursor sealed before this (no terms): refused as the client's, never a 500.
        old = _legacy_cursor(CODEC.decode(cursor))
        assert CODEC.decode(old).terms == ""
        with pytest.raises(CursorMismatch, match="earlier version"):
            paginate(session, select(Stamp), made, limit=3, codec=CODEC, after=old)


def test_a_sort_over_copies_of_its_columns_opens_its_cursors(engine):
    """Keyset.over: the same order read from copies of its columns (the app's words table) is the
    same sort to a cursor, both ways, so a walk may move between the two as the data decides;
    a copy ordered otherwise is refused when it is declared, not when a cursor meets it."""
    made = Keyset("default", Stamp.frac, Stamp.id)
    copied = made.over(Other.frac, Other.id)
    assert copied.terms == made.terms and copied.name == made.name
    with Session(engine) as session:
        # The copy: the stamps' (id, frac), as a words table keeps its orders' sorted columns.
        session.execute(insert(Other), [{"id": s["id"], "frac": s["frac"]} for s in STAMPS])
        first = paginate(session, select(Stamp), made, limit=3, codec=CODEC)
        then = paginate(session, select(Other), copied, limit=3, codec=CODEC, after=first.next_cursor)
        back = paginate(session, select(Stamp), made, limit=3, codec=CODEC, after=then.next_cursor)
        assert [r.id for page in (first, then, back) for r in page.items] == list(range(9))
        session.rollback()
    for shape in ((Other.frac.desc(), Other.id), (Other.frac.nulls_first(), Other.id), (Other.frac,)):
        with pytest.raises(KeysetError, match="one term per term"):
            made.over(*shape)


def _refused(engine: Engine, stmt: Any, sort: Keyset, *words: str) -> str:
    """The KeysetError paging `stmt` by `sort` raises, before any SQL runs: one or two sentences."""
    found: list[str] = []

    def run() -> None:
        with Session(engine) as session, pytest.raises(KeysetError) as refusal:
            paginate(session, stmt, sort, limit=3, codec=CODEC)
        found.append(str(refusal.value).split("\nSQL: ")[0])

    assert statements_of(engine, run) == [], "SQL ran before the refusal"
    message = found[0]
    for word in words:
        assert word in message, message
    assert message.count(". ") <= 1 and len(message) <= 400, message
    return message


def test_scalar_max_and_min_are_refused_naming_the_term(engine):
    """SQLite's max(a, b) is scalar (taken for an aggregate, the seek went into HAVING: an
    OperationalError); PostgreSQL and MariaDB have no such function."""
    for scalar in (func.max(Book.a, Book.b), func.min(Book.a, Book.b, 3)):
        _refused(engine, select(Book), Keyset("scalar", scalar, Book.id), "lib_exact_books.a", "scalar")


def test_a_term_of_a_table_the_statement_does_not_read_is_refused(engine):
    _refused(engine, select(Book.id), Keyset("outside", Author.name, Book.id), "lib_exact_authors")
    inner = select(Book).subquery()
    _refused(engine, select(inner), Keyset("outside", Book.a, inner.c.id), "lib_exact_books")


def test_a_json_term_is_refused(engine):
    """PostgreSQL's json has no ordering operator at all (the driver's error before)."""
    _refused(engine, select(Wide), Keyset("json", Wide.data, Wide.id), "data", "JSON")
    _refused(engine, select(Wide), Keyset("json", Wide.data["k"], Wide.id), "JSON")


def test_a_relationship_is_refused_as_a_term_where_the_sort_is_made():
    with pytest.raises(KeysetError, match=r"Book\.author is a relationship, not a column"):
        Keyset("owner", Book.author, Book.id)


def test_an_inner_joined_eager_collection_is_refused_and_without_it_pages_exactly(engine):
    """joinedload(innerjoin=True): the parents limited in a subquery, the collection inner-joined
    outside it: a page holding an author without books came back short (2 of 12 authors)."""
    inner = select(Author).options(joinedload(Author.books, innerjoin=True))
    sort = Keyset("authors", Author.name, Author.id)
    _refused(engine, inner, sort, "Author.books", "innerjoin=True")
    # What the refusal says to write instead: the same rows, paged exactly.
    filtered = select(Author).where(Author.books.any()).options(joinedload(Author.books))
    with Session(engine) as session:
        for limit in (1, 3):
            _exact(session, filtered, sort, limit)
        assert len(unpaged(session, filtered, sort)) == len({b["author_id"] for b in BOOKS})


def test_the_non_unique_refusal_is_two_sentences(engine):
    _refused(engine, select(Book), Keyset("loose", Book.a), "not unique", "lib_exact_books")


@pytest.mark.parametrize("term", ["n38", "n20"])
@pytest.mark.parametrize("way", ["asc", "desc"])
def test_numeric_at_the_edge_of_its_precision_walks_exactly(engine, term, way):
    """NUMERIC(38, 18) near 10^20 (abs() in Python's 28-digit context made it 1E+20, out of its
    own range: InvalidCursor) and NUMERIC(20, 2) near 10^18 (on SQLite read through a float)."""
    sort = Keyset(term, getattr(getattr(Wide, term), way)(), Wide.id)
    with Session(engine) as session:
        for limit in (1, 4):
            _exact(session, select(Wide), sort, limit)


@pytest.mark.parametrize("way", ["asc", "desc"])
def test_numeric_nan_and_infinity_walk_exactly(postgresql, way):
    """PostgreSQL's NUMERIC NaN (above every number) and +-Infinity: sealed, then refused as a
    malformed cursor before; and double precision's."""
    with Session(postgresql) as session:
        for term in (Odd.num, Odd.double):  # NaN ties with NaN: a float NaN is not even itself
            sort = Keyset("odd", getattr(term, way)(), Odd.id)
            for limit in (1, 2, 4):
                _exact(session, select(Odd), sort, limit)


@pytest.mark.parametrize("way", ["asc", "desc"])
def test_intervals_of_months_and_years_walk_exactly(postgresql, way):
    """'1 year' is 365 days to psycopg and 360 to PostgreSQL's comparison: bound back as 365
    days the seek skipped '362 days' (6 of 12 rows lost before). The key is read as PostgreSQL's
    text and cast back in the seek; iterate_ranges orders its probe as intervals too."""
    sort = Keyset("span", getattr(Odd.span, way)(), Odd.id)
    with Session(postgresql) as session:
        for limit in (1, 2, 4):
            _exact(session, select(Odd), sort, limit)
            _exact(session, select(Odd.id, Odd.span), sort, limit)
        expected = [r.id for r in session.execute(select(Odd).order_by(*sort.order_by())).scalars()]
        ranges = list(iterate_ranges(session, select(Odd.id), sort, batch_size=2))
        assert [i for r in ranges for i in session.execute(r.statement, r.params).scalars()] == expected
        at = start_at(sort, [dt.timedelta(days=360)], codec=CODEC)
        page = paginate(session, select(Odd), sort, limit=20, codec=CODEC, after=at)
        past = ">=" if way == "asc" else "<="
        check = text(f"SELECT CAST(:s AS INTERVAL) {past} interval '360 days'")
        within = {i for i, span in enumerate(ODD_SPANS) if session.execute(check, {"s": span}).scalar()}
        assert {o.id for o in page.items} == within
