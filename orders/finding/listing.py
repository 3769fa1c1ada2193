"""One list request: parsed, validated and its cursor decoded once, for the HTML page, its
fragments, the JSON API, the CSV export, the CLI export, the new-orders count, go-to and End.

Every read of the list enters the pagination library here, one way: `ListRequest.read` for a
page (and the one-row probes of go-to), `ListRequest.ranges` for the export's batches; each
gets the request's codec, filters, seek form and the position it starts from from the request
itself (docs/life-of-a-request.md follows a cursor through it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from flask import current_app, has_app_context
from sqlalchemy import ColumnElement, Connection, Select, and_, func, literal, or_, select, union_all
from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

from orders.core.settings import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from orders.data.models import ORDER_WORDS, STATUSES, Order
from orders.data.names import KEY_LENGTH
from orders.finding import jump
from orders.finding.params import InvalidParameter, check_text_parameters, parse_int, single
from orders.finding.search import WORDS, Search, SearchError
from orders.finding.sorts import DEFAULT_SORT, SORTS, SortChoice
from pagination import (
    AFTER,
    BEFORE,
    CursorCodec,
    Keyset,
    Page,
    PaginationError,
    Position,
    Range,
    SeekForm,
    cursor_side,
    end_at,
    filters_fingerprint,
    iterate_ranges,
    keyset_select,
    paginate,
    start_at,
)
from pagination.values import from_cursor, to_cursor

MAX_LIMIT = MAX_PAGE_SIZE


def codec() -> CursorCodec:
    """The codec create_app() made from SECRET_KEY (and its fallbacks): seals and opens cursors."""
    found: CursorCodec = current_app.extensions["cursor_codec"]
    return found


def sharded() -> bool:
    """Whether the app reads orders through postgres_fdw shards (DATABASE_SHARD_URLS)."""
    return has_app_context() and bool(current_app.config.get("DATABASE_SHARD_URLS"))


def list_request(args: MultiDict[str, str]) -> ListRequest:
    """The list `args` ask for, as this app reads it: its codec, its shards, its PAGE_SIZE."""
    return ListRequest.from_args(
        args, default_limit=current_app.config["PAGE_SIZE"], codec=codec(), sharded=sharded()
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


@dataclass(frozen=True)
class ListRequest:
    """What a list read asks for, and everything reading it needs: nothing else is consulted
    (no request, no session, no app context) between here and the SQL."""

    sort: str  # the sort's name (the URL's sort=): SORTS[sort] is the choice, .keyset its library sort
    status: str | None = None
    limit: int = DEFAULT_PAGE_SIZE
    # The search box (orders/finding/search.py): an order number, or the start of a customer's name.
    search: Search | None = None
    # "Go to" (`to`, with the reader's zone `tz`): the list starts at the first row at or past it.
    goto: jump.Goto | None = None
    # The cursor as the client sent it (after= or before=), the position decoded from it once,
    # and whether it reads backward (before=).
    cursor: str | None = None
    position: Position | None = None
    backward: bool = False
    # Over postgres_fdw shards: the seek postgres_fdw ships, and no words table to search.
    sharded: bool = False
    # Sealed into every cursor this read makes (the WAL position it was read at, when reads go
    # to replicas: orders/web/read_routing.py sets it), so the next page is read at least there.
    stamp: Mapping[str, str] = field(default_factory=dict, compare=False)
    codec: CursorCodec | None = field(default=None, repr=False, compare=False)
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
            search = Search.parse(single(args, "q"))
        except (PaginationError, SearchError) as err:
            raise InvalidParameter(str(err)) from None
        to = single(args, "to")
        goto = None
        if to is not None:
            if cursor is not None:
                raise InvalidParameter("give either to or a cursor (after/before), not both")
            goto = jump.Goto.parse(sort, to, single(args, "tz"))
        listing = cls(
            sort, status, limit, search, goto, sharded=sharded, codec=codec, limit_chosen="limit" in args
        )
        # Decoded here, once (InvalidCursor: a 400): read routing takes its WAL position from it,
        # the library checks it against the sort and filters without decoding it again.
        return listing if cursor is None else listing.at(cursor, backward=direction == BEFORE)

    def at(self, cursor: str | None, *, backward: bool = False) -> ListRequest:
        """This list read from `cursor` (None: its top) instead, the cursor decoded with its
        codec: no go-to."""
        position = None if cursor is None else self.sealer.decode(cursor)
        return replace(self, cursor=cursor, position=position, backward=backward, goto=None)

    def read_at(self, stamp: Mapping[str, str]) -> ListRequest:
        """This list, read where `stamp` says (sealed into the cursors it makes)."""
        return replace(self, stamp=dict(stamp))

    @property
    def sealer(self) -> CursorCodec:
        if self.codec is None:
            raise TypeError("this ListRequest has no codec: build it with from_args(..., codec=)")
        return self.codec

    @property
    def choice(self) -> SortChoice:
        return SORTS[self.sort]

    @property
    def keyset(self) -> Keyset:
        # Over shards (foreign partitions) the seek must be one postgres_fdw ships to each shard.
        # A name search pages by the words table's copy of the sort's columns (orders/finding/search.py).
        searched = self.search.keyset(self.sort, sharded=self.sharded) if self.search else None
        return searched or SORTS[self.sort].keyset

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
        stmt = select(*columns) if columns else select(Order.__table__)
        if self.status is not None:
            stmt = stmt.where(Order.status == self.status)
            if self.choice.status_index and not (self.search and self.search.words):
                stmt = with_status_index_hint(stmt)
        if self.search is not None:
            stmt = self.search.where(stmt, sharded=self.sharded)
        return stmt

    # --- Into the library: one way for pages, one for batches --------------------------------

    def read(
        self,
        connection: Connection,
        stmt: Select[Any] | None = None,
        *,
        start: str | Position | None = None,
        backward: bool = False,
        limit: int | None = None,
    ) -> Page:
        """One page of this list (`stmt`: its statement unless narrowed) from `start`, sealed
        with this request's codec, filters and stamp, in its seek form. The session's
        connection, not the session: the statement is Core (plain rows), and the ORM's execute
        and row loading around it were a tenth of a page's time."""
        return paginate(
            connection,
            self.statement() if stmt is None else stmt,
            self.keyset,
            limit=self.limit if limit is None else limit,
            codec=self.sealer,
            seek=self.seek,
            after=None if backward else start,
            before=start if backward else None,
            filters=self.filters,
            meta=self.stamp,
        )

    def ranges(
        self, session: Session, stmt: Select[Any], *, start: str | Position | None, batch_size: int
    ) -> Iterator[Range]:
        """The export's batches of this list (`stmt`: its statement with the export's columns)
        from `start`, each one index range (pagination.iterate_ranges)."""
        return iterate_ranges(
            session,
            stmt,
            self.keyset,
            batch_size=batch_size,
            codec=self.sealer,
            after=start,
            filters=self.filters,
            seek=self.seek,
        )

    def start(self, session: Session) -> str | Position | None:
        """Where this list is read from: its go-to's first row, or its cursor's position (None:
        the top)."""
        if self.goto is not None:
            return self._goto_start(session)
        return self.position

    def page(self, session: Session) -> Page:
        """This request's page, read through `session`."""
        start = self.start(session)
        backward = self.backward and self.goto is None
        if self.search is not None and len(self.search.words) > 1 and not self.sharded:
            page = windowed_page(self, session.connection(), start, backward=backward)
        else:
            page = self.read(session.connection(), start=start, backward=backward)
        session.info["page_rows"] = len(page.items)  # the request's log line (orders/web/request_log.py)
        return page

    def cursor_at(self, row: Any) -> str:
        """An inclusive `after` cursor at `row`'s whole key: the list opened there starts with it."""
        keys = [getattr(row, str(column.expr.key)) for column in self.keyset.columns]
        return start_at(self.keyset, keys, codec=self.sealer, filters=self.filters, meta=self.stamp)

    def query_args(self, **changes: Any) -> dict[str, Any]:
        """URL parameters for a link from this list, without defaults (short, shareable URLs)."""
        q = self.search.text if self.search else None
        args: dict[str, Any] = {"sort": self.sort, "status": self.status, "q": q}
        if self.limit_chosen:
            args["limit"] = self.limit
        args.update(changes)
        if args.get("sort") == DEFAULT_SORT:
            args.pop("sort")
        return {k: v for k, v in args.items() if v is not None}

    # --- Go to and End ---------------------------------------------------------------------

    def _goto_start(self, session: Session) -> str:
        """The inclusive `after` cursor at the first row of this list at or past its go-to, or
        InvalidParameter saying plainly that nothing is there (a value outside the list's rows,
        a name no word of which starts with what was typed): the list is not moved.

        A name goes to the first row, in the list's order, whose name has a word starting with
        each word typed (as the search matches: surnames too); a date or an amount to the first
        row at or past it, unless the value lies beyond either end of the list."""
        goto = self.goto
        assert goto is not None
        if self.choice.goto == "name":
            found = self._first_named(session)
            if found is None:
                raise InvalidParameter(f"no name in this list has a word starting with {goto.text[:40]!r}")
            return replace(self, goto=None).cursor_at(found)
        cursor = start_at(self.keyset, [goto.value], codec=self.sealer, filters=self.filters)
        page = self.read(session.connection(), start=cursor, limit=1)
        if not page.items:
            raise InvalidParameter(jump.nothing_past(self.choice, goto))
        if not page.has_previous and not jump.covers(self.choice, goto, page.items[0]):
            raise InvalidParameter(jump.nothing_at(self.choice, goto, page.items[0]))
        return cursor

    def _first_named(self, session: Session) -> Any:
        """The first row of this list whose name has a word starting with each word of the
        go-to (the search's rule), or None."""
        assert self.goto is not None
        words = self.goto.value
        search = self.search.plus(words) if self.search is not None else Search(self.goto.text, words=words)
        # Read from the rarest word's range: an absent word costs nothing, a rare one its few rows.
        rarest = _rarest_first(session.connection(), search.words)
        if not rarest:
            return None  # a word no order holds
        probe = replace(self, search=replace(search, lead=rarest[0]), goto=None, cursor=None, position=None)
        page = probe.read(session.connection(), limit=1)
        return page.items[0] if page.items else None

    def end_cursor(self) -> str:
        """A `before` cursor past the last row of the list's sort: the page it opens is the
        list's last `limit` rows, read from the end of the sort's index in one request (one index
        range read backwards), not through the rows in between."""
        keys = [(_LOWEST if t.descending else _HIGHEST)[t.type.python_type] for t in self.keyset.columns]
        return end_at(self.keyset, keys, codec=self.sealer, filters=self.filters)


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


# --- A search of several words: a bounded window of the rarest word's range per page --------

# A page of a several-word search reads at most this many entries of its rarest word's range
# (each checked for the other words by primary key); a page that finds fewer matches there
# ends early with a cursor at the window's end, and the next page goes on from it. So a page's
# work is bounded whatever the words: common, absent, or never together (docs/finding.md).
SEARCH_WINDOW = 200
# Words are counted up to this many entries each to find the rarest (one short index range each).
WORD_COUNT_CAP = 200


def _rarest_first(connection: Connection, words: tuple[str, ...]) -> tuple[str, ...]:
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


def _not_past(keyset: Keyset, end: tuple[Any, ...], *, backward: bool) -> ColumnElement[bool]:
    """The rows at or before `end` in the keyset's order (at or after it, reading backward)."""
    condition: ColumnElement[bool] | None = None
    for term, value in reversed(list(zip(keyset.columns, end, strict=True))):
        before = term.expr > value if term.descending != backward else term.expr < value
        if condition is None:
            condition = or_(before, term.expr == value)
        else:
            condition = or_(before, and_(term.expr == value, condition))
    assert condition is not None
    return condition


def windowed_page(listing: ListRequest, connection: Connection, start: Any, *, backward: bool) -> Page:
    """A page of a several-word search that reads at most SEARCH_WINDOW entries of the rarest
    word's range past its start; cut there, it carries a cursor at the window's end."""
    assert listing.search is not None
    keyset = listing.keyset
    position = listing.sealer.decode(start) if isinstance(start, str) else start
    fingerprint = filters_fingerprint(listing.filters)
    if position is not None and (position.sort != keyset.name or position.filters != fingerprint):
        return listing.read(connection, start=start, backward=backward, limit=1)  # refused, as any page
    words = _rarest_first(connection, listing.search.words)
    if not words:
        return Page([])  # a word no order holds: nothing matches, anywhere in the list
    windowed = replace(listing, search=replace(listing.search, lead=words[0]))
    keys = None
    if position is not None:  # a go-to's position may hold a prefix of the keys
        keys = [from_cursor(t.type, v) for t, v in zip(keyset.columns, position.keys, strict=False)]
    lead = select(*(t.expr for t in keyset.columns)).where(WORDS.c.word == words[0])
    probe = keyset_select(
        lead,
        keyset,
        keys,
        limit=SEARCH_WINDOW,
        backward=backward,
        inclusive=position is not None and position.inclusive,
        dialect=connection.dialect.name,
        seek=listing.seek,
    )
    end = connection.execute(probe.limit(1).offset(SEARCH_WINDOW - 1)).first()
    stmt = windowed.statement()
    if end is not None:
        stmt = stmt.where(_not_past(keyset, tuple(end), backward=backward))
    page = windowed.read(connection, stmt, start=start, backward=backward)
    if end is None:
        return page
    at_end = tuple(to_cursor(t.type, v) for t, v in zip(keyset.columns, end, strict=True))
    side = BEFORE if backward else AFTER
    cut = listing.sealer.encode(Position(keyset.name, side, fingerprint, at_end, False, dict(listing.stamp)))
    if backward and page.prev_cursor is None:
        return replace(page, prev_cursor=cut)
    if not backward and page.next_cursor is None:
        return replace(page, next_cursor=cut)
    return page
