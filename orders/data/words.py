"""The name words kept with every order (order_words, orders/data/models.py) and with every name
(customer_words), written in bulk: what a Core INSERT of orders (the seed) leaves without words.
The ORM's inserts write their own (models.py); the search reads them (orders/finding/search.py,
orders/finding/named.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Column, Connection, MetaData, Table, exists, func, insert, select

from orders.data.models import (
    CUSTOMER_WORDS,
    ORDER_WORDS,
    Order,
    insert_ignoring_duplicates,
    keeps_customer_words,
    word_rows,
    write_customer_words,
)
from orders.data.names import NameKey, key_is_whole, word_prefixes

_PAIRS = Table(
    "name_words",
    MetaData(),
    Column("key", NameKey(), primary_key=True),
    Column("word", NameKey(), primary_key=True),
    prefixes=["TEMPORARY"],
)


def drop_temporary(connection: Connection, table: Table) -> None:
    """Drop a temporary table inside the caller's transaction: MariaDB commits the transaction
    on a DROP TABLE, even of a temporary table, unless it says DROP TEMPORARY TABLE (a seed
    interrupted after it would have left its orders behind)."""
    if connection.dialect.name in ("mysql", "mariadb"):
        connection.exec_driver_sql(f"DROP TEMPORARY TABLE {table.name}")
    else:
        table.drop(connection)


@contextlib.contextmanager
def name_pairs(connection: Connection, keys: Sequence[str]) -> Iterator[Table | None]:
    """The (key, word) pairs of these name keys' whole ones (every prefix of every word), in a
    temporary table keyed by (key, word), for as long as the block runs (None: no pairs); their
    words go into customer_words too (those not there yet). A seed makes it once for all its
    batches (its names are the same in each)."""
    whole = sorted(key for key in set(keys) if key_is_whole(key))
    pairs = [{"key": key, "word": word} for key in whole for word in sorted(word_prefixes(key))]
    if not pairs:
        yield None
        return
    _PAIRS.create(connection)
    try:
        connection.execute(insert(_PAIRS), pairs)
        if keeps_customer_words(connection):
            named = select(_PAIRS.c.word, _PAIRS.c.key).order_by(_PAIRS.c.word, _PAIRS.c.key)
            into = insert_ignoring_duplicates(connection, CUSTOMER_WORDS)
            connection.execute(into.from_select(["word", "customer_key"], named))
        yield _PAIRS
    finally:
        drop_temporary(connection, _PAIRS)


def index_orders(
    connection: Connection,
    low: int,
    high: int,
    *,
    keys: Sequence[str] | None = None,
    fresh: bool = False,
    pairs: Table | None = None,
) -> int:
    """Write the order_words rows of the orders with `low <= id <= high` that have none yet (what
    a Core INSERT wrote: the seed), in the database itself: one INSERT ... SELECT joining the
    orders to the (customer_key, word) pairs of their distinct names. Returns the rows written.

    The pairs go in a temporary table keyed by (key, word) (`name_pairs`; `pairs`: one the
    caller made for these keys), so each order finds its name's words by that key (a derived
    table of literals is not indexed: SQLite and MariaDB then read the orders once per pair).
    `keys`: the customer keys those orders can have, when the caller knows them (the seed: its
    names), saving a scan for them. `fresh`: no order in the range has words yet (a seed into
    empty tables): no order is looked up, and the rows go in the primary key's order (id, word)."""
    orders = Order.__table__
    in_range = orders.c.id.between(low, high)
    if keys is None:
        keys = connection.scalars(select(orders.c.customer_key).where(in_range).distinct()).all()
    # A key cut at KEY_LENGTH lost the end of its name, and its words with it (orders/data/names.py
    # name_words): those orders get their rows one by one from their names, after the others.
    cut = sorted(key for key in set(keys) if not key_is_whole(key))
    written = _from_names(connection, in_range, cut, fresh=fresh) if cut else 0
    if pairs is not None:
        return written + _from_pairs(connection, pairs, in_range, fresh=fresh)
    with name_pairs(connection, keys) as made:
        return written + (0 if made is None else _from_pairs(connection, made, in_range, fresh=fresh))


def _from_pairs(connection: Connection, names: Table, in_range: Any, *, fresh: bool) -> int:
    orders = Order.__table__
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
    return int(connection.execute(insert(ORDER_WORDS).from_select(columns, rows)).rowcount)


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
        write_customer_words(connection, rows)
    return len(rows)


def last_order_id(connection: Connection) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(Order.id), 0))) or 0)
