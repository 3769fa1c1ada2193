"""The plans of a searched page on every engine, in every sort: 90% deep into a common word's
matches (one customer in 25) and for a rare word (one order in 20,000), each query reads one
range of an order_words index under `word = :w` (about `limit` entries) and the orders by primary
key: never a scan, a sort, or entries read and thrown away (orders/finding/search.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from orders.data.db import make_engine
from orders.data.models import Order
from orders.data.names import name_key
from orders.data.seed import CUSTOMERS, seed_orders
from orders.finding import reader
from orders.finding.request import ListRequest
from orders.finding.search import Search
from orders.finding.sorts import SORTS
from pagination import AFTER, CursorCodec, Position, filters_fingerprint, paginate

from .databases import ENGINES, migrated_database
from .helpers import BASE, analyze, plan_nodes, statements_of

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
            seed_orders(session, ROWS, customers=CUSTOMERS)  # one customer in 25: the shares below
            # Through the ORM, as the API writes: the words come with the order.
            session.add_all(
                Order(customer=RARE, amount=i + 1, status="paid", created_at=BASE) for i in range(RARE_ORDERS)
            )
            session.commit()
            analyze(session, "orders", "order_words")
            session.commit()
        yield engine
        engine.dispose()


def index_scans_postgresql(engine: Engine, sql: str, params: Any) -> tuple[list[Any], list[Any]]:
    """(every node, the index scans) of the statement's executed plan, which has no sequential
    scan, sort or bitmap heap scan."""
    with engine.connect() as conn:
        (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params).one()
    nodes = list(plan_nodes(plan[0]["Plan"]))
    kinds = [n.get("Node Type") for n in nodes if "Node Type" in n]
    assert "Seq Scan" not in kinds and "Sort" not in kinds and "Bitmap Heap Scan" not in kinds, kinds
    return nodes, [n for n in nodes if n.get("Node Type") in ("Index Scan", "Index Only Scan")]


def check_postgresql(engine: Engine, sql: str, params: Any) -> str:
    nodes, scans = index_scans_postgresql(engine, sql, params)
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
def test_a_searched_page_reads_one_range_of_a_word_index(big, sort, word, capsys):
    typed, customer, depth = QUERIES[word]
    listing = ListRequest(sort, None, LIMIT, Search.parse(typed))
    stmt, keyset = listing.statement(), listing.sort
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


# --- Several words: the names first (orders/finding/named.py) --------------------------------

NAMED = "urs fre"  # two words one name holds (Úrsula Freitas, one customer in 25)


def named_check_postgresql(engine: Engine, sql: str, params: Any, bound: int) -> str:
    nodes, scans = index_scans_postgresql(engine, sql, params)
    assert len(scans) == 1 and scans[0]["Index Name"].startswith("ix_orders_customer_key_"), scans
    assert re.search(r"customer_key\)?(::text)? = ", scans[0]["Index Cond"]), scans
    assert scans[0]["Actual Rows"] <= bound, scans[0]
    assert sum(n.get("Rows Removed by Filter", 0) for n in nodes) <= 2, nodes
    return f"{scans[0]['Node Type']} using {scans[0]['Index Name']}: {scans[0]['Index Cond']}"


def named_check_mysql(engine: Engine, sql: str, params: Any, bound: int) -> str:
    with engine.connect() as conn:
        (report,) = conn.exec_driver_sql("ANALYZE FORMAT=JSON " + sql, params).one()
    found = json.loads(report)
    tables = [n["table"] for n in plan_nodes(found) if "table" in n]
    assert [t["table_name"] for t in tables] == ["orders"], tables
    (orders,) = tables
    assert orders["access_type"] == "range" and orders["key"].startswith("ix_orders_customer_key_"), orders
    assert orders["r_rows"] <= bound, f"read {orders['r_rows']} index entries for a page of {LIMIT}"
    assert bound > LIMIT + 2 or "filesort" not in json.dumps(found), found
    return f"orders: {orders['access_type']} on {orders['key']}, r_rows={orders['r_rows']}"


def named_check_sqlite(engine: Engine, sql: str, params: Any, bound: int) -> str:
    with engine.connect() as conn:
        details = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params)]
    # The cursor in the range; in the customer sort the range is the name's (bound: its orders).
    whole = bound > LIMIT + 2 and details[0].endswith("(customer_key=?)")
    assert len(details) == 1 and (NAMED_RANGE.match(details[0]) or whole), details
    assert details[0].startswith("SEARCH orders USING INDEX ix_orders_customer_key_"), details
    return details[0]


NAMED_RANGE = re.compile(
    r"SEARCH orders USING INDEX ix_orders_customer_key_\w+ \(customer_key=\? AND \(?\w+[<>]"
)
NAMED_CHECKS = {
    "postgresql": named_check_postgresql,
    "mysql": named_check_mysql,
    "mariadb": named_check_mysql,
    "sqlite": named_check_sqlite,
}


def page_statements(engine: Engine, listing: ListRequest) -> list[tuple[str, Any]]:
    """Every statement the page of `listing` sends, as the app reads it (ListRequest.page)."""
    listing = replace(listing, codec=CursorCodec("plan-test-secret-plan-test-secret"))
    found: list[Any] = []

    def run() -> None:
        with Session(engine) as session:
            found.append(reader.page(listing, session))

    return statements_of(engine, run)


@pytest.mark.parametrize("sort", SORTS)
def test_several_words_one_name_holds_read_that_names_range(big, sort, capsys):
    """The names say one name holds both words: its orders are one range of an index
    (customer_key, sort columns, id), 90% deep as at the top, `limit + 2` entries, no sort."""
    key = name_key("Úrsula Freitas")
    search = replace(Search.parse(NAMED), names=(key,))
    listing = ListRequest(sort, None, LIMIT, search, codec=CursorCodec("plan-test-secret-plan-test-secret"))
    stmt, keyset = listing.statement(), listing.sort
    matching = ROWS // len(CUSTOMERS)
    with Session(big) as session:
        keys = tuple(
            session.execute(
                stmt.with_only_columns(*(c.expr for c in keyset.columns))
                .order_by(*keyset.order_by())
                .offset(int(matching * 0.9))
                .limit(1)
            ).one()
        )
    position = Position(sort, AFTER, filters_fingerprint(listing.filters), keys)
    # As the app reads it: the names first, then the page of that name's orders.
    statements = page_statements(big, replace(listing, search=Search.parse(NAMED), position=position))
    sql, params = statements[-1]
    assert "customer_words" in " ".join(s for s, _ in statements[:-1]), statements
    assert "order_words" not in sql and "customer_key IN" in sql.replace("\n", " "), sql
    # In the customer sort, whose seek is (customer_key, id), SQLite and MariaDB read the name's
    # range from its start, the id bound a filter: at most the name's orders (docs/finding.md).
    loose = sort == "customer" and big.dialect.name != "postgresql"
    shown = NAMED_CHECKS[big.dialect.name](big, sql, params, matching if loose else LIMIT + 2)
    with capsys.disabled():
        print(f"\n  [{big.dialect.name} {sort} q={NAMED} (one name) at 90%] {shown}")


# Five words: none together in any name; the same with the names made undecided (every word
# "common"), so that the window's statements (the rarest word's range, the others' counts) run.
FIVE = "ur fr ana li ca"


@pytest.mark.parametrize("names", ["decide", "undecided"])
def test_no_search_statement_is_jit_compiled_on_postgresql(big, names, monkeypatch):
    """The app's PostgreSQL sessions run without JIT (orders/data/db.py): every statement of a
    five-word search's page is planned and run with no JIT, also with jit_above_cost at 0 (the
    costs of a table many times this one's, where the planner's estimate passes it)."""
    if big.dialect.name != "postgresql":
        pytest.skip("JIT is PostgreSQL's")
    from orders.finding import named

    if names == "undecided":
        monkeypatch.setattr(named, "NAMES_READ", 1)
    statements = page_statements(big, ListRequest("newest", None, LIMIT, Search.parse(FIVE)))
    selects = [
        (sql, params) for sql, params in statements if sql.lstrip().upper().startswith(("SELECT", "WITH"))
    ]
    assert len(selects) >= 2, statements
    with big.connect() as conn:
        for cost in (None, 0):
            if cost is not None:
                conn.exec_driver_sql(f"SET jit_above_cost = {cost}")
            for sql, params in selects:
                (plan,) = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).one()
                assert "JIT" not in plan[0], (cost, sql, plan[0]["JIT"])
        conn.rollback()
