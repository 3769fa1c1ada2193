"""PostgreSQL tells its listeners when orders are inserted: NOTIFY orders_new, once per INSERT
statement (a seed of 300,000 rows sends one), delivered at the writing transaction's commit and
only then (a rollback sends nothing). Each app process LISTENs on one connection and wakes its
live streams (orders/data/changes.py, orders/views/stream.py). A trigger, not a line in the
API's write: every writer is heard, the seed, a bulk load or SQL typed by hand too.

SQLite and MariaDB have no such channel: the app checks them once a second instead.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# The channel's name: orders/data/changes.py CHANNEL listens on it.
CHANNEL = "orders_new"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # No payload: the listener reads what changed itself (the transaction that notifies cannot
    # know whether a later one commits first), and equal notifications of one transaction are
    # folded into one by PostgreSQL.
    op.execute(
        f"""
        CREATE FUNCTION orders_notify_new() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', '');
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER orders_notify_new AFTER INSERT ON orders "
        "FOR EACH STATEMENT EXECUTE FUNCTION orders_notify_new()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER orders_notify_new ON orders")
    op.execute("DROP FUNCTION orders_notify_new()")
