"""The search words of the names whose key was cut: order_words was written from the key, which
is cut at KEY_LENGTH (64) characters after normalization, and normalization makes some names
longer than they are ("ß" is "ss", "ﬃ" is "ffi"): "Weißgerber Großhandel Süßwaren Straßenbau
Meißner Groß GmbH" (59 characters) had the word "gmb", not "gmbh", and the search for "gmbh" did
not find it. Their rows are written again from the names (orders/data/names.py name_words); every
other order's are already its name's.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

from orders.data.names import KEY_LENGTH, NameKey, name_words
from orders.data.types import BigId, Money, UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BATCH = 1000

ORDERS = sa.table(
    "orders",
    sa.column("id", BigId),
    sa.column("customer", sa.String()),
    sa.column("customer_key", NameKey()),
    sa.column("created_at", UTCDateTime),
    sa.column("amount", Money),
)
WORDS = sa.table(
    "order_words",
    sa.column("id", BigId),
    sa.column("word", NameKey()),
    sa.column("created_at", UTCDateTime),
    sa.column("amount", Money),
    sa.column("customer_key", NameKey()),
)


def upgrade() -> None:
    bind = op.get_bind()
    if not sa.inspect(bind).has_table("order_words"):
        return  # a sharded coordinator keeps no words (its shards do)
    # The distinct keys are few and read from the customer sort's index; a cut one is KEY_LENGTH long.
    cut = [key for key in bind.scalars(sa.select(ORDERS.c.customer_key).distinct()) if len(key) >= KEY_LENGTH]
    for start in range(0, len(cut), BATCH):
        rows = bind.execute(
            sa.select(ORDERS).where(ORDERS.c.customer_key.in_(cut[start : start + BATCH]))
        ).all()
        for first in range(0, len(rows), BATCH):
            batch = rows[first : first + BATCH]
            bind.execute(WORDS.delete().where(WORDS.c.id.in_([r.id for r in batch])))
            written = [
                {
                    "id": r.id,
                    "word": w,
                    "created_at": r.created_at,
                    "amount": r.amount,
                    "customer_key": r.customer_key,
                }
                for r in batch
                for w in sorted(name_words(r.customer))
            ]
            if written:
                bind.execute(WORDS.insert(), written)


def downgrade() -> None:
    """Nothing to undo: the words of a whole name are right under 0006's code too."""
