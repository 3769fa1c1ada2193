"""One list request as a value: parsed and validated once, its cursor decoded once, for the HTML
page, its fragments, the JSON API, the CSV export, the CLI export and the new-orders count;
what it reads (its statement, sort, filters, seek form) and the links a page of it names
(`ListRequest.links`: the view asks once). Reading it is orders/finding/reader.py's job
(docs/life-of-a-request.md follows a cursor through both).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from flask import current_app, has_app_context
from sqlalchemy import ColumnElement, Select, select
from werkzeug.datastructures import MultiDict

from orders.core.settings import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from orders.data.models import STATUSES, Order
from orders.data.names import KEY_LENGTH
from orders.finding.goto import Goto, GotoError
from orders.finding.params import InvalidParameter, check_text_parameters, parse_int, single, typed
from orders.finding.search import Search, SearchError
from orders.finding.sorts import DEFAULT_SORT, NEWEST, SORTS, SortChoice
from pagination import (
    BEFORE,
    CursorCodec,
    Keyset,
    Page,
    PaginationError,
    Position,
    SeekForm,
    cursor_side,
    position_at,
)

MAX_LIMIT = MAX_PAGE_SIZE


def app_codec() -> CursorCodec:
    """The codec create_app() made from SECRET_KEY (and its fallbacks): seals and opens cursors."""
    found: CursorCodec = current_app.extensions["cursor_codec"]
    return found


def sharded() -> bool:
    """Whether the app reads orders through postgres_fdw shards (DATABASE_SHARD_URLS)."""
    return has_app_context() and bool(current_app.config.get("DATABASE_SHARD_URLS"))


def list_request(args: MultiDict[str, str]) -> ListRequest:
    """The list `args` ask for, as this app reads it: its codec, its shards, its PAGE_SIZE."""
    return ListRequest.from_args(
        args, default_limit=current_app.config["PAGE_SIZE"], codec=app_codec(), sharded=sharded()
    )


def with_status_index_hint(stmt: Select[Any]) -> Select[Any]:
    """Make MariaDB/MySQL read the (status, created_at, id) index as a range.

    Left alone, MariaDB 10.11 picks a `ref` lookup on the status prefix for `SELECT *` and walks
    it from the top, filtering by index condition pushdown: it reads every row above the
    position (3 ms at 90% depth of 120k rows instead of 0.05 ms). The hint restores the range.
    PostgreSQL and SQLite choose well on their own and take no hints.
    """
    hint = "FORCE INDEX (ix_orders_status_created_at_id)"
    return stmt.with_hint(Order, hint, dialect_name="mysql").with_hint(Order, hint, dialect_name="mariadb")


# ListRequest.statement()'s page statements without a search, by status and index hint.
_PAGE_STATEMENTS: dict[tuple[str | None, bool], Select[Any]] = {}


class _NoCodec(CursorCodec):
    """The codec of a ListRequest built without one: any cursor it would seal or open is a
    TypeError that says how to build it."""

    def __init__(self) -> None:
        pass  # no secret: it seals nothing

    def encode(self, position: Position) -> str:
        raise TypeError("this ListRequest has no codec: build it with from_args(..., codec=)")

    def decode(self, cursor: str) -> Position:
        raise TypeError("this ListRequest has no codec: build it with from_args(..., codec=)")


_NO_CODEC = _NoCodec()


class RefusedField(InvalidParameter):
    """A search or a go-to the list page cannot run: a 400 like any bad parameter, its message
    naming the parameter, which also holds what the list page shows instead of an error page
    (orders/views/list_page.py refused_field): the text typed, why it is refused in a reader's
    words (`reason`), and `listing`, the list without it (below). `field` is the list page's field
    that keeps the text, with the message under it."""

    field: str

    def __init__(self, err: SearchError | GotoError, text: str, listing: ListRequest) -> None:
        super().__init__(str(err))
        self.text = text
        self.reason = err.reason
        self.listing = listing


class RefusedSearch(RefusedField):
    """A search the box cannot run (orders/finding/search.py SearchError: 11 words, no letters);
    `listing` is the same list without the search, from its top (sort, status and page size
    kept; a cursor or a go-to of the refused search dropped)."""

    field = "q"


class RefusedGoto(RefusedField):
    """A go-to the list cannot read (orders/finding/goto.py GotoError: `2026-02-30`, `abc`): the
    list page stays (`listing`: the same list, where it was opened), the Go field keeping the text
    with the reason under it. Without JavaScript a mistyped date replaced the whole page with an
    error page; with it, the find bar shows the same reason (static/js/controls.js)."""

    field = "to"


@dataclass(frozen=True)
class ListRequest:
    """What a list read asks for, and everything reading it needs: nothing else is consulted
    (no request, no session, no app context) between here and the SQL."""

    sort_name: str  # the URL's sort=: SORTS[sort_name] is the choice, .sort the library's sort
    status: str | None = None
    limit: int = DEFAULT_PAGE_SIZE
    # The search box (orders/finding/search.py): an order number, or the start of a customer's name.
    search: Search | None = None
    # "Go to" (`to`, with the reader's zone `tz`): the list starts at the first row at or past it.
    goto: Goto | None = None
    # The cursor as the client sent it (after= or before=), the position decoded from it once,
    # and whether it reads backward (before=).
    cursor: str | None = None
    position: Position | None = None
    backward: bool = False
    # Over postgres_fdw shards: the seek postgres_fdw ships, and no words table to search.
    sharded: bool = False
    # Sealed into every cursor this read makes (the WAL position it was read at, when reads go
    # to replicas: orders/web/read_routing.py sets it), so the next page is read at least there.
    meta: Mapping[str, str] = field(default_factory=dict, compare=False)
    # What seals and opens its cursors (the app's: app_codec()); a request built without one (to
    # read its statement alone) says so when a cursor is sealed or opened.
    codec: CursorCodec = field(default_factory=lambda: _NO_CODEC, repr=False, compare=False)
    # Whether the URL chose the page size (limit=): its links then keep it, so that the page after
    # one of 5 rows has 5 rows too (it had the server's default).
    limit_chosen: bool = False

    @classmethod
    def from_args(
        cls,
        args: MultiDict[str, str],
        *,
        codec: CursorCodec,
        default_limit: int = DEFAULT_PAGE_SIZE,
        sharded: bool = False,
    ) -> ListRequest:
        check_text_parameters(args)
        sort = single(args, "sort") or DEFAULT_SORT
        if sort not in SORTS:
            raise InvalidParameter(f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}")
        status = single(args, "status") or None
        if status is not None and status not in STATUSES:
            raise InvalidParameter(f"status must be one of {', '.join(STATUSES)}, not {status[:40]!r}")
        limit = parse_int(args, "limit", default_limit, 1, MAX_LIMIT)
        try:
            cursor, direction = cursor_side(single(args, "after"), single(args, "before"))
        except PaginationError as err:
            raise InvalidParameter(str(err)) from None
        text = typed(args, "q")
        try:
            search = Search.parse(text)
        except SearchError as err:
            # Every other parameter a list page keeps is read by now: the list without the search.
            unsearched = cls(sort, status, limit, sharded=sharded, codec=codec, limit_chosen="limit" in args)
            raise RefusedSearch(err, (text or "").strip(), unsearched) from None
        to = typed(args, "to")
        goto = None
        if to is not None:
            if cursor is not None:
                raise InvalidParameter("give either to or a cursor (after/before), not both")
            try:
                goto = Goto.parse(sort, to, single(args, "tz"))
            except GotoError as err:
                unmoved = cls(
                    sort, status, limit, search, sharded=sharded, codec=codec, limit_chosen="limit" in args
                )
                raise RefusedGoto(err, to.strip(), unmoved) from None
        listing = cls(
            sort, status, limit, search, goto, sharded=sharded, codec=codec, limit_chosen="limit" in args
        )
        # Decoded here, once (InvalidCursor: a 400): read routing takes its WAL position from it,
        # the library checks it against the sort and filters without decoding it again.
        return listing if cursor is None else listing.at(cursor, backward=direction == BEFORE)

    def at(self, cursor: str | None, *, backward: bool = False) -> ListRequest:
        """This list read from `cursor` (None: its top) instead, the cursor decoded with its
        codec: no go-to."""
        position = None if cursor is None else self.codec.decode(cursor)
        return replace(self, cursor=cursor, position=position, backward=backward, goto=None)

    def read_at(self, meta: Mapping[str, str]) -> ListRequest:
        """This list, read where `meta` says (sealed into the cursors it makes)."""
        return replace(self, meta=dict(meta))

    @property
    def choice(self) -> SortChoice:
        return SORTS[self.sort_name]

    @property
    def sort(self) -> Keyset:
        # Over shards (foreign partitions) the seek must be one postgres_fdw ships to each shard.
        # A name search pages by the words table's copy of the sort's columns (orders/finding/search.py).
        searched = self.search.sort(self.sort_name, sharded=self.sharded) if self.search else None
        return searched or SORTS[self.sort_name].sort

    @property
    def seek(self) -> SeekForm | None:
        """Over shards (postgres_fdw foreign partitions) the expanded seek with its leading bound,
        the form postgres_fdw ships to every shard (a row value would be filtered on the
        coordinator, each shard read from its first row); elsewhere the library's choice."""
        return "bounded" if self.sharded else None

    @property
    def filters(self) -> dict[str, Any]:
        # The search is a filter like the status: a cursor of one search is refused by another.
        return {"status": self.status, **(self.search.filters() if self.search else {})}

    def statement(self, *columns: ColumnElement[Any]) -> Select[Any]:
        """The list, one definition for every reader (the page, its fragments, the API, the CSV
        export, the CLI export, go-to): `columns` of the orders (all of them by default) with
        the status and the search applied. Readers change what is selected here, never the
        statement after it is built (a copy with other columns lost the search's join)."""
        # Plain rows of the table's columns, not ORM objects: a page only reads them, and
        # loading an identity-mapped object per row was a tenth of a fragment's time. Rows keep
        # attribute access (row.id, row.created_at, ...), so templates and JSON read them alike.
        # A page's statement without a search is one of a few (by status and index hint): built
        # once and kept, so the library's analysis of it (its shape) is kept with it. (A status
        # outside STATUSES, possible only for a ListRequest made directly, is not kept: the kept
        # statements stay a few.)
        keepable = not columns and self.search is None and (self.status is None or self.status in STATUSES)
        kept = (self.status, self.choice.status_index) if keepable else None
        if kept is not None and (found := _PAGE_STATEMENTS.get(kept)) is not None:
            return found
        stmt = select(*columns) if columns else select(Order.__table__)
        if self.status is not None:
            stmt = stmt.where(Order.status == self.status)
            if self.choice.status_index and not (self.search and self.search.words):
                stmt = with_status_index_hint(stmt)
        if self.search is not None:
            stmt = self.search.where(stmt, sharded=self.sharded)
        if kept is not None:
            _PAGE_STATEMENTS[kept] = stmt
        return stmt

    def position_at(self, row: Any) -> Position:
        """The inclusive `after` position at `row`'s whole key: the list opened there starts with it."""
        keys = [getattr(row, str(column.expr.key)) for column in self.sort.columns]
        return position_at(self.sort, keys, filters=self.filters, meta=self.meta)

    def end_position(self) -> Position:
        """The `before` position past the last row of the list's sort ("End"): the page it opens
        is the list's last `limit` rows, read from the end of the sort's index in one request
        (one index range read backwards), not through the rows in between."""
        keys = [(_LOWEST if t.descending else _HIGHEST)[t.type.python_type] for t in self.sort.columns]
        return position_at(self.sort, keys, side=BEFORE, filters=self.filters)

    def query_args(self, **changes: Any) -> dict[str, Any]:
        """URL parameters for a link from this list, without defaults (short, shareable URLs)."""
        q = self.search.text if self.search else None
        args: dict[str, Any] = {"sort": self.sort_name, "status": self.status, "q": q}
        if self.limit_chosen:
            args["limit"] = self.limit
        args.update(changes)
        if args.get("sort") == DEFAULT_SORT:
            args.pop("sort")
        return {k: v for k, v in args.items() if v is not None}

    def links(self, page: Page, page_number: int, *, full: bool) -> PageLinks:
        """The query arguments of every link a page of this list names (`full`: a whole page,
        with its Top, End and new-orders links; else a fragment of rows)."""
        args = self.query_args
        after = args(after=page.next_cursor, page=page_number + 1) if page.next_cursor else None
        prev = args(before=page.prev_cursor) if page.prev_cursor else None
        # A page of a several-word search may end its bounded window empty, with rows past it
        # (orders/finding/search_window.py): its edges still lead on.
        pos, before = None, prev
        if page.items:
            # A page that had rows above it when drawn is opened at its first row.
            first = self.codec.encode(self.position_at(page.items[0])) if page.prev_cursor else None
            pos, before = args(after=first), args(before=page.head_cursor)
        links = PageLinks(pos=pos, before=before, after=after, prev=prev)
        if full:
            links.top = args()
            links.end = args(before=self.codec.encode(self.end_position()))
            # The banner counts rows above the top of the list: only a list opened at its top polls.
            if page.head_cursor and self.sort_name == NEWEST and not page.prev_cursor:
                links.new_orders = args(before=page.head_cursor)
        return links


@dataclass
class PageLinks:
    """The query arguments of the links a page names (None: no such link). `pos` opens the list
    at the page's first row (the address bar keeps it while the reader is on that page);
    `before`/`after` load the rows next to the page's edges again after
    static/js/scroll-window.js dropped them; `prev` is the page above; `top`, `end` and
    `new_orders` belong to a whole page only."""

    pos: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    prev: dict[str, Any] | None
    top: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    new_orders: dict[str, Any] | None = None


# Past every value a key column of each kind can hold here, on every engine (MariaDB's DATETIME
# starts at year 1000; Money is NUMERIC(12, 2); a NameKey is at most KEY_LENGTH characters).
_LOWEST: dict[type, Any] = {
    dt.datetime: dt.datetime(1000, 1, 1, tzinfo=dt.UTC),
    Decimal: Decimal("-9999999999.99"),
    int: -(2**63),
    str: "",
}
_HIGHEST: dict[type, Any] = {
    dt.datetime: dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    Decimal: Decimal("9999999999.99"),
    int: 2**63 - 1,
    str: "\U0010ffff" * KEY_LENGTH,
}
