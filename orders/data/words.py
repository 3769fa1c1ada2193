"""The name words kept with every order (order_words, orders/data/models.py), written in bulk: what
a Core INSERT of orders (the seed) leaves without words. The ORM's inserts write their own
(models.py); the search reads them (orders/finding/search.py)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Column, Connection, MetaData, Table, exists, func, insert, select

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

    The pairs go in a temporary table keyed by (key, word), so each order finds its name's words
    by that key (a derived table of literals is not indexed: SQLite and MariaDB then read the
    orders once per pair). `keys`: the customer keys those orders can have, when the caller knows
    them (the seed: its names), saving a scan for them. `fresh`: no order in the range has words
    yet (a seed into empty tables): no order is looked up, and the rows go in the primary key's
    order (id, word)."""
    orders = Order.__table__
    in_range = orders.c.id.between(low, high)
    if keys is None:
        keys = connection.scalars(select(orders.c.customer_key).where(in_range).distinct()).all()
    names = Table(
        "name_words",
        MetaData(),
        Column("key", NameKey(), primary_key=True),
        Column("word", NameKey(), primary_key=True),
        prefixes=["TEMPORARY"],
    )
    pairs = [{"key": key, "word": word} for key in sorted(set(keys)) for word in sorted(word_prefixes(key))]
    if not pairs:
        return 0
    names.create(connection)
    try:
        connection.execute(insert(names), pairs)
        rows = (
            select(orders.c.id, names.c.word, orders.c.created_at, orders.c.amount, orders.c.customer_key)
            .join_from(orders, names, names.c.key == orders.c.customer_key)
            .where(in_range)
        )
        if fresh:
            rows = rows.order_by(orders.c.id, names.c.word)
        else:
            rows = rows.where(~exists().where(ORDER_WORDS.c.id == orders.c.id))
        columns = ["id", "word", "created_at", "amount", "customer_key"]
        return connection.execute(insert(ORDER_WORDS).from_select(columns, rows)).rowcount
    finally:
        names.drop(connection)


def last_order_id(connection: Connection) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(Order.id), 0))) or 0)
