"""The plans of a searched page on every engine, in every sort: 90% deep into a common word's
matches (one customer in 25) and for a rare word (one order in 20,000), each query reads one
range of an order_words index under `word = :w` (about `limit` entries) and the orders by primary
key: never a scan, a sort, or entries read and thrown away (orders/finding/search.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.data.models import Order
from orders.data.seed import CUSTOMERS, seed_orders
from orders.finding.listing import ListRequest
from orders.finding.search import Search
from orders.finding.sorts import SORTS
from pagination import AFTER, CursorCodec, Position, filters_fingerprint, paginate

from .databases import ENGINES, migrated_database
from .helpers import BASE, plan_nodes, statements_of

pytestmark = pytest.mark.slow
ROWS = 60_000
LIMIT = 20
RARE = "Zacarias Quintanilha"  # held by one order in 20,000
RARE_ORDERS = ROWS // 20_000
# (query, who it finds, how deep the cursor is into its matches)
QUERIES = {"common": ("ÚRS", "Úrsula Freitas", 0.9), "rare": ("quint", RARE, 0.0)}


@pytest.fixture(scope="module", params=ENGINES)
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with migrated_database(request.param, tmp_path_factory.mktemp("find"), "findplans") as url:
        engine = make_engine(url)
        with Session(engine) as session:
            seed_orders(session, ROWS)
            # Through the ORM, as the API writes: the words come with the order.
            session.add_all(
                Order(customer=RARE, amount=i + 1, status="paid", created_at=BASE) for i in range(RARE_ORDERS)
            )
            session.commit()
            # Statistics as a live server keeps them; SQLite as the app leaves it (no sqlite_stat1).
            if engine.dialect.name == "postgresql":
                session.execute(text("ANALYZE"))
            elif engine.dialect.name in ("mysql", "mariadb"):
                session.execute(text("ANALYZE TABLE orders, order_words"))
            session.commit()
        yield engine
        engine.dispose()


def check_postgresql(engine: Engine, sql: str, params: Any) -> str:
    with engine.connect() as conn:
        (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).one()
    nodes = list(plan_nodes(plan[0]["Plan"]))
    kinds = [n.get("Node Type") for n in nodes if "Node Type" in n]
    assert "Seq Scan" not in kinds and "Sort" not in kinds and "Bitmap Heap Scan" not in kinds, kinds
    scans = [n for n in nodes if n.get("Node Type") in ("Index Scan", "Index Only Scan")]
    assert scans and all("Index Cond" in n for n in scans), scans
    words = [n for n in scans if n["Index Name"].startswith("ix_order_words_")]
    assert len(words) == 1 and "word = " in words[0]["Index Cond"], scans
    assert words[0]["Actual Rows"] <= LIMIT + 2, words[0]  # the range: at most a page and two
    assert all(n["Index Name"] == "orders_pkey" for n in scans if n not in words), scans
    removed = sum(n.get("Rows Removed by Filter", 0) for n in nodes)
    assert removed <= 2, f"{removed} rows removed by filter: the index range is not tight"
    return " / ".join(f"{n['Node Type']} using {n['Index Name']}: {n['Index Cond']}" for n in scans)


def check_mysql(engine: Engine, sql: str, params: Any) -> str:
    with engine.connect() as conn:
        (report,) = conn.exec_driver_sql("ANALYZE FORMAT=JSON " + sql, params).one()
    tables = {n["table"]["table_name"]: n["table"] for n in plan_nodes(json.loads(report)) if "table" in n}
    assert set(tables) == {"orders", "order_words"}, tables
    words, orders = tables["order_words"], tables["orders"]
    assert words["access_type"] == "range" and words["key"].startswith("ix_order_words_"), words
    assert words["r_rows"] <= LIMIT + 2, f"read {words['r_rows']} index entries for a page of {LIMIT}"
    assert orders["access_type"] == "eq_ref" and orders["key"] == "PRIMARY", orders
    return " / ".join(
        f"{name}: {t['access_type']} on {t['key']}, r_rows={t['r_rows']}" for name, t in tables.items()
    )


def check_sqlite(engine: Engine, sql: str, params: Any) -> str:
    with engine.connect() as conn:
        details = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
    # The word and the cursor's row value both in the range: "(word=? AND (created_at,id)<(?,?))".
    assert any(WORD_RANGE.match(d) for d in details), details
    assert any(d.startswith("SEARCH orders USING INTEGER PRIMARY KEY") for d in details), details
    assert not any(d.startswith("SCAN") or "TEMP B-TREE" in d for d in details), details
    return " / ".join(details)


WORD_RANGE = re.compile(r"SEARCH order_words USING (COVERING )?INDEX ix_order_words_\w+ \(word=\? AND \(")
CHECKS = {
    "postgresql": check_postgresql,
    "mysql": check_mysql,
    "mariadb": check_mysql,
    "sqlite": check_sqlite,
}


@pytest.mark.parametrize("word", QUERIES)
@pytest.mark.parametrize("sort", SORTS)
def test_a_searched_page_reads_one_range_of_a_word_index(big, sort, word, capsys):  # type: ignore[no-untyped-def]
    typed, customer, depth = QUERIES[word]
    listing = ListRequest(sort, None, LIMIT, Search.parse(typed))
    stmt, keyset = listing.statement(), listing.keyset
    matching = ROWS // len(CUSTOMERS) if word == "common" else RARE_ORDERS
    with Session(big) as session:
        keys = tuple(
            session.execute(
                stmt.with_only_columns(*(c.expr for c in keyset.columns), maintain_column_froms=True)
                .order_by(*keyset.order_by())
                .offset(int(matching * depth))
                .limit(1)
            ).one()
        )
    codec = CursorCodec("plan-test-secret-plan-test-secret")
    cursor = codec.encode(Position(sort, AFTER, filters_fingerprint(listing.filters), keys))

    def run() -> None:
        with Session(big) as session:
            page = paginate(
                session, stmt, keyset, limit=LIMIT, codec=codec, filters=listing.filters, after=cursor
            )
            assert {row.customer for row in page.items} == {customer}
            assert len(page.items) == min(LIMIT, matching - int(matching * depth) - 1)

    ((sql, params),) = statements_of(big, run)
    shown = CHECKS[big.dialect.name](big, sql, params)
    with capsys.disabled():
        print(f"\n  [{big.dialect.name} {sort} q={typed} ({word}) at {depth:.0%}] {shown}")
