"""The name words kept with every order (order_words, orders/data/models.py), written in bulk: what
a Core INSERT of orders (the seed) leaves without words. The ORM's inserts write their own
(models.py); the search reads them (orders/finding/search.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Connection, MetaData, Table, exists, func, insert, select

from orders.data.models import ORDER_WORDS, Order, word_rows
from orders.data.names import NameKey, key_is_whole, word_prefixes


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
    # A key cut at KEY_LENGTH lost the end of its name, and its words with it (orders/data/names.py
    # name_words): those orders get their rows one by one from their names, after the others.
    whole = sorted(key for key in set(keys) if key_is_whole(key))
    cut = sorted(key for key in set(keys) if not key_is_whole(key))
    written = _from_names(connection, in_range, cut, fresh=fresh) if cut else 0
    pairs = [{"key": key, "word": word} for key in whole for word in sorted(word_prefixes(key))]
    if not pairs:
        return written
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
        return written + connection.execute(insert(ORDER_WORDS).from_select(columns, rows)).rowcount
    finally:
        names.drop(connection)


def _from_names(connection: Connection, in_range: Any, keys: Sequence[str], *, fresh: bool) -> int:
    """The order_words rows of the orders in range whose key is one of `keys` (cut ones), from
    their names; orders that have words already are left alone (unless `fresh`)."""
    orders = Order.__table__
    found = select(
        orders.c.id, orders.c.customer, orders.c.customer_key, orders.c.created_at, orders.c.amount
    )
    found = found.where(in_range, orders.c.customer_key.in_(keys)).order_by(orders.c.id)
    if not fresh:
        found = found.where(~exists().where(ORDER_WORDS.c.id == orders.c.id))
    rows = [word for order in connection.execute(found) for word in word_rows(*order)]
    if rows:
        connection.execute(insert(ORDER_WORDS), rows)
    return len(rows)


def last_order_id(connection: Connection) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(Order.id), 0))) or 0)
