"""The Order model and its indexes (one per sort of orders/finding/sorts.py, each ending in id), the
tables kept with every order (the name words the search reads, the per-status counts the
estimates read, the per-bucket counts the rail reads), and the idempotency keys of POST
/api/orders (orders/writing/idempotency.py)."""

from __future__ import annotations

import datetime as dt
import enum
import weakref
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Identity,
    Index,
    Insert,
    SmallInteger,
    String,
    Table,
    Text,
    delete,
    event,
    insert,
    inspect,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Mapped, Mapper, mapped_column, validates
from sqlalchemy.orm.attributes import get_history

from orders.data.names import NameKey, name_key, name_words
from orders.data.types import BigId, Money, UTCDateTime

CUSTOMER_MAX_LENGTH = 64  # bounded so a `customer` cursor stays under 512 characters
MAX_ID = 2**63 - 1  # ids are BIGINT: a larger number names no order (and the engines would overflow)


class Status(enum.StrEnum):
    PENDING = "pending"
    PAID = "paid"
    SHIPPED = "shipped"
    CANCELLED = "cancelled"


STATUSES = [s.value for s in Status]


def _customer_key_default(context: Any) -> str:
    """A Core INSERT (seeding, imports) that gives `customer` only gets its key here."""
    return name_key(context.get_current_parameters()["customer"])


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(BigId, Identity(), primary_key=True)
    customer: Mapped[str] = mapped_column(String(CUSTOMER_MAX_LENGTH))
    # The name in human order (orders/data/names.py): what "Customer A–Z", go-to by name and search read.
    # Written with every order: by `_set_customer` for ORM objects, by the column default for Core
    # INSERTs, by migration 0002 for the rows before it; the PostgreSQL seed passes it itself.
    customer_key: Mapped[str] = mapped_column(NameKey(), default=_customer_key_default)
    amount: Mapped[Decimal] = mapped_column(Money)
    # Plain strings checked by the app: an enum type would differ on each engine.
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_orders_created_at_id", created_at.desc(), id.desc()),
        Index("ix_orders_amount_id", amount.desc(), id.desc()),
        Index("ix_orders_customer_key_id", customer_key, id),
        # The orders of one name in the time and amount sorts: a search of several words reads the
        # orders of the names holding them, one range per name (orders/finding/named.py).
        Index("ix_orders_customer_key_created_at_id", customer_key, created_at.desc(), id.desc()),
        Index("ix_orders_customer_key_amount_id", customer_key, amount.desc(), id.desc()),
        Index("ix_orders_status_created_at_id", status, created_at.desc(), id.desc()),
        {"sqlite_autoincrement": True},  # never reuse an id (see the first migration)
    )

    @validates("customer")
    def _set_customer(self, _name: str, value: str) -> str:
        self.customer_key = name_key(value)
        return value

    def __repr__(self) -> str:
        return (
            f"<Order {self.id} {self.customer!r} {self.amount} {self.status} "
            f"{self.created_at:%Y-%m-%dT%H:%M:%S.%fZ}>"
        )


# A list row's columns, in the order a page's rows carry them (ListRequest.statement selects the
# table's columns): the rows template and the API's row_json unpack a row by position, since each
# read of a SQLAlchemy Row by name is a lookup of its own (a fifteenth of a page's instructions).
# tests/test_pages.py holds both readers to this order.
LIST_ROW = tuple(Order.__table__.columns.keys())


class OrderWord(Base):
    """One prefix of one word of an order's customer name (orders/data/names.py `name_words`), with
    the order's sort columns: the search reads `word = :q` in the sort's order, one index range
    per sort (orders/finding/search.py). Written with the order (`_write_words` below, the seed's
    `index_orders`), deleted with it by a trigger on orders (migration 0004: a foreign key would be
    checked on every word written)."""

    __tablename__ = "order_words"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)  # the order's
    word: Mapped[str] = mapped_column(NameKey(), primary_key=True)
    # Copies of the order's own (orders are never re-dated nor re-priced; `_rewrite_words` keeps
    # them if an ORM update ever does): the same names, so a row's key reads either way.
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)
    amount: Mapped[Decimal] = mapped_column(Money)
    customer_key: Mapped[str] = mapped_column(NameKey())

    __table_args__ = (
        Index("ix_order_words_created_at", word, created_at.desc(), id.desc()),
        Index("ix_order_words_amount", word, amount.desc(), id.desc()),
        Index("ix_order_words_customer_key", word, customer_key, id),
        {"sqlite_with_rowid": False},  # the key is the table: one B-tree fewer to write per word
    )


ORDER_WORDS = cast(Table, OrderWord.__table__)  # declared as FromClause; a mapped class has a Table


class CustomerWord(Base):
    """One prefix of one word of a customer name (`name_words`), once per name key: the names
    table a search of several words reads first (orders/finding/named.py). Names are far fewer
    than orders, so "which names hold all these words" is answered here, before any order is
    read. Written with every order that brings a new name (`_write_words` below, the seed's
    `index_orders`, migration 0008); never deleted with an order: a name left without orders
    costs one empty read of its orders, never a wrong row."""

    __tablename__ = "customer_words"

    word: Mapped[str] = mapped_column(NameKey(), primary_key=True)
    customer_key: Mapped[str] = mapped_column(NameKey(), primary_key=True)

    __table_args__ = (
        # A name's words by its key: the check of each name of the rarest word for the others
        # (orders/finding/named.py) is one short range here. Without it MariaDB read each other
        # word's whole range per name (300 ms for five words at 300,000 orders, 2 ms with it).
        Index("ix_customer_words_customer_key", customer_key, word),
        {"sqlite_with_rowid": False},
    )


CUSTOMER_WORDS = cast(Table, CustomerWord.__table__)

STRIPES = 16  # rows per status in order_counts: concurrent writers rarely wait on one row


class OrderCount(Base):
    """How many orders have each status, in STRIPES rows per status (an order counts in stripe
    id % STRIPES): kept by triggers on `orders` in the writing transaction (migration 0004), read
    by orders/finding/estimates.py as sum(n) per status."""

    __tablename__ = "order_counts"

    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    stripe: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    n: Mapped[int] = mapped_column(BigInteger)


class RailCount(Base):
    """How many orders fall in each bucket of each rail family (a day, an amount bin, an initial),
    per status, in STRIPES rows per bucket (as OrderCount): kept by triggers on `orders` in the
    writing transaction (migration 0008, which says how each bucket is computed), read by
    orders/finding/rail.py as sum(n) per bucket."""

    __tablename__ = "rail_counts"

    family: Mapped[str] = mapped_column(String(8), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    bucket: Mapped[str] = mapped_column(String(16), primary_key=True)
    stripe: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    n: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = ({"sqlite_with_rowid": False},)  # the key is the table: a rail reads one range


RAIL_COUNTS = cast(Table, RailCount.__table__)


def word_rows(
    order_id: int, customer: str, customer_key: str, created_at: dt.datetime, amount: Decimal
) -> list[dict[str, Any]]:
    """The order_words rows of one order (its name's words: `name_words`)."""
    common = {"id": order_id, "created_at": created_at, "amount": amount, "customer_key": customer_key}
    return [{**common, "word": word} for word in sorted(name_words(customer))]


_TABLES: weakref.WeakKeyDictionary[Engine, dict[str, bool]] = weakref.WeakKeyDictionary()


def _has_table(connection: Connection, name: str) -> bool:
    """Whether the database has this table: a sharded coordinator has neither of the two below
    (orders/data/shards.py builds only the orders parent there). Remembered once found, per engine
    (not when missing: the app may run before `init-db` migrates)."""
    known = _TABLES.setdefault(connection.engine, {})
    if not known.get(name):
        known[name] = inspect(connection).has_table(name)
    return known[name]


def keeps_words(connection: Connection) -> bool:
    return _has_table(connection, OrderWord.__tablename__)


def keeps_customer_words(connection: Connection) -> bool:
    return _has_table(connection, CustomerWord.__tablename__)


def keeps_counts(connection: Connection) -> bool:
    return _has_table(connection, OrderCount.__tablename__)


def keeps_rail(connection: Connection) -> bool:
    return _has_table(connection, RailCount.__tablename__)


def insert_ignoring_duplicates(connection: Connection, table: Table) -> Insert:
    """An INSERT that skips rows whose primary key is there already, in each engine's words."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect in ("mysql", "mariadb"):
        return insert(table).prefix_with("IGNORE")
    return insert(table).prefix_with("OR IGNORE")


def add_counts(connection: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Each row's `n` added to the row of its primary key, inserted where there is none, in
    each engine's words."""
    dialect = connection.dialect.name
    if dialect in ("mysql", "mariadb"):
        upsert = mysql.insert(table)
        connection.execute(upsert.on_duplicate_key_update(n=table.c.n + upsert.inserted.n), rows)
        return
    chosen = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
    keys = [column.name for column in table.primary_key]
    connection.execute(
        chosen.on_conflict_do_update(index_elements=keys, set_={"n": table.c.n + chosen.excluded.n}), rows
    )


def write_customer_words(connection: Connection, rows: list[dict[str, Any]]) -> None:
    """The names table's rows of these order_words rows (each (word, customer_key) once)."""
    pairs = sorted({(row["word"], row["customer_key"]) for row in rows})
    if pairs and keeps_customer_words(connection):
        connection.execute(
            insert_ignoring_duplicates(connection, CUSTOMER_WORDS),
            [{"word": word, "customer_key": key} for word, key in pairs],
        )


@event.listens_for(Order, "after_insert")
def _write_words(_mapper: Mapper[Order], connection: Connection, order: Order) -> None:
    # In the order's own flush, so its transaction commits both or neither.
    rows = word_rows(order.id, order.customer, order.customer_key, order.created_at, order.amount)
    if rows and keeps_words(connection):  # a name of punctuation alone has no words
        connection.execute(insert(ORDER_WORDS), rows)
        write_customer_words(connection, rows)


@event.listens_for(Order, "after_update")
def _rewrite_words(_mapper: Mapper[Order], connection: Connection, order: Order) -> None:
    changed = any(get_history(order, name).has_changes() for name in ("customer", "created_at", "amount"))
    if changed and keeps_words(connection):
        connection.execute(delete(ORDER_WORDS).where(ORDER_WORDS.c.id == order.id))
        _write_words(_mapper, connection, order)


class IdempotencyKey(Base):
    """A POST /api/orders that carried an Idempotency-Key: the order it created and its answer,
    committed in the same transaction as the order (orders/writing/idempotency.py)."""

    __tablename__ = "idempotency_keys"

    # sha256 of the key, in hex: one fixed length and no collation on any engine (MariaDB's
    # default one would take "abc" and "ABC" for the same key).
    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of the request's JSON body
    order_id: Mapped[int] = mapped_column(BigId)
    response: Mapped[str] = mapped_column(Text)  # the 201's JSON body, sent again on a replay
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_idempotency_keys_created_at", created_at),)
