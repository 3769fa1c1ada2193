"""Test helpers: inserting orders, walking pages, the expected order computed in Python."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from hypothesis import strategies as st
from sqlalchemy import Engine, delete, select, text
from sqlalchemy.orm import Session

from orders.data.models import ORDER_WORDS, Order
from orders.data.seed import seed_orders
from orders.writing import grammar
from pagination import CursorCodec, Keyset, Page, paginate

# At home with the library's tests (which import no app); re-exported for the app's tests.
from .library import analyze as analyze
from .library import plan_nodes as plan_nodes
from .library import statements_of as statements_of

UTC = dt.UTC
BASE = dt.datetime(2026, 3, 11, 10, 39, tzinfo=UTC)


def add_orders(engine: Engine, rows: Iterable[tuple[dt.datetime, str, Decimal, str]]) -> list[int]:
    with Session(engine) as session:
        orders = [Order(created_at=t, customer=c, amount=a, status=s) for t, c, a, s in rows]
        session.add_all(orders)
        session.commit()
        return [o.id for o in orders]


def seed_ties(engine: Engine, count: int = 150, per_time: int = 7) -> list[int]:
    """`count` orders with `per_time` sharing each timestamp: more ties than a page holds."""
    statuses = itertools.cycle(["paid", "shipped", "pending", "cancelled"])
    rows = [
        (BASE - dt.timedelta(minutes=i // per_time), f"cust{i % 5}", Decimal(i % 9) + Decimal("0.5"), status)
        for i, status in zip(range(count), statuses, strict=False)
    ]
    return add_orders(engine, rows)


def seed(engine: Engine, count: int, per_minute: int = 3) -> list[int]:
    """`count` orders, `per_minute` sharing each timestamp (the realistic case)."""
    statuses = ["paid", "shipped", "pending", "cancelled"]
    rows = [
        (
            BASE - dt.timedelta(minutes=i // per_minute),
            f"Customer {i % 17}",
            Decimal(i % 500) + Decimal("0.99"),
            statuses[i % 4],
        )
        for i in range(count)
    ]
    return add_orders(engine, rows)


def seed_orders_only(engine: Engine, rows: int) -> None:
    """`rows` orders (orders/data/seed.py), without the search's words, for a module that reads
    them by the list and the export only: order_words (about 11 rows an order and three indexes,
    most of a seed's work) is dropped first, and the seed then writes the orders alone, as on a
    shard (orders/data/models.py keeps_words). For reading: the database searches nothing after
    this, and a delete of an order fails on the words' trigger."""
    with engine.begin() as connection:
        ORDER_WORDS.drop(connection, checkfirst=True)
    with Session(engine) as session:
        seed_orders(session, rows)


def delete_orders(engine: Engine, ids: Iterable[int]) -> None:
    """Delete these orders in one committed transaction (someone else deleting while a reader walks)."""
    with Session(engine) as session:
        session.execute(delete(Order).where(Order.id.in_(list(ids))))
        session.commit()


def statement(status: str | None) -> Any:
    stmt = select(Order)
    return stmt if status is None else stmt.where(Order.status == status)


def unpaged_ids(engine: Engine, keyset: Keyset, status: str | None) -> list[int]:
    stmt = select(Order.id).order_by(*keyset.order_by())
    if status is not None:
        stmt = stmt.where(Order.status == status)
    with Session(engine) as session:
        return list(session.scalars(stmt))


def get_page(
    engine: Engine, keyset: Keyset, codec: CursorCodec, limit: int, status: str | None, **cursor: Any
) -> Page:
    """One page in its own short session, as one web request would read it."""
    with Session(engine) as session:
        return paginate(
            session, statement(status), keyset, limit=limit, codec=codec, filters={"status": status}, **cursor
        )


class Desc:
    """Reverses comparison, to build a Python sort key for descending columns."""

    def __init__(self, value: Any):
        self.value = value

    def __lt__(self, other: Desc) -> bool:
        return bool(other.value < self.value)

    def __gt__(self, other: Desc) -> bool:
        return bool(other.value > self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def py_key(order: Order, keyset: Keyset) -> tuple[Any, ...]:
    """The keyset order in Python (valid for the lowercase ASCII names the tests use)."""
    names = [str(c.expr.key) for c in keyset.columns]
    return tuple(
        Desc(getattr(order, name)) if c.descending else getattr(order, name)
        for name, c in zip(names, keyset.columns, strict=True)
    )


def require_shard_topology() -> None:
    """Fail (under CI) or skip unless this machine can build shards: initdb, pg_ctl, postgres_fdw."""
    from devtools.patroni import ClusterUnavailable
    from devtools.shards import require_servers

    from .databases import unavailable

    try:
        require_servers()
    except ClusterUnavailable as err:
        unavailable("a sharded PostgreSQL topology (initdb, pg_ctl, postgres_fdw)", str(err))


# Rows of orders not in the partition their hash names, under the bounds the coordinator has now.
MISPLACED_ROWS = text(
    "SELECT count(*) FROM orders o JOIN pg_class c ON c.oid = o.tableoid "
    "WHERE NOT satisfies_hash_partition('orders'::regclass, "
    "  substring(pg_get_expr(c.relpartbound, c.oid) from 'modulus (\\d+)')::int, "
    "  substring(pg_get_expr(c.relpartbound, c.oid) from 'remainder (\\d+)')::int, o.id)"
)


@contextmanager
def partitions_watched(coordinator: Engine, count: int) -> Iterator[list[float]]:
    """Watch the coordinator's partitions of orders in a thread while the block runs; the list
    gets the moment (monotonic) they first numbered `count`: when an add-shard switched."""
    switched: list[float] = []
    watching = threading.Event()
    parts = "SELECT count(*) FROM pg_inherits WHERE inhparent = CAST('orders' AS regclass)"

    def watch() -> None:
        while not watching.is_set() and not switched:
            with coordinator.connect() as conn:
                if conn.scalar(text(parts)) == count:
                    switched.append(time.monotonic())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield switched
    finally:
        watching.set()
        watcher.join()


def link(html: str, rel: str) -> str | None:
    """The URL of a page's rel=next/prev link, or of its "Load more" GET form (its hidden fields)."""
    match = re.search(rf'href="([^"]+)" rel="{rel}"', html)
    if match:
        return match.group(1).replace("&amp;", "&")
    form = re.search(r'<form method="get" action="([^"]+)"[^>]*data-load-more>(.*?)</form>', html, re.S)
    if rel != "next" or not form:
        return None
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]+)">', form.group(2))
    return form.group(1) + "?" + urlencode(fields)


def _a_name(raw: str) -> bool:
    try:
        grammar.customer_name(raw)
    except grammar.GrammarError:
        return False
    return True


def name_strategies(letters: str, max_size: int) -> tuple[st.SearchStrategy[str], st.SearchStrategy[str]]:
    """Text as a client may send it for a name (`letters` and any other character but surrogates,
    controls and line breaks), and of that text what the API takes as a customer's name, as it
    stores it (grammar.customer_name)."""
    raw = st.text(
        st.one_of(st.sampled_from(letters), st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp"))),
        min_size=1,
        max_size=max_size,
    )
    return raw, raw.filter(_a_name).map(grammar.customer_name)


def walk_api(
    client: Any, between_pages: Callable[[], None] | None = None, **params: Any
) -> list[dict[str, Any]]:
    """Every item of /api/orders with `params`, page after page by next_cursor, each answer a 200
    whose cursors agree with has_more and has_previous. `between_pages()`, if given, runs before
    each next page is asked for: the writes of others while the reader reads."""
    items: list[dict[str, Any]] = []
    response = client.get("/api/orders", query_string=params)
    while True:
        assert response.status_code == 200, response.json
        body = response.json
        assert body["has_more"] == (body["next_cursor"] is not None)
        assert body["has_previous"] == (body["prev_cursor"] is not None)
        items += body["items"]
        if not body["has_more"]:
            return items
        if between_pages is not None:
            between_pages()
        response = client.get("/api/orders", query_string={**params, "after": body["next_cursor"]})
