"""The Order model and its indexes (one per sort of orders/sorts.py, each ending in id), and the
idempotency keys of POST /api/orders (orders/idempotency.py)."""

from __future__ import annotations

import datetime as dt
import enum
from decimal import Decimal
from typing import Any

from sqlalchemy import Identity, Index, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, validates

from .names import NameKey, name_key
from .types import BigId, Money, UTCDateTime

CUSTOMER_MAX_LENGTH = 64  # bounded so a `customer` cursor stays under 512 characters


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
    # The name in human order (orders/names.py): what "Customer A–Z", go-to by name and search read.
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


class IdempotencyKey(Base):
    """A POST /api/orders that carried an Idempotency-Key: the order it created and its answer,
    committed in the same transaction as the order (orders/idempotency.py)."""

    __tablename__ = "idempotency_keys"

    # sha256 of the key, in hex: one fixed length and no collation on any engine (MariaDB's
    # default one would take "abc" and "ABC" for the same key).
    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))  # sha256 of the request's JSON body
    order_id: Mapped[int] = mapped_column(BigId)
    response: Mapped[str] = mapped_column(Text)  # the 201's JSON body, sent again on a replay
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_idempotency_keys_created_at", created_at),)
