"""A search of several words, bounded: each page reads the rarest word's range, and at most
SEARCH_WINDOW entries of it (the library's `Window`), each checked for the other words by
primary key; a page that finds fewer matches there ends early with a cursor at the window's
end, and the next page goes on from it. So a page's work is bounded whatever the words:
common, absent, or never together (docs/finding.md). orders/finding/reader.py asks here.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import Connection, func, literal, select, union_all

from orders.data.models import ORDER_WORDS
from orders.finding.request import ListRequest
from orders.finding.search import WORDS, Search
from pagination import Window

# A page of a several-word search reads at most this many entries of its rarest word's range.
SEARCH_WINDOW = 200
# Words are counted up to this many entries each to find the rarest (one short index range each).
WORD_COUNT_CAP = 200


def rarest_first(connection: Connection, words: tuple[str, ...]) -> tuple[str, ...]:
    """`words`, the rarest first (entries counted up to WORD_COUNT_CAP), then by length; () if
    one of them is held by no order (nothing can match)."""
    counted = union_all(
        *(
            select(literal(i).label("i"), func.count().label("n")).select_from(
                select(ORDER_WORDS.c.id).where(ORDER_WORDS.c.word == word).limit(WORD_COUNT_CAP).subquery()
            )
            for i, word in enumerate(words)
        )
    )
    counts = {int(i): int(n) for i, n in connection.execute(counted)}
    if 0 in counts.values():
        return ()
    return tuple(sorted(words, key=lambda w: (counts[words.index(w)], words.index(w))))


def led_by_rarest(listing: ListRequest, search: Search, connection: Connection) -> ListRequest | None:
    """`listing` searching `search`, read from its rarest word's range; None when a word is held
    by no order (nothing matches, anywhere in the list)."""
    rarest = rarest_first(connection, search.words)
    return replace(listing, search=replace(search, lead=rarest[0])) if rarest else None


def window(listing: ListRequest) -> Window:
    """The window of a page of `listing` (a search led by its rarest word): SEARCH_WINDOW entries
    of that word's range in the list's sort."""
    assert listing.search is not None and listing.search.lead is not None
    lead = select(*(t.expr for t in listing.sort.columns)).where(WORDS.c.word == listing.search.lead)
    return Window(lead, SEARCH_WINDOW)
