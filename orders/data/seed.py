"""Demo and benchmark data: three orders per minute, so equal timestamps are the common case."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import Table, insert, select, text
from sqlalchemy.orm import Session
from tqdm import tqdm

from orders.data.models import ORDER_WORDS, STATUSES, Order, keeps_words
from orders.data.names import name_key
from orders.data.words import index_orders, last_order_id

CUSTOMERS = [
    "Ana Souza", "Bruno Lima", "Carla Mendes", "Diego Alves", "Elisa Rocha", "Felipe Costa",
    "Gabriela Dias", "Henrique Melo", "Isabela Nunes", "João Pereira", "Karina Lopes",
    "Lucas Ribeiro", "Mariana Castro", "Nicolas Teixeira", "Olívia Martins", "Paulo Barros",
    "Quésia Farias", "Rafael Gomes", "Sofia Cardoso", "Tiago Moreira", "Úrsula Freitas",
    "Vitor Araújo", "Wesley Pinto", "Yara Monteiro", "Zeca Batista",
]  # fmt: skip
# Weighted like a real shop: most orders are paid or shipped.
STATUS_CYCLE = ["paid", "shipped", "paid", "pending", "shipped", "paid", "cancelled", "shipped"]
BATCH_SIZE = 10_000
PG_BATCH_SIZE = 50_000
BULK_ROWS = 10_000  # seeding at least this many into an empty words table builds its indexes after
assert set(STATUS_CYCLE) == set(STATUSES)


def _start(now: dt.datetime | None) -> dt.datetime:
    now = now or dt.datetime.now(dt.UTC)
    return now.replace(second=0, microsecond=0)


def generate_rows(
    rows: int, *, per_minute: int = 3, now: dt.datetime | None = None
) -> Iterator[dict[str, Any]]:
    """Row g (0-based, ids ascending) is placed (rows-1-g)//per_minute minutes before `now`."""
    start = _start(now)
    for g in range(rows):
        yield {
            "customer": CUSTOMERS[(g * 7) % len(CUSTOMERS)],
            "amount": Decimal((g * 7919) % 99991 + 100) / 100,
            "status": STATUS_CYCLE[(g * 13) % len(STATUS_CYCLE)],
            "created_at": start - dt.timedelta(minutes=(rows - 1 - g) // per_minute),
        }


def _seed_postgresql(
    session: Session,
    rows: int,
    per_minute: int,
    now: dt.datetime | None,
    bar: Any,
    index_new: Callable[[], None],
) -> None:
    # The fast path: PostgreSQL generates the rows itself, no round trips; in slices of
    # PG_BATCH_SIZE, so progress shows and no one statement runs for long.
    for low in range(0, rows, PG_BATCH_SIZE):
        high = min(rows, low + PG_BATCH_SIZE) - 1
        _seed_postgresql_slice(session, rows, per_minute, now, low, high)
        index_new()
        bar.update(high - low + 1)


def _seed_postgresql_slice(
    session: Session, rows: int, per_minute: int, now: dt.datetime | None, low: int, high: int
) -> None:
    session.execute(
        text(
            """
            INSERT INTO orders (customer, customer_key, amount, status, created_at)
            SELECT (CAST(:customers AS text[]))[1 + (g * 7) % :n_customers],
                   (CAST(:customer_keys AS text[]))[1 + (g * 7) % :n_customers],
                   ((g * 7919) % 99991 + 100) / 100.0,
                   (CAST(:statuses AS text[]))[1 + (g * 13) % :n_statuses],
                   CAST(:start AS timestamptz) - make_interval(mins => ((:rows - 1 - g) / :per_minute)::int)
            FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS g
            """
        ),
        {
            "customers": CUSTOMERS,
            # Computed here, by the one normalization (orders/data/names.py), never by SQL.
            "customer_keys": [name_key(name) for name in CUSTOMERS],
            "n_customers": len(CUSTOMERS),
            "statuses": STATUS_CYCLE,
            "n_statuses": len(STATUS_CYCLE),
            "start": _start(now),
            "rows": rows,
            "per_minute": per_minute,
            "low": low,
            "high": high,
        },
    )


def seed_orders(
    session: Session,
    rows: int,
    *,
    per_minute: int = 3,
    now: dt.datetime | None = None,
    progress: bool = False,
) -> None:
    """Insert `rows` orders ending at `now`, `per_minute` sharing each minute, with their name
    words (orders/finding/search.py: written by the database from the distinct names, not row by row),
    and commit."""
    if rows <= 0:
        return
    words = keeps_words(session.connection())
    # Into an empty words table, its three (word, ...) indexes are built once at the end from
    # sorted rows rather than kept through every word written (measured: a quarter to a third of
    # the time). Index objects of the model: the same definitions as the migration's.
    bulk = words and rows >= BULK_ROWS and session.scalar(select(ORDER_WORDS.c.id).limit(1)) is None
    if bulk:
        for index in ORDER_WORDS.indexes:
            index.drop(session.connection())
    try:
        _seed(session, rows, per_minute, now, progress, words)
    except BaseException:
        session.rollback()  # PostgreSQL and SQLite roll the drops back too
        raise
    finally:
        if bulk:
            for index in ORDER_WORDS.indexes:
                index.create(session.connection(), checkfirst=True)
            session.commit()


def _seed(
    session: Session, rows: int, per_minute: int, now: dt.datetime | None, progress: bool, words: bool
) -> None:
    indexed = last_order_id(session.connection())

    def index_new() -> None:
        nonlocal indexed
        if words:
            high = last_order_id(session.connection())
            index_orders(session.connection(), indexed + 1, high)
            indexed = high

    table = cast(Table, Order.__table__)  # declared as FromClause; a mapped class has a Table
    batch: list[dict[str, Any]] = []
    with tqdm(total=rows, unit="rows", disable=not progress, desc="seeding") as bar:
        if session.get_bind().dialect.name == "postgresql":
            _seed_postgresql(session, rows, per_minute, now, bar, index_new)
            session.commit()
            return
        # Elsewhere: batched executemany (PyMySQL folds each batch into multi-row INSERTs).
        sqlite = session.get_bind().dialect.name == "sqlite"
        if sqlite:
            # The words land all over three (word, ...) indexes: SQLite's default 2 MB page cache
            # rereads them from disk (measured: seeding a fifth to a third faster with 256 MB).
            session.execute(text("PRAGMA cache_size = -262144"))
        for row in generate_rows(rows, per_minute=per_minute, now=now):
            batch.append(row)
            if len(batch) == BATCH_SIZE:
                session.execute(insert(table), batch)
                index_new()
                bar.update(len(batch))
                batch = []
        if batch:
            session.execute(insert(table), batch)
            index_new()
            bar.update(len(batch))
        if sqlite:
            session.execute(text("PRAGMA cache_size = -2000"))  # SQLite's default, for the pool
    session.commit()
