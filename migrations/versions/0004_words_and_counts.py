"""The tables kept with every order: order_words (each prefix of each word of the customer's name,
with the order's sort columns, for the search; deleted with the order by a trigger) and
order_counts (orders per status, in stripes, kept by triggers in the writing transaction, for
the estimates).

Run it with writes stopped (as every migration here): on MariaDB, whose DDL commits at once, a
write between the triggers' creation and the counts' first fill would be counted twice or not
at all. PostgreSQL does it in one transaction holding off writers (LOCK TABLE).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

from orders.data.names import NameKey, word_prefixes
from orders.data.types import BigId, Money, UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

BATCH = 5000
STRIPES = 16  # orders/data/models.py STRIPES: an order counts in the row of stripe id % STRIPES

# One function, three statement triggers (with transition tables, so a bulk INSERT adds each
# status's count once, not once per row). The functions keep the search_path they were made with:
# a shard's orders are written by the coordinator's postgres_fdw, whose sessions search pg_catalog
# alone, where order_counts and order_words are not found; rows in (status, stripe) order, so two statements
# lock the counts' rows in the same order and never deadlock on them.
POSTGRESQL = [
    f"""
    CREATE FUNCTION orders_count_rows() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        IF TG_OP IN ('DELETE', 'UPDATE') THEN
            INSERT INTO order_counts (status, stripe, n)
            SELECT status, id % {STRIPES}, -count(*) FROM old_rows GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (status, stripe) DO UPDATE SET n = order_counts.n + EXCLUDED.n;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO order_counts (status, stripe, n)
            SELECT status, id % {STRIPES}, count(*) FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (status, stripe) DO UPDATE SET n = order_counts.n + EXCLUDED.n;
        END IF;
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER orders_count_insert AFTER INSERT ON orders REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_count_rows()",
    "CREATE TRIGGER orders_count_delete AFTER DELETE ON orders REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_count_rows()",
    "CREATE TRIGGER orders_count_update AFTER UPDATE ON orders "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_count_rows()",
]


def _add(row: str, n: str) -> str:
    return f"INSERT INTO order_counts (status, stripe, n) VALUES ({row}.status, {row}.id % {STRIPES}, {n}) "


MARIADB = [
    "CREATE TRIGGER orders_count_insert AFTER INSERT ON orders FOR EACH ROW "
    + _add("NEW", "1")
    + "ON DUPLICATE KEY UPDATE n = n + 1",
    "CREATE TRIGGER orders_count_delete AFTER DELETE ON orders FOR EACH ROW "
    + _add("OLD", "-1")
    + "ON DUPLICATE KEY UPDATE n = n - 1",
    "CREATE TRIGGER orders_count_update AFTER UPDATE ON orders FOR EACH ROW BEGIN "
    "IF NOT (OLD.status <=> NEW.status AND OLD.id <=> NEW.id) THEN "
    + _add("OLD", "-1")
    + "ON DUPLICATE KEY UPDATE n = n - 1; "
    + _add("NEW", "1")
    + "ON DUPLICATE KEY UPDATE n = n + 1; END IF; END",
]

SQLITE = [
    "CREATE TRIGGER orders_count_insert AFTER INSERT ON orders BEGIN "
    + _add("NEW", "1")
    + "ON CONFLICT (status, stripe) DO UPDATE SET n = n + 1; END",
    "CREATE TRIGGER orders_count_delete AFTER DELETE ON orders BEGIN "
    + _add("OLD", "-1")
    + "ON CONFLICT (status, stripe) DO UPDATE SET n = n - 1; END",
    "CREATE TRIGGER orders_count_update AFTER UPDATE OF status, id ON orders BEGIN "
    + _add("OLD", "-1")
    + "ON CONFLICT (status, stripe) DO UPDATE SET n = n - 1; "
    + _add("NEW", "1")
    + "ON CONFLICT (status, stripe) DO UPDATE SET n = n + 1; END",
]
# A deleted order takes its words along. A trigger, not a foreign key with ON DELETE CASCADE: a
# key is checked on every inserted word (on PostgreSQL a third of the seed's time for its words),
# and SQLite would enforce it only on connections that turned foreign keys on.
POSTGRESQL += [
    """
    CREATE FUNCTION orders_delete_words() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
    BEGIN
        DELETE FROM order_words WHERE id IN (SELECT id FROM old_rows);
        RETURN NULL;
    END $$
    """,
    "CREATE TRIGGER orders_delete_words AFTER DELETE ON orders REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION orders_delete_words()",
]
_DELETE_WORDS = "DELETE FROM order_words WHERE id = OLD.id"
MARIADB += [f"CREATE TRIGGER orders_delete_words AFTER DELETE ON orders FOR EACH ROW {_DELETE_WORDS}"]
SQLITE += [f"CREATE TRIGGER orders_delete_words AFTER DELETE ON orders BEGIN {_DELETE_WORDS}; END"]
TRIGGER_NAMES = ["orders_count_insert", "orders_count_delete", "orders_count_update", "orders_delete_words"]
TRIGGERS = {"postgresql": POSTGRESQL, "mysql": MARIADB, "mariadb": MARIADB, "sqlite": SQLITE}


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        # No write between the first count and the triggers taking over (released at commit).
        op.execute("LOCK TABLE orders IN SHARE ROW EXCLUSIVE MODE")
    op.create_table(
        "order_words",
        sa.Column("id", BigId, nullable=False),
        sa.Column("word", NameKey(), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("amount", Money, nullable=False),
        sa.Column("customer_key", NameKey(), nullable=False),
        sa.PrimaryKeyConstraint("id", "word"),
        sqlite_with_rowid=False,  # the key is the table: one B-tree fewer to write per word
    )
    _fill_words(bind)
    c = sa.table("order_words", *(sa.column(name) for name in ("id", "word", "created_at", "amount"))).c
    op.create_index("ix_order_words_created_at", "order_words", [c.word, c.created_at.desc(), c.id.desc()])
    op.create_index("ix_order_words_amount", "order_words", [c.word, c.amount.desc(), c.id.desc()])
    op.create_index("ix_order_words_customer_key", "order_words", ["word", "customer_key", "id"])

    op.create_table(
        "order_counts",
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stripe", sa.SmallInteger, nullable=False, autoincrement=False),
        sa.Column("n", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("status", "stripe"),
    )
    for statement in TRIGGERS[bind.dialect.name]:
        op.execute(statement)
    op.execute(
        f"INSERT INTO order_counts (status, stripe, n) "
        f"SELECT status, id % {STRIPES}, count(*) FROM orders GROUP BY status, id % {STRIPES}"
    )


def _fill_words(bind: sa.Connection) -> None:
    """The rows of the orders already there, in id batches (memory flat on a big table); the
    indexes are built after, in one pass each."""
    orders = sa.table(
        "orders",
        sa.column("id", BigId),
        sa.column("customer_key", NameKey()),
        sa.column("created_at", UTCDateTime),
        sa.column("amount", Money),
    )
    words = sa.table(
        "order_words",
        sa.column("id", BigId),
        sa.column("word", NameKey()),
        sa.column("created_at", UTCDateTime),
        sa.column("amount", Money),
        sa.column("customer_key", NameKey()),
    )
    last = 0
    while True:
        rows = bind.execute(
            sa.select(orders).where(orders.c.id > last).order_by(orders.c.id).limit(BATCH)
        ).all()
        if not rows:
            break
        bind.execute(
            words.insert(),
            [{**r._asdict(), "word": w} for r in rows for w in sorted(word_prefixes(r.customer_key))],
        )
        last = rows[-1].id


def downgrade() -> None:
    bind = op.get_bind()
    for name in TRIGGER_NAMES:
        on = " ON orders" if bind.dialect.name == "postgresql" else ""
        op.execute(f"DROP TRIGGER {name}{on}")
    if bind.dialect.name == "postgresql":
        op.execute("DROP FUNCTION orders_count_rows()")
        op.execute("DROP FUNCTION orders_delete_words()")
    op.drop_table("order_counts")
    op.drop_table("order_words")
