"""One list request, parsed and validated once for the HTML page, the fragments and the JSON API."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, and_, func, literal, or_, select, union_all
from sqlalchemy.orm import Session
from werkzeug.datastructures import MultiDict

from orders.core.settings import MAX_PAGE_SIZE
from orders.data.models import ORDER_WORDS, STATUSES, Order
from orders.finding import jump
from orders.finding.params import InvalidParameter, check_text_parameters, parse_int, single
from orders.finding.positions import sharded
from orders.finding.search import WORDS, Search, SearchError
from orders.finding.sorts import DEFAULT_SORT, SORTS, Sort
from pagination import (
    AFTER,
    BEFORE,
    CursorCodec,
    Keyset,
    Page,
    Position,
    SeekForm,
    filters_fingerprint,
    keyset_select,
    paginate,
)
from pagination.values import from_cursor, to_cursor

MAX_LIMIT = MAX_PAGE_SIZE


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
    # "Go to" (`to`, with the reader's zone `tz`): the list starts at the first row at or past it.
    goto: jump.Goto | None = None

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
        to = single(args, "to")
        goto = None
        if to is not None:
            if after is not None or before is not None:
                raise InvalidParameter("give either to or a cursor (after/before), not both")
            goto = jump.Goto.parse(sort, to, single(args, "tz"))
        return cls(sort, status, limit, after, before, search, goto)

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
            if self.sort_spec.status_index and not (self.search and self.search.words):
                stmt = with_status_index_hint(stmt)
        if self.search is not None:
            stmt = self.search.where(stmt, sharded=sharded())
        return stmt

    def start(self, session: Session, codec: CursorCodec, *, seek: SeekForm | None = None) -> Any:
        """Where this list is read from: its go-to's first row (orders/finding/jump.py start), or
        the cursor given (as orders/web/read_routing.py already decoded it, not twice), or None."""
        if self.goto is not None:
            return jump.start(self, session, codec, seek=seek)
        # `is not None`, not truthiness: an empty after= is a cursor, and refused as one.
        cursor = self.after if self.after is not None else self.before
        known = session.info.get("cursor_positions", {})
        return known.get(cursor, cursor)

    def first_named(self, session: Session, codec: CursorCodec, *, seek: SeekForm | None) -> Any:
        """The first row of this list whose name has a word starting with each word of the
        go-to (the search's rule), or None."""
        assert self.goto is not None
        words = self.goto.value
        search = self.search.plus(words) if self.search is not None else Search(self.goto.text, words=words)
        # Read from the rarest word's range: an absent word costs nothing, a rare one its few rows.
        rarest = _rarest_first(session.connection(), search.words)
        if not rarest:
            return None  # a word no order holds
        search = replace(search, lead=rarest[0])
        probe = replace(self, search=search, goto=None, after=None, before=None, limit=1)
        page = paginate(
            session.connection(),
            probe.statement(),
            probe.keyset,
            limit=1,
            codec=codec,
            seek=seek,
            filters=probe.filters,
        )
        return page.items[0] if page.items else None

    def page(self, session: Session, codec: CursorCodec, *, seek: SeekForm | None = None) -> Page:
        """This request's page, read through `session`, its cursors sealed with `codec` (the app
        reads it with orders/finding/positions.py read_page: its codec and its seek form)."""
        start = self.start(session, codec, seek=seek)
        if self.search is not None and len(self.search.words) > 1 and not sharded():
            meta = session.info.get("cursor_meta")
            return windowed_page(self, session.connection(), codec, start, seek=seek, meta=meta)
        return paginate(
            # The session's connection, not the session: the statement is Core (plain rows), and
            # the ORM's execute and row loading around it were a tenth of the page's time.
            session.connection(),
            self.statement(),
            self.keyset,
            limit=self.limit,
            codec=codec,
            seek=seek,
            after=start if self.before is None else None,
            before=start if self.before is not None else None,
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


def windowed_page(
    listing: ListRequest,
    connection: Connection,
    codec: CursorCodec,
    start: Any,
    *,
    seek: SeekForm | None,
    meta: Mapping[str, str] | None,
) -> Page:
    """A page of a several-word search that reads at most SEARCH_WINDOW entries of the rarest
    word's range past its cursor; cut there, it carries a cursor at the window's end."""
    assert listing.search is not None
    keyset = listing.keyset
    position = codec.decode(start) if isinstance(start, str) else start
    fingerprint = filters_fingerprint(listing.filters)
    if position is not None and (position.sort != keyset.name or position.filters != fingerprint):
        return paginate(connection, listing.statement(), keyset, limit=1, codec=codec, after=start)  # refused
    words = _rarest_first(connection, listing.search.words)
    if not words:
        return Page([])  # a word no order holds: nothing matches, anywhere in the list
    windowed = replace(listing, search=replace(listing.search, lead=words[0]))
    backward = position is not None and position.direction == BEFORE
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
        seek=seek,
    )
    end = connection.execute(probe.limit(1).offset(SEARCH_WINDOW - 1)).first()
    stmt = windowed.statement()
    if end is not None:
        stmt = stmt.where(_not_past(keyset, tuple(end), backward=backward))
    page = paginate(
        connection,
        stmt,
        keyset,
        limit=listing.limit,
        codec=codec,
        seek=seek,
        after=start if not backward else None,
        before=start if backward else None,
        filters=listing.filters,
        meta=meta,
    )
    if end is None:
        return page
    at_end = tuple(to_cursor(t.type, v) for t, v in zip(keyset.columns, end, strict=True))
    cut = Position(keyset.name, BEFORE if backward else AFTER, fingerprint, at_end, False, dict(meta or {}))
    if backward and page.prev_cursor is None:
        return replace(page, prev_cursor=codec.encode(cut))
    if not backward and page.next_cursor is None:
        return replace(page, next_cursor=codec.encode(cut))
    return page
