"""Names as people have them: the customer keys and search words of the names that the new folding
of orders/data/names.py changes, written again from the names.

The folding now turns the Latin letters NFKD leaves whole into what readers type ("Łukasz" is
"lukasz", "Ørsted" "orsted", "Æbelø" "aebelo": they sorted under "Other scripts" and were found
by no ASCII query), makes every apostrophe "'" and every hyphen "-", finds a name by its words
joined at an apostrophe or hyphen ("obrien", "jeanluc"), and in CJK by a word from every
character on ("小明" in "王小明"). Only the orders whose key or words that changes are written:

- a whole key (shorter than KEY_LENGTH, so every name that has it normalized to it) decides for
  all its orders: its new key is `name_key(key)` and its words `name_words(key)`, compared with
  the words the code before this revision gave it (`_words_before`, that code's own rule, kept
  here); a key neither changes is left alone, with its orders, words and names;
- a cut key (its names differ past KEY_LENGTH) is decided per order, from its name, against the
  words the order holds.

For each such key, in id batches: the orders' customer_key (the rail's counts follow by their
triggers, migration 0008), the orders' order_words rows (deleted and written again, with the new
key; an order without any keeps none: a shard's), then the key's customer_words rows (deleted,
and each new key's words added where missing).
A cursor of "Customer A–Z" sealed before holds a key of the old order: keys only get smaller
(what a letter, apostrophe or hyphen is folded to comes before it in code point order), so a walk
it continues returns no row twice and none out of order, but misses the rows that moved from
after it to before it (docs/finding.md).

Run it with writes stopped, as every migration here. On shards `flask init-db` runs it on every
shard (each holds its orders, words and names); a coordinator keeps no words.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from orders.data.names import WORD_PREFIX, NameKey, key_is_whole, name_key, name_words
from orders.data.types import BigId, Money, UTCDateTime

revision = "0010"
down_revision = "0009"
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
NAMES = sa.table("customer_words", sa.column("word", NameKey()), sa.column("customer_key", NameKey()))


def _words_before(key: str) -> set[str]:
    """The words 0009's code wrote for a whole key: every prefix (up to WORD_PREFIX characters) of
    each run of letters, digits and marks (Unicode L, N, M); anything else separated."""
    words: set[str] = set()
    current = ""
    for ch in key + " ":
        if unicodedata.category(ch)[0] in "LNM":
            current += ch
            continue
        words.update(current[:n] for n in range(1, min(len(current), WORD_PREFIX) + 1))
        current = ""
    return words


def affected(key: str) -> bool:
    """Whether the orders of this key may get another key or other words (a cut key: its names
    say, order by order)."""
    return not key_is_whole(key) or name_key(key) != key or name_words(key) != _words_before(key)


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    keeps_words = inspector.has_table("order_words")  # a sharded coordinator keeps none
    keeps_names = inspector.has_table("customer_words")
    # The distinct keys are few and read from the customer sort's index.
    keys = bind.scalars(sa.select(ORDERS.c.customer_key).distinct()).all()
    for key in sorted(k for k in keys if affected(k)):
        _rewrite(bind, key, keeps_words=keeps_words, keeps_names=keeps_names)


def _rewrite(bind: sa.Connection, key: str, *, keeps_words: bool, keeps_names: bool) -> None:
    """The orders of `key` whose key or words change, written again; then the key's names."""
    held: dict[str, set[str]] = defaultdict(set)  # each key its orders have now: their words
    changed = False
    last = 0
    while True:
        rows = bind.execute(
            sa.select(ORDERS.c.id, ORDERS.c.customer, ORDERS.c.created_at, ORDERS.c.amount)
            .where(ORDERS.c.customer_key == key, ORDERS.c.id > last)
            .order_by(ORDERS.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        last = rows[-1].id
        folded = {name: (name_key(name), name_words(name)) for name in {r.customer for r in rows}}
        for new_key, words in folded.values():
            held[new_key] |= words
        stored = _stored_words(bind, [r.id for r in rows]) if keeps_words else {}
        # Every order of an affected whole key changes; a cut key's orders are compared one by
        # one with the key and the words they hold (those that hold their name's are left alone).
        written = list(rows)
        if not key_is_whole(key):
            written = [
                r
                for r in rows
                if folded[r.customer][0] != key or (keeps_words and folded[r.customer][1] != stored[r.id])
            ]
        if not written:
            continue
        changed = True
        _write(bind, key, written, folded, stored)
    if changed and keeps_names:
        bind.execute(NAMES.delete().where(NAMES.c.customer_key == key))
        for new_key, words in sorted(held.items()):
            there = set(bind.scalars(sa.select(NAMES.c.word).where(NAMES.c.customer_key == new_key)))
            missing = sorted(words - there)
            for start in range(0, len(missing), BATCH):
                bind.execute(
                    NAMES.insert(),
                    [{"word": w, "customer_key": new_key} for w in missing[start : start + BATCH]],
                )


def _stored_words(bind: sa.Connection, ids: Sequence[int]) -> dict[int, set[str]]:
    stored: dict[int, set[str]] = {i: set() for i in ids}
    for order_id, word in bind.execute(sa.select(WORDS.c.id, WORDS.c.word).where(WORDS.c.id.in_(ids))):
        stored[order_id].add(word)
    return stored


def _write(
    bind: sa.Connection,
    key: str,
    rows: Sequence[Any],
    folded: dict[str, tuple[str, set[str]]],
    stored: dict[int, set[str]],
) -> None:
    """These orders' new key (one UPDATE per new key: PostgreSQL's rail trigger runs once per
    statement) and the words of those that hold words (`stored`), deleted and written again. An
    order that holds none was never given any (a shard's orders are written through the
    coordinator, which keeps no words: the shard's search reads keys, orders/finding/search.py
    name_start), so it is given none here either: a name with words now had words before."""
    moved: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        if folded[r.customer][0] != key:
            moved[folded[r.customer][0]].append(r.id)
    for new_key, ids in sorted(moved.items()):
        bind.execute(ORDERS.update().where(ORDERS.c.id.in_(ids)).values(customer_key=new_key))
    worded = [r for r in rows if stored.get(r.id)]
    if not worded:
        return
    bind.execute(WORDS.delete().where(WORDS.c.id.in_([r.id for r in worded])))
    written = [
        {
            "id": r.id,
            "word": word,
            "created_at": r.created_at,
            "amount": r.amount,
            "customer_key": folded[r.customer][0],
        }
        for r in worded
        for word in sorted(folded[r.customer][1])
    ]
    for start in range(0, len(written), BATCH):
        bind.execute(WORDS.insert(), written[start : start + BATCH])


def downgrade() -> None:
    """Nothing is written back: 0009's code would fold new names its own way beside these keys
    and words ("Łukasz" "łukasz" beside the migrated "lukasz"). Going back for good means
    writing every key and word again with 0009's code (as 0002 and 0004 wrote them)."""
