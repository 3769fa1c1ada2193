"""Add orders.customer_key, the customer name in human order (orders/data/names.py), fill it for the
rows already there, and index it with the id in place of the byte-order (customer, id) index.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from orders.data.names import NameKey, name_key

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BATCH = 5000


def upgrade() -> None:
    # NOT NULL with a default of '' for the rows already there (SQLite cannot add a NOT NULL
    # column without one, nor drop it without copying the table), filled right below.
    op.add_column("orders", sa.Column("customer_key", NameKey(), nullable=False, server_default=""))
    orders = sa.table("orders", sa.column("id"), sa.column("customer"), sa.column("customer_key"))
    bind = op.get_bind()
    last = 0
    # In id order, a batch at a time: memory stays flat on a big table, and each UPDATE names
    # its rows by primary key.
    while True:
        rows = bind.execute(
            sa.select(orders.c.id, orders.c.customer)
            .where(orders.c.id > last)
            .order_by(orders.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        bind.execute(
            orders.update()
            .where(orders.c.id == sa.bindparam("row_id"))
            .values(customer_key=sa.bindparam("key")),
            [{"row_id": row_id, "key": name_key(customer)} for row_id, customer in rows],
        )
        last = rows[-1][0]
    if bind.dialect.name != "sqlite":
        # Every writer gives the key (orders/data/models.py); a row without one would be a bug.
        op.alter_column(
            "orders", "customer_key", server_default=None, existing_type=NameKey(), existing_nullable=False
        )
    op.drop_index("ix_orders_customer_id", "orders")
    op.create_index("ix_orders_customer_key_id", "orders", ["customer_key", "id"])


def downgrade() -> None:
    op.drop_index("ix_orders_customer_key_id", "orders")
    op.create_index("ix_orders_customer_id", "orders", ["customer", "id"])
    op.drop_column("orders", "customer_key")
