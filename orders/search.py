"""The search box: an order number opens that order; any other text keeps the orders whose
customer's name starts with it, ignoring case and accents (the normalized key of orders/names.py).

Why "starts with" and not "contains": a prefix of the key is one B-tree range,
`customer_key >= 'sou' AND customer_key < 'sov'`, on (customer_key, id) on every engine with no
extension, so in "Customer A–Z" a filtered page at any depth reads about `limit` index entries,
like an unfiltered one, on SQLite, PostgreSQL and MariaDB alike. "Contains" needs a trigram index
(pg_trgm, PostgreSQL only: SQLite and MariaDB would scan the table, or the whole index, for every
page) and would match differently fast per engine. In the other sorts the sort's own index is
walked and the rows of other customers skipped, as with a status filter: a page reads about
`limit / share` entries, where `share` is the matching customers' share of the orders.
Digits alone (optionally after "#") are an order number, never a name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select

from .models import Order
from .names import name_key, prefix_upper_bound

MAX_SEARCH = 64
MAX_ID = 2**63 - 1
_NUMBER = re.compile(r"#?\s*([0-9]+)")


class SearchError(ValueError):
    """A search the box cannot run; the message says why (a 400 from listing.py)."""


@dataclass(frozen=True)
class Search:
    text: str  # as typed, trimmed: the URL's `q` and what the box shows again
    order_id: int | None = None
    prefix: str | None = None  # the normalized start of a name

    @classmethod
    def parse(cls, raw: str | None) -> Search | None:
        text = (raw or "").strip()
        if not text:
            return None
        if len(text) > MAX_SEARCH:
            raise SearchError(f"q is an order number or a name of at most {MAX_SEARCH} characters")
        number = _NUMBER.fullmatch(text) if text.isascii() else None
        if number:
            order_id = int(number.group(1))
            if not 1 <= order_id <= MAX_ID:
                raise SearchError(f"q: order numbers go from 1 to {MAX_ID}, not {text[:40]!r}")
            return cls(text, order_id=order_id)
        prefix = name_key(text)
        if not prefix:
            raise SearchError("q has no letters or digits to search for")
        return cls(text, prefix=prefix)

    def filters(self) -> dict[str, Any]:
        """What a cursor of this search is bound to (a filter, like the status)."""
        return {"order": self.order_id} if self.order_id is not None else {"q": self.prefix}

    def where(self, stmt: Select[Any]) -> Select[Any]:
        if self.order_id is not None:
            return stmt.where(Order.id == self.order_id)
        assert self.prefix is not None
        stmt = stmt.where(Order.customer_key >= self.prefix)
        bound = prefix_upper_bound(self.prefix)
        return stmt if bound is None else stmt.where(Order.customer_key < bound)
