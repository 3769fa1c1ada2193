"""Create the orders table with one index per sort, each ending in id.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

from orders.data.types import BigId, Money, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("id", BigId, sa.Identity(), primary_key=True),
        sa.Column("customer", sa.String(64), nullable=False),
        sa.Column("amount", Money, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        # Without AUTOINCREMENT SQLite hands a deleted maximum id to the next insert: a new
        # order would then share its id (and data-id) with one a reader has already seen.
        sqlite_autoincrement=True,
    )
    orders = sa.table(
        "orders",
        sa.column("id"),
        sa.column("customer"),
        sa.column("amount"),
        sa.column("status"),
        sa.column("created_at"),
    )
    c = orders.c
    op.create_index("ix_orders_created_at_id", "orders", [c.created_at.desc(), c.id.desc()])
    op.create_index("ix_orders_amount_id", "orders", [c.amount.desc(), c.id.desc()])
    op.create_index("ix_orders_customer_id", "orders", ["customer", "id"])
    op.create_index("ix_orders_status_created_at_id", "orders", [c.status, c.created_at.desc(), c.id.desc()])


def downgrade() -> None:
    op.drop_table("orders")
