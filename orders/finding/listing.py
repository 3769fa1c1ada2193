"""One list request, parsed and validated once for the HTML page, the fragments and the JSON API."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

from orders.core.settings import MAX_PAGE_SIZE
from orders.data.models import STATUSES, Order
from orders.finding.positions import sharded
from orders.finding.search import Search, SearchError
from orders.finding.sorts import DEFAULT_SORT, SORTS, Sort
from pagination import CursorCodec, Keyset, Page, SeekForm, paginate

MAX_LIMIT = MAX_PAGE_SIZE


class InvalidParameter(ValueError):
    """A query parameter a client got wrong; the message names it and says what is allowed."""


# Unicode's categories Cc and Cs, as ranges: one regex search per value instead of a category
# lookup per character (a cursor is ~100 characters; the loop was 0.1 ms of every list request).
# tests/test_pages.py checks the ranges against unicodedata over every code point.
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _unstorable(text: str) -> str | None:
    """The first character of `text` no parameter may carry, as U+XXXX, or None. Control
    characters (NUL first: PostgreSQL refuses it in text, and the request was a 500) and lone
    surrogates (no driver encodes them) mean nothing in a search, a cursor or a date."""
    found = _UNSTORABLE.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


def check_text_parameters(args: MultiDict[str, str]) -> None:
    """One rule for every parameter of a list request (q, to, tz, cursors, sort, ...), names
    included: a character no engine stores is a 400 naming the parameter, before any is read."""
    for name, value in args.items(multi=True):
        if (found := _unstorable(name)) is not None:
            raise InvalidParameter(f"a parameter name contains {found}: control characters are not allowed")
        if (found := _unstorable(value)) is not None:
            raise InvalidParameter(f"{name} contains {found}: control characters are not allowed")


def single(args: MultiDict[str, str], name: str) -> str | None:
    """The one value of a query parameter, or None; a parameter given twice is refused."""
    values = args.getlist(name)
    if len(values) > 1:
        raise InvalidParameter(f"{name} was given {len(values)} times; give it once")
    return values[0] if values else None


def parse_int(args: MultiDict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = single(args, name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise InvalidParameter(f"{name} must be an integer from {low} to {high}, not {raw[:40]!r}")
    return int(raw)


def with_status_index_hint(stmt: Select[Any]) -> Select[Any]:
    """Make MariaDB/MySQL read the (status, created_at, id) index as a range.

    Left alone, MariaDB 10.11 picks a `ref` lookup on the status prefix for `SELECT *` and walks
    it from the top, filtering by index condition pushdown: it reads every row above the
    position (3 ms at 90% depth of 120k rows instead of 0.05 ms). The hint restores the range.
    PostgreSQL and SQLite choose well on their own and take no hints.
    """
    hint = "FORCE INDEX (ix_orders_status_created_at_id)"
    return stmt.with_hint(Order, hint, dialect_name="mysql").with_hint(Order, hint, dialect_name="mariadb")


@dataclass(frozen=True)
class ListRequest:
    sort: str
    status: str | None
    limit: int
    after: str | None
    before: str | None
    # The search box (orders/finding/search.py): an order number, or the start of a customer's name.
    search: Search | None = None

    @classmethod
    def from_args(cls, args: MultiDict[str, str], *, default_limit: int) -> ListRequest:
        check_text_parameters(args)
        sort = single(args, "sort") or DEFAULT_SORT
        if sort not in SORTS:
            raise InvalidParameter(f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}")
        status = single(args, "status") or None
        if status is not None and status not in STATUSES:
            raise InvalidParameter(f"status must be one of {', '.join(STATUSES)}, not {status[:40]!r}")
        limit = parse_int(args, "limit", default_limit, 1, MAX_LIMIT)
        after = single(args, "after")
        before = single(args, "before")
        if after is not None and before is not None:
            raise InvalidParameter("give either after or before, not both")
        try:
            search = Search.parse(single(args, "q"))
        except SearchError as err:
            raise InvalidParameter(str(err)) from None
        return cls(sort, status, limit, after, before, search)

    @property
    def sort_spec(self) -> Sort:
        return SORTS[self.sort]

    @property
    def keyset(self) -> Keyset:
        # Over shards (foreign partitions) the seek must be one postgres_fdw ships to each shard.
        # A name search pages by the words table's copy of the sort's columns (orders/finding/search.py).
        searched = self.search.keyset(self.sort, sharded=sharded()) if self.search else None
        return searched or SORTS[self.sort].keyset

    @property
    def filters(self) -> dict[str, Any]:
        # The search is a filter like the status: a cursor of one search is refused by another.
        return {"status": self.status, **(self.search.filters() if self.search else {})}

    def statement(self) -> Select[Any]:
        # Plain rows of the table's columns, not ORM objects: a page only reads them, and
        # loading an identity-mapped object per row was a tenth of a fragment's time. Rows keep
        # attribute access (row.id, row.created_at, ...), so templates and JSON read them alike.
        stmt = select(Order.__table__)
        if self.status is not None:
            stmt = stmt.where(Order.status == self.status)
            if self.sort_spec.status_index and not (self.search and self.search.words):
                stmt = with_status_index_hint(stmt)
        if self.search is not None:
            stmt = self.search.where(stmt, sharded=sharded())
        return stmt

    def page(self, session: Session, codec: CursorCodec, *, seek: SeekForm | None = None) -> Page:
        """This request's page, read through `session`, its cursors sealed with `codec` (the app
        reads it with orders/finding/positions.py read_page: its codec and its seek form)."""
        # The cursor as orders/web/read_routing.py already decoded it (to route the read), not twice.
        known = session.info.get("cursor_positions", {})
        return paginate(
            # The session's connection, not the session: the statement is Core (plain rows), and
            # the ORM's execute and row loading around it were a tenth of the page's time.
            session.connection(),
            self.statement(),
            self.keyset,
            limit=self.limit,
            codec=codec,
            seek=seek,
            after=known.get(self.after, self.after),
            before=known.get(self.before, self.before),
            filters=self.filters,
            # Where the page was read (the WAL position, set by orders/web/read_routing.py when reads go
            # to replicas): sealed into its cursors so the next page is read at least that far.
            meta=session.info.get("cursor_meta"),
        )

    def query_args(self, **changes: Any) -> dict[str, Any]:
        """URL parameters for a link from this list, without defaults (short, shareable URLs)."""
        q = self.search.text if self.search else None
        args: dict[str, Any] = {"sort": self.sort, "status": self.status, "q": q}
        args.update(changes)
        if args.get("sort") == DEFAULT_SORT:
            args.pop("sort")
        return {k: v for k, v in args.items() if v is not None}
