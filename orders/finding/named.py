"""A search of several words, answered from the names first: which customer names hold a word
starting with each word typed, read from customer_words (orders/data/models.py: one row per word
prefix per name key, kept with every write), before any order is read.

Names are far fewer than orders (a customer orders many times; the names of a shop repeat), so
the work is set by the names, not by the orders:

- a word no name holds, or words no one name holds together ("ana cardoso" when Ana and Cardoso
  never meet), answer "no match" in the first request, whatever the table's size;
- a few names (up to NAMED_CAP) hold them: the page reads the orders of those names, one range
  of an index (customer_key, sort columns, id) per name, so a search matching a few orders
  scattered over millions returns its first page in one request;
- more names than that: the matches are common, and the page reads a bounded window of the
  rarest word's order range instead (orders/finding/search_window.py).

How the names are found: each word's names are counted up to NAMES_READ (one short index-only
range of customer_words' key (word, customer_key) each); the rarest word's names, at most
NAMES_READ of them, are each checked for the other words by one correlated count of
primary-key entries (as search.py checks an order's words); up to NAMED_CAP + 1 are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, func, literal, or_, select, union_all

from orders.data.models import CUSTOMER_WORDS, keeps_customer_words

# At most this many names are read per word (to count them, and of the rarest, to check them):
# the bound on a request's work in names. A rarest word with more names than this is common, and
# its matches are found by the window of its orders instead.
NAMES_READ = 2000
# Up to this many names found, the page reads their orders name by name (one index range each).
NAMED_CAP = 50


@dataclass(frozen=True)
class Named:
    """What the names say about a search: `keys`, the name keys holding every word (sorted), when
    they are at most NAMED_CAP and were all found; `known` False when the names could not tell
    within NAMES_READ (then `keys` is empty and the caller reads the window)."""

    keys: tuple[str, ...]
    known: bool = True

    @property
    def none(self) -> bool:
        """No name holds every word: nothing can match, anywhere in the list."""
        return self.known and not self.keys


UNKNOWN = Named((), known=False)


def names_holding(connection: Connection, words: tuple[str, ...]) -> Named:
    """The names holding a word starting with each of `words` (normalized, as Search.words)."""
    if not words or not keeps_customer_words(connection):
        return UNKNOWN
    table = CUSTOMER_WORDS
    counted = union_all(
        *(
            select(literal(i).label("i"), func.count().label("n")).select_from(
                select(table.c.customer_key).where(table.c.word == word).limit(NAMES_READ).subquery()
            )
            for i, word in enumerate(words)
        )
    )
    counts = {int(i): int(n) for i, n in connection.execute(counted)}
    if 0 in counts.values():
        return Named(())
    order = sorted(range(len(words)), key=lambda i: (counts[i], i))
    if counts[order[0]] >= NAMES_READ:
        return UNKNOWN  # every word is common in names: the window of its orders finds them
    rarest, others = words[order[0]], [words[i] for i in order[1:]]
    scanned = (
        select(table.c.customer_key)
        .where(table.c.word == rarest)
        .order_by(table.c.customer_key)
        .limit(NAMES_READ)
        .subquery()
    )
    found = select(scanned.c.customer_key)
    if others:
        other = table.alias()
        held = select(func.count()).where(
            other.c.customer_key == scanned.c.customer_key, or_(*(other.c.word == word for word in others))
        )
        found = found.where(held.scalar_subquery() == len(others))
    keys = tuple(connection.scalars(found.order_by(scanned.c.customer_key).limit(NAMED_CAP + 1)))
    if len(keys) > NAMED_CAP:
        return UNKNOWN  # many names: the matches are common, the window finds them
    return Named(keys)
