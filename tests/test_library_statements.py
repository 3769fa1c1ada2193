"""The library beyond the app's Order model, on SQLite, PostgreSQL and MariaDB.

Its own tables (own MetaData, created in the throwaway databases) and statements of the kinds
a SQLAlchemy user writes: ORM and Core, joins (outer ones too), eager-loaded collections,
expressions and labels, composite and UniqueConstraint keys, aggregates, enums, aware times,
doubles, long text, a Connection and Session(binds=...). Three invariants, by Hypothesis:
1. for a statement it accepts, forward and backward walks, a jump by start_at() and iterate()
   return exactly the unpaged rows, in order, once each, in the unpaged rows' shape;
2. every cursor it returns, it accepts;
3. what it cannot page it refuses up front: KeysetError with the SQL and what to do.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import (
    Double,
    Engine,
    Enum,
    Float,
    ForeignKey,
    Integer,
    String,
    Time,
    UniqueConstraint,
    delete,
    func,
    literal,
    select,
    union,
    union_all,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.ext.hybrid import hybrid_property
from sqlalchemy.orm import (
    Bundle,
    DeclarativeBase,
    Mapped,
    Session,
    aliased,
    column_property,
    joinedload,
    mapped_column,
    relationship,
    selectinload,
)
from sqlalchemy.types import DateTime

from pagination import (
    AFTER,
    CursorCodec,
    Keyset,
    KeysetError,
    PaginationError,
    SeekForm,
    iterate,
    keyset_select,
    paginate,
    start_at,
)

from .databases import ENGINES
from .hunt import examples
from .library import CODEC, library_engine, shape, statements_of, unpaged, walk

UTC = dt.UTC


class Colour(enum.Enum):  # declared out of alphabetical order on purpose
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Size(enum.StrEnum):
    S = "s"
    M = "m"
    L = "l"


class Base(DeclarativeBase):
    pass


class Author(Base):
    __tablename__ = "lib_authors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(255))
    born: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    score: Mapped[float] = mapped_column(Double)
    size: Mapped[Size] = mapped_column(Enum(Size, native_enum=False, length=8))
    colour: Mapped[Colour] = mapped_column(Enum(Colour, name="lib_colour"))
    mood: Mapped[str] = mapped_column(Enum("calm", "glad", "sad", name="lib_mood"))
    weight: Mapped[float | None] = mapped_column(Float, nullable=True)
    nick: Mapped[str | None] = mapped_column(String(20), nullable=True)
    wake: Mapped[dt.time] = mapped_column(Time, default=dt.time(12, 0))
    books: Mapped[list[Book]] = relationship(back_populates="author", order_by="Book.id")
    # Keys a library user writes on a model, not on a column: SQL computed per row.
    name_length: Mapped[int] = column_property(func.length(name))

    @hybrid_property
    def shout(self) -> str:
        return self.name.upper()

    @shout.inplace.expression
    @classmethod
    def _shout_expression(cls) -> Any:
        return func.upper(cls.name)

    def __repr__(self) -> str:
        return f"<Author {self.id}>"


class Book(Base):
    __tablename__ = "lib_books"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    author_id: Mapped[int] = mapped_column(ForeignKey("lib_authors.id"))
    title: Mapped[str] = mapped_column(String(100))
    author: Mapped[Author] = relationship(back_populates="books")


class Pair(Base):
    __tablename__ = "lib_pairs"
    a: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    b: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    code: Mapped[str] = mapped_column(String(20))
    __table_args__ = (UniqueConstraint("code"),)


@pytest.fixture(scope="module", params=ENGINES)
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    kind, tmp = request.param, tmp_path_factory.mktemp("libstmt")
    with library_engine(kind, tmp, "libstmt", Base.metadata) as engine:
        yield engine


NAMES = ["ana", "Ana", "bia", "caio", "🎉" * 255, "z" * 255, "ção"]
TIMES = [
    dt.datetime(2026, 3, 11, 10, 39, tzinfo=UTC),
    dt.datetime(2026, 3, 11, 10, 39, 0, 1, tzinfo=UTC),
    dt.datetime(2026, 3, 11, 7, 39, tzinfo=dt.timezone(dt.timedelta(hours=-3))),  # = the first
    dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]
SCORES = [0.1, 0.1 + 0.2, -2.5, 1e-300, 3.0, 1 / 3]
author_row = st.fixed_dictionaries(
    {
        "name": st.sampled_from(NAMES),
        "born": st.sampled_from(TIMES),
        "score": st.sampled_from(SCORES),
        "size": st.sampled_from(list(Size)),
        "colour": st.sampled_from(list(Colour)),
        "mood": st.sampled_from(["calm", "glad", "sad"]),
        "nick": st.sampled_from([None, None, "x", "y"]),
        "wake": st.sampled_from([dt.time(7, 30), dt.time(7, 30, 1), dt.time(0, 0), dt.time(23, 59, 59)]),
    }
)
data_sets = st.tuples(
    st.lists(author_row, max_size=14),
    st.lists(st.tuples(st.integers(0, 13), st.sampled_from(["a", "b", "B"])), max_size=16),
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=6, unique=True),
)


def load(engine: Engine, data: Any) -> None:
    authors, books, pairs = data
    with Session(engine) as session:
        for table in (Book, Author, Pair):
            session.execute(delete(table))
        session.add_all(Author(id=i + 1, **row) for i, row in enumerate(authors))
        session.flush()
        session.add_all(
            Book(id=i + 1, author_id=a % len(authors) + 1, title=t)
            for i, (a, t) in enumerate(books)
            if authors
        )
        session.add_all(Pair(a=a, b=b, code=f"c{a}{b}") for a, b in pairs)
        session.commit()


@dataclass(frozen=True)
class Case:
    """A statement and a sort that paging must get exactly right."""

    name: str
    statement: Callable[[], Any]
    sort: Keyset
    engines: tuple[str, ...] = ("sqlite", "postgresql", "mysql")
    seek: SeekForm | None = None  # the seek's form, chosen per call


A1, A2 = aliased(Author, name="a1"), aliased(Author, name="a2")
NAMED = select(Author.id, Author.name).where(Author.id > 2).subquery("named")
NAMED_CTE = select(Author.id, Author.name).cte("named_cte")
TITLES = union(select(Book.id, Book.title), select(Author.id, Author.name)).subquery("titles")
EVERYTHING = union_all(
    select(literal("author").label("kind"), Author.id, Author.name),
    select(literal("book").label("kind"), Book.id, Book.title),
).subquery("everything")
BOOKS_OF = select(func.count(Book.id)).where(Book.author_id == Author.id).scalar_subquery()
REPEATS = union_all(select(Author.id, Author.name), select(Book.id, Book.title)).subquery("repeats")
SIZED = select(Author).where(Author.id > 0).subquery("sized")
NICKED = select(Author.size, Author.nick).cte("nicked")


_SEED = select(Book.id.label("id"), Book.id.label("origin")).where(Book.id <= 3).cte("chain", recursive=True)
CHAIN = _SEED.union_all(select(Book.id, _SEED.c.origin).where(Book.id == _SEED.c.id + 3))
COUNTS = select(CHAIN.c.origin, func.count().label("n")).group_by(CHAIN.c.origin).cte("counts")


def title_key() -> Any:
    return func.coalesce(Book.id, 0)


CASES = [
    Case("core table, text ties", lambda: select(Author.__table__), Keyset("name", Author.name, Author.id)),
    Case("orm, aware time", lambda: select(Author), Keyset("born", Author.born.desc(), Author.id.desc())),
    Case("doubles", lambda: select(Author.id, Author.score), Keyset("score", Author.score, Author.id.desc())),
    Case("str enum", lambda: select(Author), Keyset("size", Author.size.desc(), Author.id)),
    Case(
        "native enum in order", lambda: select(Author.mood, Author.id), Keyset("mood", Author.mood, Author.id)
    ),
    Case(
        "native enum out of order",
        lambda: select(Author),
        Keyset("colour", Author.colour, Author.id),
        engines=("sqlite", "postgresql"),
    ),
    Case(
        "join, two entities",
        lambda: select(Book, Author.name).join(Book.author),
        Keyset("by author", Author.name.desc(), Book.id),
    ),
    Case(
        "outer join, coalesced key",
        lambda: select(Author.id, Book.title).outerjoin(Author.books),
        Keyset("author books", Author.id, title_key()),
    ),
    Case(
        "joinedload collection",
        lambda: select(Author).options(joinedload(Author.books)),
        Keyset("name", Author.name, Author.id),
    ),
    Case(
        "aliased entities, colliding names",
        lambda: select(A1, A2).join_from(A1, A2, A2.id <= A1.id).where(A1.id <= 5),
        Keyset("pairs", A2.name, A1.id.desc(), A2.id),
    ),
    Case("select from a subquery", lambda: select(NAMED), Keyset("named", NAMED.c.name, NAMED.c.id)),
    Case(
        "select from a CTE",
        lambda: select(NAMED_CTE),
        Keyset("named", NAMED_CTE.c.name.desc(), NAMED_CTE.c.id),
    ),
    Case(
        "union as a subquery",
        lambda: select(TITLES),
        Keyset("titles", TITLES.c.title, TITLES.c.id),
    ),
    Case(
        "union all with a branch column",
        lambda: select(EVERYTHING),
        Keyset("everything", EVERYTHING.c.id, EVERYTHING.c.kind.desc()),
    ),
    Case(
        "bundle as the key",
        lambda: select(Bundle("who", Author.name, Author.id)),
        Keyset("who", Bundle("who", Author.name, Author.id)),
    ),
    Case(
        "correlated count, never NULL",
        lambda: select(Author.id, BOOKS_OF.label("n")),
        Keyset("most books", BOOKS_OF.desc(), Author.id),
    ),
    Case(
        "coalesce ending in a NOT NULL column",
        lambda: select(Author),
        Keyset("nick or name", func.coalesce(Author.nick, Author.name), Author.id),
    ),
    Case(
        "nullable expression first, nulls last",
        lambda: select(Author.id, Author.nick),
        Keyset("nick length", (func.length(Author.nick) + Author.id).desc().nulls_last(), Author.id),
    ),
    Case(
        "aggregate over a nullable column, nulls first",
        lambda: (
            select(Author.id, func.max(Book.title).label("last_title"))
            .outerjoin(Author.books)
            .group_by(Author.id)
        ),
        Keyset("last title", func.max(Book.title).nulls_first(), Author.id.desc()),
    ),
    Case("time of day", lambda: select(Author), Keyset("wake", Author.wake.desc(), Author.id)),
    Case("composite primary key", lambda: select(Pair), Keyset("pairs", Pair.a.desc(), Pair.b)),
    Case(
        "bounded seek",
        lambda: select(Author),
        Keyset("born", Author.born.desc(), Author.id.desc()),
        seek="bounded",
    ),
    Case("unique constraint", lambda: select(Pair.code, Pair.a), Keyset("code", Pair.code)),
    Case(
        "expression and label",
        lambda: select(Author.id, func.lower(Author.name).label("who")),
        Keyset("lower", func.lower(Author.name).label("who"), Author.id),
    ),
    Case("hybrid property", lambda: select(Author), Keyset("shout", Author.shout.desc(), Author.id)),
    Case(
        "column property",
        lambda: select(Author.id, Author.name_length),
        Keyset("name length", Author.name_length, Author.id.desc()),
    ),
    Case(
        "distinct", lambda: select(Author.name, Author.id).distinct(), Keyset("name", Author.name, Author.id)
    ),
    Case(  # what the refusal of a DISTINCT with a joinedload() collection advises
        "distinct with a selectin collection",
        lambda: select(Author).options(selectinload(Author.books)).distinct(),
        Keyset("name", Author.name, Author.id),
    ),
    # MariaDB dropped rows of these, ordered by a column and then a selected expression, whatever
    # the LIMIT (pagination/planning.py, `by_item`).
    Case(
        "distinct over a subquery, by an expression",
        lambda: select(SIZED.c.size, func.length(SIZED.c.name)).distinct(),
        Keyset("size, name length", SIZED.c.size, func.length(SIZED.c.name)),
    ),
    Case(
        "distinct over a CTE, by a labelled nullable expression",
        lambda: select(NICKED.c.size, func.length(NICKED.c.nick).label("nick_length")).distinct(),
        Keyset(
            "size, nick length",
            NICKED.c.size.desc(),
            func.length(NICKED.c.nick).label("nick_length").desc(),  # NULLs the engine's way
        ),
    ),
    Case(
        "nullable, nulls last",
        lambda: select(Author),
        Keyset("nick", Author.nick.desc().nulls_last(), Author.id.desc()),
    ),
    Case(
        "nullable, nulls first",
        lambda: select(Author.nick, Author.id),
        Keyset("nick", Author.nick.nulls_first(), Author.id),
    ),
    Case(
        "outer join, nulls last",
        lambda: select(Author.id, Book.title).outerjoin(Author.books),
        Keyset("first book", Book.id.asc().nulls_last(), Author.id),
    ),
    Case(
        "aggregate",
        lambda: select(Author.id, func.count(Book.id).label("n")).outerjoin(Author.books).group_by(Author.id),
        Keyset("most books", func.count(Book.id).desc(), Author.id),
    ),
    # What the engine orders itself: NULLs where its ORDER BY puts them, in any position.
    Case("nullable, the engine's NULL order", lambda: select(Author), Keyset("nick", Author.nick, Author.id)),
    Case(
        "nullable later term, descending",
        lambda: select(Author.id, Author.nick, Author.mood),
        Keyset("mood nick", Author.mood, Author.nick.desc(), Author.id),
    ),
    Case(
        "nullable later term, nulls placed",
        lambda: select(Author.id, Author.nick),
        Keyset("mood nick", Author.mood.desc(), Author.nick.nulls_first(), Author.id.desc()),
    ),
    Case(
        "key on the optional side of an outer join",
        lambda: select(Author.id, Book.title).outerjoin(Author.books),
        Keyset("first book", Author.id, Book.id),
    ),
    Case(
        "optional side first, the engine's NULL order",
        lambda: select(Author.id, Book.title).outerjoin(Author.books),
        Keyset("titles", Book.title.desc(), Book.id, Author.id),
    ),
    Case(
        "group by, grouped columns unique",
        lambda: (
            select(Author.id, Author.name, func.count(Book.id).label("n"))
            .join(Author.books)
            .group_by(Author.id, Author.name)
        ),
        Keyset("report", func.count(Book.id).desc(), Author.id),
    ),
    Case(
        "aggregate keyed with its group",
        lambda: (
            select(Author.id, Author.name, func.count(Book.id).label("n"))
            .join(Author.books)
            .group_by(Author.id, Author.name)
        ),
        Keyset("report", func.count(Book.id).desc(), Author.name.desc(), Author.id),
    ),
    Case(
        "distinct entities over a join to many",
        lambda: select(Author.id, Author.name).join(Author.books).distinct(),
        Keyset("name", Author.name, Author.id),
    ),
    Case(
        "implicit join through WHERE",
        lambda: select(Book).where(Book.author_id == Author.id),
        Keyset("by author", Author.name, Book.id),
    ),
    Case(
        "cross-table expression with the primary key",
        lambda: select(Book.id, Book.title, Author.name).join(Book.author),
        Keyset("who wrote what", (Author.name + Book.title).desc(), Book.id),
    ),
    Case(
        "recursive CTE's counts, joined through WHERE",
        lambda: select(COUNTS.c.n, Book).where(Book.id == COUNTS.c.origin),
        Keyset("longest chains", COUNTS.c.n.desc(), Book.id),
    ),
]


def run_case(engine: Engine, executor_kind: str, case: Case, limit: int, pick: int) -> None:
    stmt, sort, seek = case.statement(), case.sort, case.seek
    with _executor(engine, executor_kind) as executor:
        expected = unpaged(executor, stmt, sort)
        backward, forward, first = walk(executor, stmt, sort, limit, seek=seek)
        assert backward == [] and not first.has_previous
        assert forward == expected

        # Backward from the end, by the last page's prev_cursor, gathers the same rows.
        batches = list(iterate(executor, stmt, sort, batch_size=limit, codec=CODEC, seek=seek))
        assert [shape(i) for b in batches for i in b.items] == expected
        if batches:
            rest = paginate(
                executor, stmt, sort, limit=limit, codec=CODEC, seek=seek, after=batches[-1].cursor
            )
            assert rest.items == [] and rest.has_previous
            back, page = [], rest
            while page.has_previous:
                page = paginate(
                    executor, stmt, sort, limit=limit, codec=CODEC, seek=seek, before=page.prev_cursor
                )
                back = [shape(i) for i in page.items] + back
            assert back == expected

        # A jump to the value of some row's first key term: both ways from there, all rows.
        if expected:
            terms = stmt.with_only_columns(*(t.expr for t in sort.columns), maintain_column_froms=True)
            values = [row[0] for row in executor.execute(terms.order_by(*sort.order_by()))]
            value = values[pick % len(values)]
            if isinstance(value, dt.datetime) and value.tzinfo is None:
                value = value.replace(tzinfo=UTC)  # the engine gave back what it stored as UTC
            cursor = start_at(sort, [value], codec=CODEC)
            backward, forward, first = walk(executor, stmt, sort, limit, seek=seek, after=cursor)
            assert backward + forward == expected
            assert first.has_previous == bool(backward)
            assert forward, "a jump to a value that a row has lands on that row"


class _executor:
    """A Session, a Connection, or a Session bound per mapper (binds=), over the same engine."""

    def __init__(self, engine: Engine, kind: str):
        self.engine, self.kind = engine, kind

    def __enter__(self) -> Any:
        if self.kind == "connection":
            self.resource = self.engine.connect()
        elif self.kind == "binds":
            self.resource = Session(binds={Base: self.engine})
        else:
            self.resource = Session(self.engine)
        return self.resource

    def __exit__(self, *exc: Any) -> None:
        self.resource.close()


PROPERTY = settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@PROPERTY
@given(
    data=data_sets,
    limit=st.integers(1, 5),
    executor=st.sampled_from(["session", "connection", "binds"]),
    pick=st.integers(0, 50),
)
def test_accepted_statements_page_exactly_like_the_unpaged_query(lib, case, data, limit, executor, pick):
    load(lib, data)
    if lib.dialect.name not in case.engines:  # what this engine cannot page is refused up front
        with Session(lib) as session, pytest.raises(KeysetError, match="SQL: SELECT"):
            paginate(session, case.statement(), case.sort, limit=limit, codec=CODEC)
        return
    if executor == "connection" and case.name == "joinedload collection":
        executor = "session"  # eager loading is the ORM's: a Connection returns plain rows
    if executor == "binds" and case.name.startswith("core"):
        executor = "session"  # binds={Base: ...} binds mapped classes; a bare Table has none
    sent = statements_of(lib, lambda: run_case(lib, executor, case, limit, pick))
    if lib.dialect.name == "mysql":  # MariaDB has no NULLS FIRST/LAST: paging never sends it
        assert not [sql for sql, _ in sent if "NULLS " in sql.upper()]


# --- Invariant 3: refused up front, with the SQL and what to do ------------------------------


REFUSALS = [
    ("limit", lambda: select(Author).limit(7), Keyset("n", Author.name, Author.id), "LIMIT/OFFSET"),
    ("offset", lambda: select(Author).offset(5), Keyset("n", Author.name, Author.id), "LIMIT/OFFSET"),
    (
        "union",
        lambda: union_all(select(Author.id), select(Book.id)),
        Keyset("n", Author.id),
        "subquery",
    ),
    # A recursive CTE is paged through a select() from it (COUNTS, a case above, groups one);
    # the CTE itself or its recursive UNION given as the statement is refused, saying so.
    (
        "recursive CTE itself",
        lambda: CHAIN,
        Keyset("chain", CHAIN.c.origin, CHAIN.c.id),
        r"cannot page a recursive CTE \(chain\) itself: page select\(chain\) from it",
    ),
    (
        "recursive union itself",
        lambda: CHAIN.element,
        Keyset("chain", CHAIN.c.origin, CHAIN.c.id),
        r"recursive part of a CTE \(chain\): make it the CTE .* page select\(chain\) from it",
    ),
    (
        "union of a recursive CTE",
        lambda: union(select(CHAIN), select(CHAIN)),
        Keyset("chain", CHAIN.c.origin, CHAIN.c.id),
        r"UNION, INTERSECT or EXCEPT as the statement: select from it as a subquery",
    ),
    (
        "union all, no key",
        lambda: select(REPEATS),
        Keyset("repeats", REPEATS.c.id, REPEATS.c.name),
        "not unique in this statement's rows",
    ),
    (
        "join to many without its key",
        lambda: select(Author, Book.title).join(Author.books),
        Keyset("author", Author.name, Author.id),
        "not unique in this statement's rows",
    ),
    (
        "distinct without the sort's terms",
        lambda: select(Author.name).distinct(),
        Keyset("name", Author.name, Author.id),
        "SELECT DISTINCT does not select",
    ),
    (
        "half a composite key",
        lambda: select(Pair),
        Keyset("pairs", Pair.a),
        "not unique in this statement's rows",
    ),
    (  # was refused as "name reads lib_authors, which the statement does not select from"
        "distinct with a joined collection",
        lambda: select(Author).options(joinedload(Author.books)).distinct(),
        Keyset("name", Author.name, Author.id),
        r"SELECT DISTINCT with joinedload\(\) of a collection \(Author.books\).*selectinload\(\)",
    ),
]


@pytest.mark.parametrize(("what", "statement", "sort", "says"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_what_it_cannot_page_is_refused_up_front_with_the_sql(lib, what, statement, sort, says):
    with Session(lib) as session:
        for call in (
            lambda: paginate(session, statement(), sort, limit=3, codec=CODEC),
            lambda: next(iterate(session, statement(), sort, batch_size=3)),
        ):
            with pytest.raises(KeysetError, match=says) as caught:
                call()
            assert not isinstance(caught.value, PaginationError)  # the server's mistake, not a 400
            assert "SQL: SELECT" in str(caught.value) or "SQL: WITH" in str(caught.value)


def test_engine_specific_refusals_say_why(lib):
    kind = lib.dialect.name
    colour = Keyset("colour", Author.colour, Author.id)
    float_key = Keyset("weight", func.coalesce(Author.weight, 0.0), Author.id)
    with Session(lib) as session:
        if kind == "mysql":
            with pytest.raises(KeysetError, match="alphabetical order"):
                paginate(session, select(Author), colour, limit=2, codec=CODEC)
        else:
            paginate(session, select(Author), colour, limit=2, codec=CODEC)
        real = Keyset("real", Author.id, func.cast(Author.score, Float(24)))
        if kind != "sqlite":
            with pytest.raises(KeysetError, match="4-byte float"):
                paginate(session, select(Author), real, limit=2, codec=CODEC)
        if kind == "mysql":  # Float() is FLOAT, 4 bytes, on MariaDB
            with pytest.raises(KeysetError, match="4-byte float"):
                paginate(session, select(Author), float_key, limit=2, codec=CODEC)


@pytest.mark.parametrize("dialect", [postgresql.dialect(), sqlite.dialect(), mysql.dialect()])
def test_seek_bounded_forces_the_expanded_form_with_a_leading_bound(dialect):
    stmt = select(Author.id)

    def sql(seek: Any) -> str:
        sort = Keyset("name", Author.name, Author.id)
        found = keyset_select(stmt, sort, [1, 2], limit=3, dialect=dialect.name, seek=seek)
        return str(found.compile(dialect=dialect))

    auto = sql(None)
    bounded = sql("bounded")
    assert ("(lib_authors.name, lib_authors.id) >" in auto) == (dialect.name != "mysql")
    assert "(lib_authors.name, lib_authors.id)" not in bounded
    assert "lib_authors.name >= " in bounded and "lib_authors.name > " in bounded, bounded
    assert "lib_authors.name = " in bounded and "lib_authors.id > " in bounded, bounded
    with pytest.raises(KeysetError, match='seek must be "auto" or "bounded"'):
        sql("rows")
    with pytest.raises(TypeError):  # the form is the call's, never the sort's
        Keyset("name", Author.name, Author.id, seek="bounded")


def test_nullable_and_non_unique_sorts_are_judged_per_statement(lib):
    # Defining a sort refuses nothing a statement could page: NULLs are paged the engine's way
    # (or as placed), and whether the terms are unique depends on the statement.
    Keyset("weight", Author.weight, Author.id)
    Keyset("weight", Author.id, Author.weight.asc().nulls_last())
    pairs = Keyset("pairs", Pair.a)
    with Session(lib) as session:
        with pytest.raises(KeysetError, match="not unique in this statement's rows"):
            paginate(session, select(Pair), pairs, limit=2, codec=CODEC)
        paginate(session, select(Pair.a).distinct(), pairs, limit=2, codec=CODEC)  # DISTINCT: unique


def test_a_key_too_long_for_a_cursor_is_the_servers_error(lib):
    short = CursorCodec("library-tests-secret-library-tests-secret", max_length=300)
    load(
        lib,
        (
            [
                {
                    **{"name": "🎉" * 255},
                    "born": TIMES[0],
                    "score": 1.0,
                    "size": Size.S,
                    "colour": Colour.RED,
                    "mood": "calm",
                }
            ]
            * 2,
            [],
            [],
        ),
    )
    with Session(lib) as session:
        from pagination import CursorTooLong

        with pytest.raises(CursorTooLong) as caught:
            paginate(session, select(Author), Keyset("name", Author.name, Author.id), limit=1, codec=short)
        assert not isinstance(caught.value, PaginationError)
        page = paginate(session, select(Author), Keyset("name", Author.name, Author.id), limit=1, codec=CODEC)
        assert page.has_more and len(page.next_cursor) <= 2048


def test_python_types_are_taught_to_the_codec():
    class Point:
        def __init__(self, x: int):
            self.x = x

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Point) and other.x == self.x

    from pagination import Position

    codec = CursorCodec(
        "library-tests-secret-library-tests-secret",
        types={"point": (Point, lambda p: str(p.x), lambda t: Point(int(t)))},
    )
    position = Position("s", AFTER, "", (Point(3), 1))
    assert codec.decode(codec.encode(position)).keys == (Point(3), 1)
    with pytest.raises(TypeError, match="types="):
        CODEC.encode(position)
