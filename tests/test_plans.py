"""Read the plans: at 90% depth in a 120,000-row table, every query a page runs reads an
index range of about `limit + 1` entries, never a scan, on each engine (see docs/design.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.exports.stream import batch_sql, compile_for_driver, driver_params, export_columns
from orders.finding.request import ListRequest
from orders.finding.sorts import LIBRARY_SORTS, SORTS
from pagination import (
    AFTER,
    BEFORE,
    CursorCodec,
    Position,
    filters_fingerprint,
    iterate_ranges,
    keyset_select,
    paginate,
    start_at,
)

from .databases import ENGINES, POSTGRESQL, migrated_database
from .helpers import analyze, plan_nodes, seed_orders_only, statements_of

pytestmark = pytest.mark.slow
ROWS = 120_000
DEPTH = int(ROWS * 0.9)
LIMIT = 20


@pytest.fixture(scope="module", params=ENGINES)
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with migrated_database(request.param, tmp_path_factory.mktemp("plans"), "plans") as url:
        engine = make_engine(url)
        # The plans read here are the list's and the export's, on `orders` alone
        # (tests/test_find_plans.py reads the search's): seeded without the words, which these
        # plans never read and which are most of a seed's work.
        seed_orders_only(engine, ROWS)
        with Session(engine) as session:
            analyze(session, "orders")
            session.commit()
        yield engine
        engine.dispose()


def check_postgresql(engine: Engine, sql: str, params: Any, filtered: bool) -> str:
    with engine.connect() as conn:
        (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).one()
    nodes = list(plan_nodes(plan[0]["Plan"]))
    kinds = [n.get("Node Type") for n in nodes if "Node Type" in n]
    assert "Seq Scan" not in kinds, kinds
    scans = [n for n in nodes if n.get("Node Type") in ("Index Scan", "Index Only Scan")]
    assert scans and all(
        n["Index Name"].startswith("ix_orders") or n["Index Name"] == "orders_pkey" for n in scans
    )
    assert any("Index Cond" in n for n in scans), "no Index Cond: the seek predicate is only a filter"
    removed = sum(n.get("Rows Removed by Filter", 0) for n in nodes)
    # With a status filter PostgreSQL may prefer the sort's own index and drop the other
    # statuses' rows as it goes: a cost set by the status's share of rows, not by the depth.
    allowed = 10 * LIMIT if filtered else 10
    assert removed <= allowed, f"{removed} rows removed by filter: the index range is not tight"
    # The cursor's own row (it proves a previous page), the page, and one row to show a next one.
    assert plan[0]["Plan"]["Actual Rows"] <= LIMIT + 2
    return " / ".join(f"{n['Node Type']} using {n['Index Name']}: {n.get('Index Cond', '')}" for n in scans)


def check_mysql(engine: Engine, sql: str, params: Any, filtered: bool) -> str:
    with engine.connect() as conn:
        (report,) = conn.exec_driver_sql("ANALYZE FORMAT=JSON " + sql, params).one()
    tables = [n["table"] for n in plan_nodes(json.loads(report)) if "table" in n]
    assert tables
    for table in tables:
        assert table["access_type"] == "range", table
        assert table["key"].startswith("ix_orders") or table["key"] == "PRIMARY", table
        assert table["r_rows"] <= LIMIT + 2, f"read {table['r_rows']} rows for a page of {LIMIT}"
    return " / ".join(f"{t['access_type']} on {t['key']}, r_rows={t['r_rows']}" for t in tables)


def check_sqlite(engine: Engine, sql: str, params: Any, filtered: bool) -> str:
    with engine.connect() as conn:
        details = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
    assert any(d.startswith("SEARCH") and "INDEX ix_orders" in d for d in details), details
    assert not any(d.startswith("SCAN") for d in details), details
    assert not any("TEMP B-TREE" in d for d in details), details
    return " / ".join(details)


CHECKS = {
    "postgresql": check_postgresql,
    "mysql": check_mysql,
    "mariadb": check_mysql,
    "sqlite": check_sqlite,
}
CASES = [
    ("newest", None, AFTER),
    ("newest", None, BEFORE),
    ("oldest", None, AFTER),
    ("amount", None, AFTER),
    ("customer", None, AFTER),
    ("newest", "paid", AFTER),
    # A jump to a value (start_at): the prefix predicate on the first column alone, and the
    # probe for a previous row, each an index range.
    ("newest", None, "start_at"),
    ("customer", None, "start_at"),
    ("amount", None, "start_at"),
]
START_AT = "start_at"


@pytest.mark.parametrize(("sort", "status", "direction"), CASES)
def test_every_query_of_a_deep_page_reads_an_index_range(big, sort, status, direction, capsys):
    keyset = LIBRARY_SORTS[sort]
    # The app's own statement, index hints included.
    stmt = ListRequest(sort, status, LIMIT).statement()
    position_stmt = (
        stmt.with_only_columns(*(c.expr for c in keyset.columns), maintain_column_froms=True)
        .order_by(*keyset.order_by())
        .offset(int(DEPTH * (0.25 if status else 1)))  # a status is about a quarter of the rows
        .limit(1)
    )
    with Session(big) as session:
        keys = tuple(session.execute(position_stmt).one())
    codec = CursorCodec("plan-test-secret-plan-test-secret")
    filters = {"status": status}
    jump = direction == START_AT
    if jump:
        cursor, direction = start_at(keyset, keys[:1], codec=codec, filters=filters), AFTER
    else:
        cursor = codec.encode(Position(sort, direction, filters_fingerprint(filters), keys))

    def run() -> None:
        with Session(big) as session:
            page = paginate(
                session, stmt, keyset, limit=LIMIT, codec=codec, filters=filters, **{direction: cursor}
            )
            assert len(page.items) == LIMIT and page.has_more and page.has_previous

    statements = statements_of(big, run)
    # A row's cursor: the cursor's row, the page and one more row, one round trip. A position
    # at values has no row of its own to prove a previous one: one probe more.
    assert len(statements) == (2 if jump else 1)
    for sql, params in statements:
        plan = CHECKS[big.dialect.name](big, sql, params, status is not None)
        with capsys.disabled():
            print(f"\n  [{big.dialect.name} {sort}{'/' + status if status else ''} {direction}] {plan}")


@pytest.mark.parametrize("direction", [AFTER, BEFORE])
def test_keyset_select_is_the_statement_a_page_runs_and_reads_a_range(big, direction, capsys):
    keyset = LIBRARY_SORTS["newest"]
    stmt = ListRequest("newest", None, LIMIT).statement()
    with Session(big) as session:
        keys = tuple(
            session.execute(
                stmt.with_only_columns(*(c.expr for c in keyset.columns), maintain_column_froms=True)
                .order_by(*keyset.order_by())
                .offset(DEPTH)
                .limit(1)
            ).one()
        )
    codec = CursorCodec("plan-test-secret-plan-test-secret")
    cursor = codec.encode(Position("newest", direction, filters_fingerprint(None), keys))

    def run() -> None:
        with Session(big) as session:
            paginate(session, stmt, keyset, limit=LIMIT, codec=codec, **{direction: cursor})

    ((sent, sent_params),) = statements_of(big, run)
    shown = keyset_select(
        stmt,
        keyset,
        keys,
        limit=LIMIT + 2,
        backward=direction == BEFORE,
        inclusive=True,
        dialect=big.dialect.name,
        flag_keys_row=True,
    )
    compiled = shown.compile(big)
    assert str(compiled) == sent  # the same SQL, with the keys bound into it
    assert [compiled.params[f"_keyset_key_{i}"] for i in range(len(keys))] == list(keys)
    # The driver-level parameters of the page it ran are those keys, converted by the column types.
    plan = CHECKS[big.dialect.name](big, str(compiled), sent_params, False)
    with capsys.disabled():
        print(f"\n  [{big.dialect.name} keyset_select {direction}] {plan}")


@pytest.mark.parametrize("big", POSTGRESQL, indirect=True)  # the ARRAY(...) read is PostgreSQL's
@pytest.mark.parametrize("sort", ["newest", "customer"])
def test_each_export_batch_on_postgresql_is_one_index_range(big, sort, capsys):
    """The export's read of one batch (orders/exports/stream.py) and the probe that finds the batch's
    end, at 90% depth: each reads the sort's index from one keyset to the other, no scan."""
    keyset, index = LIBRARY_SORTS[sort], SORTS[sort].index
    listing = ListRequest(sort, None, LIMIT)
    stmt = listing.statement().with_only_columns(
        *export_columns("postgresql", keyset), maintain_column_froms=True
    )
    codec = CursorCodec("plan-test-secret-plan-test-secret")
    with Session(big) as session:
        keys = tuple(
            session.execute(
                select(*(c.expr for c in keyset.columns)).order_by(*keyset.order_by()).offset(DEPTH).limit(1)
            ).one()
        )
        after = codec.encode(Position(sort, AFTER, filters_fingerprint(None), keys))
        batch = 2000
        statements = statements_of(
            big,
            lambda: next(iterate_ranges(session, stmt, keyset, batch_size=batch, codec=codec, after=after)),
        )
        part = next(iterate_ranges(session, stmt, keyset, batch_size=batch, codec=codec, after=after))
        compiled = compile_for_driver(part.statement, big.dialect)
        params = driver_params(compiled, part.params)
        read = batch_sql(str(compiled), "postgresql", keyset)
    assert part.rows == batch and len(statements) == 1
    for label, (sql, bound) in {"probe": statements[0], "batch": (read, params)}.items():
        with big.connect() as conn:
            (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, bound).one()
        nodes = list(plan_nodes(plan[0]["Plan"]))
        kinds = [n.get("Node Type") for n in nodes if "Node Type" in n]
        assert "Seq Scan" not in kinds, kinds
        scans = [n for n in nodes if "Scan" in n.get("Node Type", "") and "Index Name" in n]
        assert scans and all(n["Index Name"] == index for n in scans), scans
        assert all("Index Cond" in n for n in scans), "the keysets are only a filter"
        assert sum(n["Actual Rows"] for n in scans) == batch, "the range read more than its rows"
        with capsys.disabled():
            print(
                f"\n  [export {sort} {label}] "
                + " / ".join(f"{n['Node Type']}: {n['Index Cond']}" for n in scans)
            )
