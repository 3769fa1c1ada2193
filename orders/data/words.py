"""The name words kept with every order (order_words, orders/data/models.py), written in bulk: what
a Core INSERT of orders (the seed) leaves without words. The ORM's inserts write their own
(models.py); the search reads them (orders/finding/search.py)."""

from __future__ import annotations

from sqlalchemy import Connection, exists, func, insert, literal, select, union_all

from orders.data.models import ORDER_WORDS, Order
from orders.data.names import NameKey, word_prefixes


def index_orders(connection: Connection, low: int, high: int) -> int:
    """Write the order_words rows of the orders with `low <= id <= high` that have none yet (what
    a Core INSERT wrote: the seed), in the database itself: one INSERT ... SELECT joining the
    orders to the (customer_key, word) pairs of their distinct names. Returns the rows written."""
    orders = Order.__table__
    in_range = orders.c.id.between(low, high)
    keys = connection.scalars(select(orders.c.customer_key).where(in_range).distinct()).all()
    written = 0
    # A name's pairs all in one statement: the NOT EXISTS of the next would skip its orders.
    chunks: list[list[tuple[str, str]]] = [[]]
    for key in keys:
        if len(chunks[-1]) >= 200:
            chunks.append([])
        chunks[-1] += [(key, word) for word in sorted(word_prefixes(key))]
    for chunk in filter(None, chunks):
        pairs = (
            select(literal(key, NameKey()).label("key"), literal(word, NameKey()).label("word"))
            for key, word in chunk
        )
        names = union_all(*pairs).subquery("names")
        has_words = exists().where(ORDER_WORDS.c.id == orders.c.id)
        rows = (
            select(orders.c.id, names.c.word, orders.c.created_at, orders.c.amount, orders.c.customer_key)
            .join_from(orders, names, names.c.key == orders.c.customer_key)
            .where(in_range, ~has_words)
            .order_by(names.c.word, orders.c.id)
        )
        columns = ["id", "word", "created_at", "amount", "customer_key"]
        written += connection.execute(insert(ORDER_WORDS).from_select(columns, rows)).rowcount
    return written


def last_order_id(connection: Connection) -> int:
    return int(connection.scalar(select(func.coalesce(func.max(Order.id), 0))) or 0)
