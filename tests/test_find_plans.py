"""The plan of a deep page of a search on PostgreSQL: in "Customer A–Z" the name prefix and the
cursor are one range of the (customer_key, id) index, about `limit` entries at 90% depth; in
"Newest first" the sort's own index is walked and other customers skipped (printed, bounded by
the share of matching rows, as for a status filter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from orders.db import make_engine, migrate
from orders.listing import ListRequest
from orders.search import Search
from orders.seed import CUSTOMERS, seed_orders
from pagination import AFTER, CursorCodec, Position, filters_fingerprint, paginate

from .databases import throwaway_database
from .helpers import plan_nodes, statements_of

pytestmark = pytest.mark.slow
ROWS = 120_000
LIMIT = 20


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with throwaway_database("postgresql", tmp_path_factory.mktemp("find"), "findplans") as url:
        engine = make_engine(url)
        migrate(engine)
        with Session(engine) as session:
            seed_orders(session, ROWS)
            session.execute(text("ANALYZE orders"))
            session.commit()
        yield engine
        engine.dispose()


@pytest.mark.parametrize("sort", ["customer", "newest"])
def test_a_deep_searched_page_reads_an_index_range(big, sort, capsys):  # type: ignore[no-untyped-def]
    listing = ListRequest(sort, None, LIMIT, None, None, Search.parse("ÚRS"))
    stmt = listing.statement()
    keyset = listing.keyset
    matching = ROWS // len(CUSTOMERS)
    with Session(big) as session:
        keys = tuple(
            session.execute(
                stmt.with_only_columns(*(c.expr for c in keyset.columns), maintain_column_froms=True)
                .order_by(*keyset.order_by())
                .offset(int(matching * 0.9))
                .limit(1)
            ).one()
        )
    codec = CursorCodec("plan-test-secret-plan-test-secret")
    cursor = codec.encode(Position(sort, AFTER, filters_fingerprint(listing.filters), keys))

    def run() -> None:
        with Session(big) as session:
            filters = listing.filters
            page = paginate(session, stmt, keyset, limit=LIMIT, codec=codec, filters=filters, after=cursor)
            assert len(page.items) == LIMIT and page.has_more
            assert {row.customer for row in page.items} == {"Úrsula Freitas"}

    ((sql, params),) = statements_of(big, run)
    with big.connect() as conn:
        (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).one()
    nodes = list(plan_nodes(plan[0]["Plan"]))
    kinds = [n.get("Node Type") for n in nodes if "Node Type" in n]
    assert "Seq Scan" not in kinds and "Sort" not in kinds, kinds
    scans = [n for n in nodes if n.get("Node Type") in ("Index Scan", "Index Only Scan")]
    assert scans and all("Index Cond" in n for n in scans), scans
    removed = sum(n.get("Rows Removed by Filter", 0) for n in nodes)
    if sort == "customer":
        assert [n["Index Name"] for n in scans] == ["ix_orders_customer_key_id"]
        assert "customer_key" in scans[0]["Index Cond"]  # the prefix is in the range, not a filter
        assert removed <= 10 and plan[0]["Plan"]["Actual Rows"] <= LIMIT + 2
    else:
        # One customer in 25: about 25 entries of the date index per row kept.
        assert removed <= 2 * len(CUSTOMERS) * (LIMIT + 2), removed
    with capsys.disabled():
        shown = " / ".join(f"{n['Node Type']} using {n['Index Name']}: {n['Index Cond']}" for n in scans)
        print(f"\n  [postgresql {sort} q=ÚRS at 90%] {shown}; rows removed by filter: {removed}")
