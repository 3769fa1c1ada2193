"""The names table a search of several words reads first, and the orders of one name in every
sort: customer_words (each prefix of each word of a customer name, once per name key), filled
from the names the orders have, and the indexes (customer_key, created_at, id) and
(customer_key, amount, id) on orders, so the orders of the names found are one index range per
name in every sort (orders/finding/named.py, docs/finding.md).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

from orders.data.names import NameKey, key_is_whole, name_words, word_prefixes

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BATCH = 5000

ORDERS = sa.table("orders", sa.column("customer", sa.String()), sa.column("customer_key", NameKey()))
WORDS = sa.table("customer_words", sa.column("word", NameKey()), sa.column("customer_key", NameKey()))


def upgrade() -> None:
    bind = op.get_bind()
    op.create_index(
        "ix_orders_customer_key_created_at_id",
        "orders",
        [sa.column("customer_key"), sa.column("created_at").desc(), sa.column("id").desc()],
    )
    op.create_index(
        "ix_orders_customer_key_amount_id",
        "orders",
        [sa.column("customer_key"), sa.column("amount").desc(), sa.column("id").desc()],
    )
    if not sa.inspect(bind).has_table("order_words"):
        return  # a sharded coordinator keeps no words (its shards do)
    op.create_table(
        "customer_words",
        sa.Column("word", NameKey(), nullable=False),
        sa.Column("customer_key", NameKey(), nullable=False),
        sa.PrimaryKeyConstraint("word", "customer_key"),
        sqlite_with_rowid=False,
    )
    # The distinct keys, read from the customer sort's index; a whole key's words are its own, a
    # cut key's are those of the names that have it (orders/data/names.py name_words).
    keys = list(bind.scalars(sa.select(ORDERS.c.customer_key).distinct()))
    pairs = {(word, key) for key in keys if key_is_whole(key) for word in word_prefixes(key)}
    cut = [key for key in keys if not key_is_whole(key)]
    for start in range(0, len(cut), BATCH):
        for name, key in bind.execute(
            sa.select(ORDERS.c.customer, ORDERS.c.customer_key)
            .where(ORDERS.c.customer_key.in_(cut[start : start + BATCH]))
            .distinct()
        ):
            pairs |= {(word, key) for word in name_words(name)}
    rows = [{"word": word, "customer_key": key} for word, key in sorted(pairs)]
    for start in range(0, len(rows), BATCH):
        bind.execute(WORDS.insert(), rows[start : start + BATCH])
    op.create_index("ix_customer_words_customer_key", "customer_words", ["customer_key", "word"])


def downgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("customer_words"):
        op.drop_table("customer_words")
    op.drop_index("ix_orders_customer_key_amount_id", table_name="orders")
    op.drop_index("ix_orders_customer_key_created_at_id", table_name="orders")
