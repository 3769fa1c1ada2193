"""Read the plans of a nullable sort at depth: `shipped_at DESC NULLS LAST, id DESC` over 60,000
rows, a third of them NULL. Every statement a page runs (in the values, in the NULLs, and across
the boundary between them) reads one index range of about `limit + 2` entries on each engine.

And of a nullable *later* term without a placement, `region DESC, shipped_at DESC, id DESC` (NULLs
where the engine puts them): the seek cannot be a row value, and its leading bound is on the
first term only, so a page reads one index range that starts at the first row of its region and
filters out the rows of that region before the position: at most the rows of one region (2,000
here) plus the page, at any depth, never the rest of the table."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import DateTime, Engine, Index, Integer, MetaData, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pagination import AFTER, BEFORE, CursorCodec, Keyset, Position, filters_fingerprint, paginate

from .databases import ENGINES
from .library import analyze, library_engine, plan_nodes, statements_of

pytestmark = pytest.mark.slow
ROWS = 60_000
LIMIT = 20
UTC = dt.UTC


class Base(DeclarativeBase):
    metadata = MetaData()


class Shipment(Base):
    __tablename__ = "lib_shipments"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    shipped_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    region: Mapped[int] = mapped_column(Integer)
    __table_args__ = (
        Index("ix_lib_shipments_shipped_at_id", "shipped_at", "id"),
        Index("ix_lib_shipments_region_shipped_at_id", "region", "shipped_at", "id"),
    )


REGIONS = 30
REGION_ROWS = ROWS // REGIONS
# A nullable later term, NULLs the engine's way: PostgreSQL first (descending), the others last.
BY_REGION = Keyset("region", Shipment.region.desc(), Shipment.shipped_at.desc(), Shipment.id.desc())


RECENTLY_SHIPPED = Keyset("shipped", Shipment.shipped_at.desc().nulls_last(), Shipment.id.desc())
CODEC = CursorCodec("library-plans-secret-library-plans-secret")
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module", params=ENGINES)
def shipments(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    kind, tmp = request.param, tmp_path_factory.mktemp("libplans")
    with library_engine(kind, tmp, "libplans", Base.metadata) as engine:
        rows = [
            {
                "id": i,
                "shipped_at": None if i % 3 == 0 else T0 + dt.timedelta(minutes=i // 7),
                "region": i % REGIONS,
            }
            for i in range(1, ROWS + 1)
        ]
        with engine.begin() as conn:
            for start in range(0, ROWS, 5000):
                conn.execute(insert(Shipment), rows[start : start + 5000])
        with engine.begin() as conn:
            analyze(conn, "lib_shipments")
        yield engine


def plan(engine: Engine, sql: str, params: Any, *, filtered: int = 10) -> str:
    """The plan of one statement, checked to read one index range of at most `LIMIT + 2` rows
    (plus `filtered` rows read and dropped by a filter)."""
    kind = engine.dialect.name
    with engine.connect() as conn:
        if kind == "postgresql":
            (report,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).one()
            nodes = list(plan_nodes(report[0]["Plan"]))
            kinds = [n.get("Node Type") for n in nodes if "Node Type" in n]
            assert "Seq Scan" not in kinds, kinds
            scans = [n for n in nodes if n.get("Node Type") in ("Index Scan", "Index Only Scan")]
            assert scans and all("Index Cond" in n for n in scans), "the seek is only a filter"
            # A Sort over a handful of rows at the end of a part is the planner's cheap choice;
            # what must not happen is reading more of the index than the page needs.
            assert all(n["Actual Rows"] <= LIMIT + 2 for n in scans), kinds
            removed = sum(n.get("Rows Removed by Filter", 0) for n in nodes)
            assert removed <= filtered, f"read and dropped {removed} rows"
            assert report[0]["Plan"]["Actual Rows"] <= LIMIT + 2
            shown = " / ".join(f"{n['Node Type']}: {n['Index Cond']}" for n in scans)
            return f"{shown}; rows removed by filter: {removed}"
        if kind == "mysql":
            (report,) = conn.exec_driver_sql("ANALYZE FORMAT=JSON " + sql, params).one()
            tables = [n["table"] for n in plan_nodes(json.loads(report)) if "table" in n]
            for table in tables:
                assert table["access_type"] in ("range", "ref", "ref_or_null"), table
                assert table["r_rows"] <= LIMIT + 2 + filtered, (
                    f"read {table['r_rows']} rows for a page of {LIMIT}"
                )
                assert "filesort" not in json.dumps(table), table
            return " / ".join(f"{t['access_type']} on {t['key']}, r_rows={t['r_rows']}" for t in tables)
        details = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
        assert any(d.startswith("SEARCH") and "INDEX" in d for d in details), details
        assert not any(d.startswith("SCAN") or "TEMP B-TREE" in d for d in details), details
        return " / ".join(details)


def keyset_at(engine: Engine, offset: int) -> tuple[Any, ...]:
    with Session(engine) as session:
        stmt = (
            select(Shipment.shipped_at, Shipment.id)
            .order_by(*RECENTLY_SHIPPED.order_by())
            .offset(offset)
            .limit(1)
        )
        shipped_at, id_ = session.execute(stmt).one()
    if shipped_at is not None and shipped_at.tzinfo is None:
        shipped_at = shipped_at.replace(tzinfo=UTC)
    return (shipped_at, id_)


VALUES = ROWS * 2 // 3  # rows with a shipped_at come first
CASES = [
    ("values, 90% deep", int(VALUES * 0.9), AFTER, 1),
    ("values, backward", int(VALUES * 0.9), BEFORE, 1),
    ("NULLs, 90% deep", VALUES + int((ROWS - VALUES) * 0.9), AFTER, 1),
    ("NULLs, backward", VALUES + int((ROWS - VALUES) * 0.9), BEFORE, 1),
    # The last rows with a value: the page runs on into the NULLs, a second range.
    ("across the boundary", VALUES - 5, AFTER, 2),
    ("back across the boundary", VALUES + 5, BEFORE, 2),
]


# The bounded seek: the same order compared in the expanded form with a leading bound on every
# engine (the form a postgres_fdw foreign partition can be sent): still one index range.
@pytest.mark.parametrize("seek", [None, "bounded"], ids=["auto seek", "bounded seek"])
@pytest.mark.parametrize(("where", "offset", "direction", "statements"), CASES, ids=[c[0] for c in CASES])
def test_a_nullable_sort_reads_index_ranges_at_depth(
    shipments, where, offset, direction, statements, seek, capsys
):
    sort = RECENTLY_SHIPPED
    keyset = keyset_at(shipments, offset)
    cursor = CODEC.encode(Position("shipped", direction, filters_fingerprint(None), keyset))

    def run() -> None:
        with Session(shipments) as session:
            page = paginate(
                session, select(Shipment), sort, limit=LIMIT, codec=CODEC, seek=seek, **{direction: cursor}
            )
            assert len(page.items) == LIMIT and page.has_more and page.has_previous
            # The page is exactly the next rows of the whole order, NULLs placed last.
            expected = session.scalars(
                select(Shipment.id)
                .order_by(*RECENTLY_SHIPPED.order_by())
                .offset(offset + 1 if direction == AFTER else offset - LIMIT)
                .limit(LIMIT)
            ).all()
            assert [s.id for s in page.items] == expected

    sent = statements_of(shipments, run)[:statements]  # the last statement is the test's own check
    for sql, params in sent:
        shown = plan(shipments, sql, params)
        with capsys.disabled():
            print(f"\n  [{shipments.dialect.name} {where}, {seek or 'auto'} seek] {shown}")


def _at(engine: Engine, sort: Keyset, offset: int) -> tuple[Any, ...]:
    """The key values of the row at `offset` in the sort's order, as a cursor holds them."""
    with Session(engine) as session:
        columns = [t.expr for t in sort.columns]
        row = session.execute(select(*columns).order_by(*sort.order_by()).offset(offset).limit(1)).one()
    return tuple(v.replace(tzinfo=UTC) if isinstance(v, dt.datetime) and v.tzinfo is None else v for v in row)


LATER_CASES = [
    # Region 1 of 30 (descending: the last but one), far into it and at its start; a cursor
    # at a NULL (PostgreSQL: the region's first rows, the others: its last).
    ("90% deep, late in its region", REGION_ROWS * 28 + REGION_ROWS * 9 // 10, AFTER),
    ("90% deep, backward", REGION_ROWS * 28 + REGION_ROWS * 9 // 10, BEFORE),
    ("90% deep, early in its region", REGION_ROWS * 28 + 30, AFTER),
]


@pytest.mark.parametrize("sort", [BY_REGION], ids=["auto seek"])
@pytest.mark.parametrize(("where", "offset", "direction"), LATER_CASES, ids=[c[0] for c in LATER_CASES])
def test_a_nullable_later_term_reads_one_range_filtering_its_first_terms_ties(
    shipments, where, offset, direction, sort, capsys
):
    keyset = _at(shipments, sort, offset)
    cursor = CODEC.encode(Position(sort.name, direction, filters_fingerprint(None), keyset))
    step = 1 if direction == AFTER else -LIMIT

    def run() -> None:
        with Session(shipments) as session:
            page = paginate(session, select(Shipment), sort, limit=LIMIT, codec=CODEC, **{direction: cursor})
            assert len(page.items) == LIMIT and page.has_more and page.has_previous
            expected = session.scalars(
                select(Shipment.id).order_by(*sort.order_by()).offset(offset + step).limit(LIMIT)
            ).all()
            assert [s.id for s in page.items] == expected

    (sql, params), *_ = statements_of(shipments, run)
    assert " OR " in sql and "(lib_shipments.region, " not in sql, "a nullable term: no row value"
    # What the form costs: the rows of the cursor's region on its near side, read and dropped.
    shown = plan(shipments, sql, params, filtered=REGION_ROWS)
    with capsys.disabled():
        print(f"\n  [{shipments.dialect.name} later nullable term, {where}] {shown}")
