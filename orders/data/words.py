"""The name words kept with every order (order_words, orders/data/models.py), written in bulk: what
a Core INSERT of orders (the seed) leaves without words. The ORM's inserts write their own
(models.py); the search reads them (orders/finding/search.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Connection, MetaData, Table, exists, func, insert, literal, select, union_all

from orders.data.models import ORDER_WORDS, Order
from orders.data.names import NameKey, word_prefixes


def index_orders(
    connection: Connection,
    low: int,
    high: int,
    *,
    keys: Sequence[str] | None = None,
    fresh: bool = False,
) -> int:
    """Write the order_words rows of the orders with `low <= id <= high` that have none yet (what
    a Core INSERT wrote: the seed), in the database itself: one INSERT ... SELECT joining the
    orders to the (customer_key, word) pairs of their distinct names. Returns the rows written.

    `keys`: the customer keys those orders can have, when the caller knows them (the seed: its
    names), saving a scan for them. `fresh`: no order in the range has words yet (a seed into
    empty tables): the rows go in the primary key's order, and no order is looked up."""
    orders = Order.__table__
    in_range = orders.c.id.between(low, high)
    if keys is None:
        keys = connection.scalars(select(orders.c.customer_key).where(in_range).distinct()).all()
    pairs = [(key, word) for key in sorted(set(keys)) for word in sorted(word_prefixes(key))]
    columns = ["id", "word", "created_at", "amount", "customer_key"]
    if fresh:
        return _index_fresh(connection, in_range, pairs, columns)
    written = 0
    # A name's pairs all in one statement: the NOT EXISTS of the next would skip its orders.
    chunks: list[list[tuple[str, str]]] = [[]]
    for key in sorted(set(keys)):
        if len(chunks[-1]) >= 200:
            chunks.append([])
        chunks[-1] += [pair for pair in pairs if pair[0] == key]
    for chunk in filter(None, chunks):
        literals = (
            select(literal(key, NameKey()).label("key"), literal(word, NameKey()).label("word"))
            for key, word in chunk
        )
        names = union_all(*literals).subquery("names")
        has_words = exists().where(ORDER_WORDS.c.id == orders.c.id)
        rows = (
            select(orders.c.id, names.c.word, orders.c.created_at, orders.c.amount, orders.c.customer_key)
            .join_from(orders, names, names.c.key == orders.c.customer_key)
            .where(in_range, ~has_words)
            .order_by(names.c.word, orders.c.id)
        )
        written += connection.execute(insert(ORDER_WORDS).from_select(columns, rows)).rowcount
    return written


def _index_fresh(
    connection: Connection, in_range: Any, pairs: list[tuple[str, str]], columns: list[str]
) -> int:
    """Orders with no words yet (a seed into empty tables): the pairs in a temporary table keyed
    by (key, word), so each order finds its name's words by that key and the rows go in the
    primary key's order (id, word). (A derived table of literals is not indexed: SQLite then
    reads the orders once per pair.)"""
    orders = Order.__table__
    names = Table(
        "seed_name_words",
        MetaData(),
        Column("key", NameKey(), primary_key=True),
        Column("word", NameKey(), primary_key=True),
        prefixes=["TEMPORARY"],
    )
    names.create(connection)
    try:
        connection.execute(insert(names), [{"key": key, "word": word} for key, word in pairs])
        rows = (
            select(orders.c.id, names.c.word, orders.c.created_at, orders.c.amount, orders.c.customer_key)
            .join_from(orders, names, names.c.key == orders.c.customer_key)
            .where(in_range)
            .order_by(orders.c.id, names.c.word)
        )
        return connection.execute(insert(ORDER_WORDS).from_select(columns, rows)).rowcount
    finally:
        names.drop(connection)


def last_order_id(connection: Connection) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(Order.id), 0))) or 0)
