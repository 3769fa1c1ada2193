"""Drop migration 0005's NOTIFY trigger: a transaction that NOTIFYs holds a database-wide lock from
its commit's start to its end, the wait for a synchronous standby included, so every order's
INSERT queued behind the one commit waiting for the standby. The app reads whether new orders
arrived once a second instead, on every engine (orders/data/changes.py).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS orders_notify_new ON orders")
    op.execute("DROP FUNCTION IF EXISTS orders_notify_new()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        """
        CREATE FUNCTION orders_notify_new() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('orders_new', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER orders_notify_new AFTER INSERT ON orders "
        "FOR EACH STATEMENT EXECUTE FUNCTION orders_notify_new()"
    )
