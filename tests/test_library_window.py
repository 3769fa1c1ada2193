"""A page within a window (`paginate(..., window=Window(lead, size))`): its work is bounded by
`size` rows of a narrower statement's range, and a walk of windowed pages, forward from the
top and back from the end, gives the unpaged rows exactly, on every engine.

The table holds rows of two tags; the statement keeps the tag's rows that pass a sparse filter,
the lead selects all of the tag's rows (every row of the statement is one of them), so most
windows hold no match and their pages are empty with a cursor past the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Boolean, Engine, Index, Integer, String, delete, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pagination import AFTER, BEFORE, Keyset, Page, PaginationError, Window, paginate

from .databases import ENGINES
from .library import CODEC, library_engine, statements_of

ROWS = 120


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "lib_window_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    tag: Mapped[str] = mapped_column(String(4))
    rank: Mapped[int] = mapped_column(Integer)  # ties across rows: the sort ends in the id
    picked: Mapped[bool] = mapped_column(Boolean)
    __table_args__ = (Index("ix_lib_window_tag_rank_id", "tag", "rank", "id"),)


@pytest.fixture(scope="module", params=ENGINES)
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with library_engine(request.param, tmp_path_factory.mktemp("libwindow"), "libwindow") as engine:
        Base.metadata.create_all(engine)
        with Session(engine) as session:
            session.execute(delete(Item))
            # Picked rows come in clusters with long gaps between, as a rare pair of words does.
            session.add_all(
                Item(id=i, tag="ab"[i % 2], rank=i % 17, picked=i % 29 in (3, 4, 5) or i % 31 == 0)
                for i in range(1, ROWS + 1)
            )
            session.commit()
        yield engine


SORTS = {
    "id": Keyset("id", Item.id),
    "rank, id descending": Keyset("rank-desc", Item.rank.desc(), Item.id.desc()),
    "rank up, id down": Keyset("rank-mixed", Item.rank, Item.id.desc()),
}


def statement_and_lead(sort: Keyset) -> tuple[Any, Any]:
    stmt = select(Item.id, Item.rank).where(Item.tag == "a", Item.picked)
    lead = select(*(t.expr for t in sort.columns)).where(Item.tag == "a")
    return stmt, lead


def windowed(session: Session, sort: Keyset, size: int, **cursor: Any) -> Page:
    stmt, lead = statement_and_lead(sort)
    return paginate(session, stmt, sort, limit=3, codec=CODEC, window=Window(lead, size), **cursor)


@pytest.mark.parametrize("size", [1, 4, 9, 1000])
@pytest.mark.parametrize("name", SORTS)
def test_windowed_walks_both_ways_give_the_unpaged_rows(lib: Engine, name: str, size: int) -> None:
    sort = SORTS[name]
    stmt, _ = statement_and_lead(sort)
    with Session(lib) as session:
        expected = [tuple(r) for r in session.execute(stmt.order_by(*sort.order_by()))]
        assert 5 <= len(expected) <= 20  # sparse in the tag's 60 rows
        forward, empty, page = [], 0, windowed(session, sort, size)
        for _ in range(ROWS):
            forward += [tuple(r) for r in page.items]
            empty += not page.items
            assert len(page.items) <= 3
            if page.next_cursor is None:
                break
            assert CODEC.decode(page.next_cursor).direction == AFTER
            page = windowed(session, sort, size, after=page.next_cursor)
        assert forward == expected
        # Back from the end: from the last page forward, by prev_cursor to the top.
        backward: list[Any] = [tuple(r) for r in page.items]
        for _ in range(ROWS):
            if page.prev_cursor is None:
                break
            assert CODEC.decode(page.prev_cursor).direction == BEFORE
            page = windowed(session, sort, size, before=page.prev_cursor)
            backward = [tuple(r) for r in page.items] + backward
        assert backward == expected
    if size < 9:
        assert empty > 0, "no window came up empty: the filter is not sparse in the lead's range"
    if size == 1000:
        assert empty == 0, "a window larger than the lead cut a page short"


def test_a_page_reads_the_window_once_and_the_statement_within_it(lib: Engine) -> None:
    """One probe of the lead (its `size`-th row, by OFFSET), then the page's read kept to the
    rows up to the probe's row: the statement is never read past the window."""
    sort = SORTS["id"]
    with Session(lib) as session:
        sent = statements_of(lib, lambda: windowed(session, sort, 4))
    probes = [(sql, params) for sql, params in sent if "picked" not in sql]
    reads = [sql for sql, _ in sent if "picked" in sql]
    assert len(probes) == 1 and len(reads) == 1, sent  # a first page: no exists-probe
    sql, params = probes[0]
    values = params.values() if isinstance(params, dict) else params
    assert "tag" in sql and 3 in values, probes  # skips 3 entries to the 4th: OFFSET 3
    assert "<=" in reads[0], reads[0]  # kept to the rows up to the window's end


def test_a_window_that_cannot_be_read_is_refused_in_words(lib: Engine) -> None:
    sort = SORTS["id"]
    stmt, lead = statement_and_lead(sort)
    with Session(lib) as session:
        for size in (0, -1, True, 2.5):
            with pytest.raises(PaginationError, match="window's size"):
                paginate(session, stmt, sort, limit=3, codec=CODEC, window=Window(lead, size))  # type: ignore[arg-type]  # wrong on purpose
