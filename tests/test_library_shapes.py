"""A statement's shape is analysed once, and only statements of one shape share the analysis.

`paginate()` remembers what it worked out about a statement (refused or not, which terms may be
NULL, where the keys sit in a row) by the statement's shape: SQLAlchemy's cache key over the
statement and the sort's terms, the sort itself by identity, and the bound values the analysis
reads. Statements built anew per request with other filter values share one analysis; a join
and an outer join of the same objects, or UNION ALL branches telling themselves apart by other
constants, do not. The memory is bounded and shared by threads.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import (
    DateTime,
    Engine,
    ForeignKey,
    Integer,
    String,
    and_,
    delete,
    literal,
    select,
    union_all,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, aliased, mapped_column

from pagination import Keyset, KeysetError, planning
from pagination.planning import PLANS, plan
from pagination.statement import Read

from .databases import ENGINES
from .library import library_engine, unpaged, walk


class Base(DeclarativeBase):
    pass


class Writer(Base):
    __tablename__ = "lib_shape_writers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(20))


class Note(Base):
    __tablename__ = "lib_shape_notes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    writer_id: Mapped[int] = mapped_column(ForeignKey("lib_shape_writers.id"))
    title: Mapped[str] = mapped_column(String(20))


@pytest.fixture(scope="module", params=ENGINES)
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    kind, tmp = request.param, tmp_path_factory.mktemp("libshape")
    with library_engine(kind, tmp, "libshape", Base.metadata) as engine:
        with Session(engine) as session:
            session.execute(delete(Note))
            session.execute(delete(Writer))
            session.add_all(Writer(id=i, name=f"w{i % 3}") for i in range(1, 8))
            session.flush()
            # Writers 5, 6 and 7 wrote nothing: an outer join gives them a NULL title.
            session.add_all(Note(id=i, writer_id=1 + i % 4, title=f"t{i % 5}") for i in range(1, 12))
            session.commit()
        yield engine


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every statement analysed (not found in the memory of shapes), from a cleared memory."""
    PLANS.clear()
    seen: list[Any] = []
    analyse = planning._verdict

    def spy(stmt: Any, *args: Any) -> Any:
        seen.append(stmt)
        return analyse(stmt, *args)

    monkeypatch.setattr(planning, "_verdict", spy)
    return seen


BY_TITLE = Keyset("title", Note.title, Writer.id, Note.id)


def test_statements_built_anew_with_other_filter_values_are_analysed_once(counted):
    dialect = postgresql.dialect()
    sort = Keyset("note", Note.title, Note.id)
    plans = {
        plan(
            select(Note, Writer.name)
            .join(Writer, Note.writer_id == Writer.id)  # a new ON clause object every time
            .where(Note.title == title, Writer.name.in_([title, "x"])),
            sort,
            dialect,
            plain_rows=False,
        )
        for title in ("a", "b", "c", "d", "e")
    }
    assert len(counted) == 1 and len(plans) == 1
    # An anonymous alias made per request: the same shape, as long as the sort names it too.
    writer = aliased(Writer)
    by_alias = Keyset("alias", writer.name, Note.id)
    for _ in range(3):
        plan(select(Note).join(writer, Note.writer_id == writer.id), by_alias, dialect, plain_rows=False)
    assert len(counted) == 2
    # Another sort with the same terms, another engine, a Connection's rows: analysed apart.
    plan(
        select(Note).join(Writer, Note.writer_id == Writer.id),
        Keyset("note", Note.title, Note.id),
        dialect,
        plain_rows=False,
    )
    plan(select(Note).join(Writer, Note.writer_id == Writer.id), sort, sqlite.dialect(), plain_rows=False)
    plan(select(Note).join(Writer, Note.writer_id == Writer.id), sort, dialect, plain_rows=True)
    assert len(counted) == 5


def test_a_join_and_an_outer_join_of_the_same_objects_are_two_shapes(lib, counted):
    # The same entity, target and sort objects: only the join's kind differs. With the inner
    # join's analysis (title NOT NULL) the outer join's NULL titles fell out of the walk.
    analysed = []
    with Session(lib) as session:
        for stmt in (
            select(Writer, Note).join(Note),
            select(Writer, Note).outerjoin(Note),
            select(Writer, Note).join(Note),
        ):
            for limit in (1, 2, 3):
                backward, forward, _ = walk(session, stmt, BY_TITLE, limit)
                assert backward == [] and forward == unpaged(session, stmt, BY_TITLE), stmt
            analysed.append(len(counted))
    # The third is the first's shape again. (A statement the ORM has compiled is keyed once
    # more: SQLAlchemy sets its ORM compile options on it, in its cache key too.)
    assert analysed[0] < analysed[1] == analysed[2]


def _with_branches(first: str, second: str) -> Any:
    """Notes joined to a UNION ALL whose `kind` column is `first` in one branch, `second` in the
    other: unique per (kind, id) only when the two constants differ."""
    both = union_all(
        select(literal(first).label("kind"), Writer.id),
        select(literal(second).label("kind"), Writer.id),
    ).subquery()
    on = and_(both.c.id == Note.writer_id, both.c.kind == literal(first))
    return select(Note, both.c.kind).join(both, on)


def test_constants_the_analysis_reads_are_part_of_the_shape(counted):
    dialect = postgresql.dialect()
    sort = Keyset("note", Note.id)
    # Branches told apart: each note meets one row of the union (its writer, kind "a").
    plan(_with_branches("a", "b"), sort, dialect, plain_rows=False)
    # The same statement but for the constants: each note meets two rows, and ids repeat.
    with pytest.raises(KeysetError, match="not unique in this statement's rows"):
        plan(_with_branches("a", "a"), sort, dialect, plain_rows=False)
    plan(_with_branches("c", "d"), sort, dialect, plain_rows=False)
    assert len(counted) == 3


def test_the_memory_is_bounded_and_shared_by_threads(counted, monkeypatch):
    # A memory of 4 shapes, and 8 threads paging 6 shapes: every call may find its entry
    # forgotten by another thread in the middle of its lookup.
    small = planning._Remembered(4)
    monkeypatch.setattr(planning, "PLANS", small)
    dialect = sqlite.dialect()
    sort = Keyset("note", Note.id)
    # A constant in the select list is part of the shape: each n is another shape.
    shapes = [select(Note.id, literal(n).label("n")) for n in range(6)]
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(1500):
                built = plan(shapes[(offset + i) % 6], sort, dialect, plain_rows=True)
                assert built.n_items == 2 and built.key_index == (0,)
                assert len(small) <= 4
        except BaseException as err:  # reported below, from the main thread
            errors.append(err)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show up
    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors[:3]
    assert len(small) == 4
    assert len(counted) >= 6  # each shape analysed (again when forgotten), none wrongly shared
    # The statement-wide memory is the same class, with its own bound.
    assert isinstance(PLANS, planning._Remembered) and len(PLANS) <= planning._MAX_PLANS


# --- Reads kept per statement (Plan.statement's `exact`) -----------------------------------


def test_a_read_is_built_once_per_statement_values_and_run_with_other_keys(counted):
    """A page's read is kept by the plan and the same object comes back for the next page of a
    statement with the same bound values: only its parameters differ (SQLAlchemy keeps the cache
    key on the object). Another filter value, NULL pattern or kind of key value is another read."""
    dialect = sqlite.dialect()
    sort = Keyset("note", Note.title, Note.id)
    read = Read(None, 0, 2, False)

    def built(title: str, keys: tuple[Any, ...]) -> tuple[Any, Any, dict[str, Any]]:
        stmt = select(Note.id, Note.title).where(Note.title == title)  # made anew, as per request
        found, exact = planning.planned(stmt, sort, dialect, plain_rows=True)
        page, params = found.statement(
            stmt, read, keys, limit=5, backward=False, flag_keys_row=False, exact=exact
        )
        return found, page, params

    plan_a, page_a, params_a = built("t1", ("t1", 3))
    plan_b, page_b, params_b = built("t1", ("t1", 7))
    assert plan_a is plan_b and page_a is page_b and params_a != params_b
    assert params_b == {"_keyset_key_0": "t1", "_keyset_key_1": 7}
    assert built("t2", ("t2", 3))[1] is not page_a  # another filter value: its own read
    assert built("t1", (None, 3))[1] is not page_a  # a NULL key value compares as IS NULL
    assert len(counted) == 1  # one shape throughout


def test_values_equal_to_python_but_not_to_the_database_are_not_shared(lib, counted):
    """The same instant in two time zones is equal in Python, and one shape (a constant outside
    the WHERE), but SQLite stores each as its own wall-clock text: each statement's rows show
    its own value, never the one of a read kept for the other."""
    noon = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    one_pm = noon.astimezone(dt.timezone(dt.timedelta(hours=1)))
    assert noon == one_pm
    sort = Keyset("note", Note.id)
    with Session(lib) as session:
        for when in (noon, one_pm, noon, one_pm):
            stmt = select(Note.id, literal(when, DateTime(timezone=True)).label("at"))
            _, forward, _ = walk(session.connection(), stmt, sort, 4)
            assert forward == unpaged(session.connection(), stmt, sort), when
    assert len(counted) <= 2  # the shape is shared (once per engine kind of binding)
