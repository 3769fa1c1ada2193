"""The search box: an order number opens that order; any other text keeps the orders whose
customer's name has a word starting with each word typed, ignoring case and accents
("fre" finds "Úrsula Freitas", "urs fre" and "fre urs" too; docs/finding.md).

How a page stays one index range in every sort, at any depth, for a common or a rare word: the
table order_words (orders/data/models.py) holds each prefix (1 to WORD_PREFIX characters) of each
word of every order's name with the order's sort columns, indexed (word, sort columns..., id).
A query word is an equality, `word = 'fre'`, so the matches of one word in the sort's order are
one contiguous range of that index: a page reads about `limit` entries of it and `limit` orders
by primary key, like an unfiltered page, on SQLite, PostgreSQL and MariaDB alike
(tests/test_find_plans.py). Measured against the alternatives in docs/finding.md.

More words than one: the rarest drives the range (`lead`, chosen per page by
orders/finding/search_window.py), each other is one primary-key probe of order_words per candidate row
(EXISTS), and a page reads at most SEARCH_WINDOW entries of that range: words that are common but
seldom together end a page early, with a cursor past what was read (docs/finding.md).

Digits alone (optionally after "#") are an order number, never a name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    Column,
    MetaData,
    Select,
    Table,
    false,
    func,
    or_,
    select,
)

from orders.data.models import MAX_ID, ORDER_WORDS, Order, OrderWord
from orders.data.names import (
    WORD_PREFIX,
    NameKey,
    key_is_whole,
    key_words,
    name_key,
    prefix_upper_bound,
)
from orders.data.types import BigId, Money, UTCDateTime
from orders.finding.sorts import SORTS
from pagination import Keyset

MAX_SEARCH = 64
MAX_WORDS = 10
_NUMBER = re.compile(r"#?\s*([0-9]+)")

# order_words as one search reads it: `word = :w` keeps at most one row per order, so `id` alone
# is unique in the rows of a search statement, and each sort over these columns (the
# same names as the orders' own) passes the library's uniqueness check. Its own MetaData: the real
# table (key (id, word)) is OrderWord in orders/data/models.py, which the migrations build.
WORDS = Table(
    OrderWord.__tablename__,
    MetaData(),
    Column("id", BigId, primary_key=True),
    Column("word", NameKey(), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("amount", Money, nullable=False),
    Column("customer_key", NameKey(), nullable=False),
)
_ALL_WORDS = ORDER_WORDS
# Built once: the library remembers its verdict on a statement's joins by their objects.
_ON_ORDER = WORDS.c.id == Order.__table__.c.id


class SearchError(ValueError):
    """A search the box cannot run. The message names the parameter (`q`, or go-to's `to`: a 400
    from request.py or goto.py); `reason` says the same without it, for a sentence whose subject
    the reader knows (the search box's own message: "Search takes at most 10 words, not 11",
    templates/orders.html). One home for each limit and its words: here."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name} {reason}")
        self.reason = reason


def query_words(key: str) -> tuple[str, ...]:
    """The words a query must each find, longest first: each cut to WORD_PREFIX characters, and
    without those another one implies ("a" when "ana" is there: a word starting with "ana"
    starts with "a")."""
    words = {word[:WORD_PREFIX] for word in key_words(key)}
    kept = {w for w in words if not any(o != w and o.startswith(w) for o in words)}
    return tuple(sorted(kept, key=lambda w: (-len(w), w)))


@dataclass(frozen=True)
class Search:
    text: str  # as typed, trimmed: the URL's `q` and what the box shows again
    order_id: int | None = None
    words: tuple[str, ...] = ()  # normalized, longest first (query_words)
    # The word whose range a page reads (the rarest, orders/finding/search_window.py); the first if None.
    lead: str | None = None
    # The name keys holding every word, when the names table found them few
    # (orders/finding/named.py): the page reads those names' orders, one index range per name.
    names: tuple[str, ...] | None = None

    @classmethod
    def parse(cls, raw: str | None) -> Search | None:
        text = (raw or "").strip()
        if not text:
            return None
        if len(text) > MAX_SEARCH:
            raise SearchError(
                "q", f"takes an order number or a name of at most {MAX_SEARCH} characters, not {len(text)}"
            )
        number = _NUMBER.fullmatch(text) if text.isascii() else None
        if number:
            # A number outside the ids (0, or past BIGINT) is still an order number: one that no
            # order has, so the search matches nothing, as /api/orders/0 is a 404, not a 400.
            return cls(text, order_id=int(number.group(1)))
        return cls(text, words=cls.parse_words(text, "q"))

    @staticmethod
    def parse_words(text: str, name: str = "to") -> tuple[str, ...]:
        """The words `text` (parameter `name`) searches for, or SearchError."""
        words = query_words(name_key(text))
        if not words:
            raise SearchError(name, "needs letters or digits: the rest only separates words")
        if len(words) > MAX_WORDS:
            raise SearchError(name, f"takes at most {MAX_WORDS} words, not {len(words)}")
        return words

    def plus(self, words: tuple[str, ...]) -> Search:
        """This search narrowed by more words (go-to by name within a searched list)."""
        return Search(self.text, self.order_id, query_words(" ".join((*self.words, *words))))

    def filters(self) -> dict[str, Any]:
        """What a cursor of this search is bound to (a filter, like the status)."""
        found: dict[str, Any] = {} if self.order_id is None else {"order": self.order_id}
        return found | ({"q": " ".join(self.words)} if self.words else {})

    def sort(self, name: str, *, sharded: bool) -> Keyset | None:
        """The sort a name search pages by (None: the sort choice `name`'s own)."""
        return None if not self.words or sharded or self.names is not None else _word_sort(name)

    def where(self, stmt: Select[Any], *, sharded: bool = False) -> Select[Any]:
        if self.order_id is not None:
            # Outside the ids: nothing, without binding a number the engines would overflow on.
            in_range = 1 <= self.order_id <= MAX_ID
            stmt = stmt.where(Order.id == self.order_id if in_range else false())
        if not self.words:
            return stmt
        if sharded:
            return name_start(stmt, " ".join(self.words))
        if self.names is not None:
            return self._of_names(stmt, self.names)
        lead = self.lead or self.words[0]
        others = [word for word in self.words if word != lead]
        # The join as the statement's FROM, stated once: a reader that selects other columns (the
        # export's CSV line, the library's probes of the sort's columns) keeps it as it is; an
        # implicit .join() left SQLAlchemy two FROMs to join from there (a 500 on every export of
        # a search).
        stmt = stmt.select_from(Order.__table__.join(WORDS, _ON_ORDER)).where(WORDS.c.word == lead)
        if others:
            # The others as one correlated count of (id, word) primary-key entries, not an EXISTS
            # each: planners flatten EXISTS into joins and searched their orders (PostgreSQL
            # planned 10 words for 300 ms); a scalar subquery is one probe per candidate row.
            other = _ALL_WORDS.alias()
            # Equalities, not IN: an expanding IN cannot be compiled once for every batch of
            # the export (orders/exports/stream.py renders its statement before the values).
            held = select(func.count()).where(
                other.c.id == WORDS.c.id, or_(*(other.c.word == word for word in others))
            )
            stmt = stmt.where(held.scalar_subquery() == len(others))
        return stmt

    def _of_names(self, stmt: Select[Any], names: tuple[str, ...]) -> Select[Any]:
        """The orders of these name keys, in the sort's own order: one range of the index
        (customer_key, sort columns, id) per name. A cut key (orders/data/names.py) may be
        shared by names that do not all hold the words: its orders are checked word by word."""
        stmt = stmt.where(Order.customer_key.in_(names))
        if all(key_is_whole(key) for key in names):
            return stmt
        words = _ALL_WORDS.alias()
        held = select(func.count()).where(
            words.c.id == Order.__table__.c.id, or_(*(words.c.word == word for word in self.words))
        )
        return stmt.where(held.scalar_subquery() == len(self.words))


@cache
def _word_sort(name: str) -> Keyset:
    """The sort choice `name`'s sort over WORDS's copies of its columns: the index (word,
    those..., id) reads them in order under `word = :w`. The same sort to a cursor
    (Keyset.over): a search read from the words table one page and from the orders of a few
    names the next (named.py decides per request, and a write can change its answer) opens the
    other's cursors."""
    sort = SORTS[name].sort
    terms = []
    for term in sort.columns:
        column = WORDS.c[str(term.expr.key)]
        terms.append(column.desc() if term.descending else column.asc())
    return sort.over(*terms)


def name_start(stmt: Select[Any], key: str) -> Select[Any]:
    """Over shards (no order_words on the coordinator, orders/data/shards.py): the start of the whole
    name, one range of (customer_key, id)."""
    stmt = stmt.where(Order.customer_key >= key)
    bound = prefix_upper_bound(key)
    return stmt if bound is None else stmt.where(Order.customer_key < bound)
