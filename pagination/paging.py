"""The paging algorithm: paginate() and iterate() read a statement page by page in a sort's
order, iterate_ranges() hands the ranges to the caller, start_at() and end_at() make a position
from values, cursor_side() holds the rule of one cursor, one side,
keyset_select() shows the SQL a page runs. The SQL itself is built by statement.py.

The next page is found from the key values of the last row shown, never by counting rows, so
inserts and deletes elsewhere in the table cannot shift it, and the database reads about
``limit + 1`` index entries at any depth.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Select
from sqlalchemy.engine.url import URL

from .cursor import AFTER, BEFORE, CursorCodec, Position, filters_fingerprint
from .errors import InvalidPosition, KeysetError, PaginationError
from .planning import plan, planned
from .results import Batch, Page, Range
from .sort import Keyset, SeekForm
from .statement import Read, reads
from .values import misfit, to_cursor

_Encoder = Callable[..., str]  # (keys, side, inclusive=False) -> a sealed cursor
_C = TypeVar("_C", bound=str | Position)


def _encoder(codec: CursorCodec, sort: Keyset, fingerprint: str, meta: Mapping[str, str] | None) -> _Encoder:
    sealed = dict(meta or {})

    def make(keys: Sequence[Any], side: str, inclusive: bool = False) -> str:
        return codec.encode(
            Position(sort.name, side, fingerprint, tuple(keys), inclusive, sealed, sort.terms)
        )

    return make


@dataclass(frozen=True)
class Window:
    """A bound on one page's work (``paginate(..., window=Window(lead, size))``): the page reads
    only the rows of its statement that lie within the next `size` rows of `lead` past its
    position. `lead` selects from a narrower index range over the same sort (a search's rarest
    word, say) and holds every row of the statement: so a statement whose rows are sparse in
    that range (a filter few rows meet) costs at most `size` index entries and one probe per page.
    A page cut short by the window carries a cursor at the window's end on its far side (next,
    or previous reading backward), and the page behind it goes on from there; it may hold fewer
    than `limit` rows, even none."""

    lead: Select[Any]
    size: int


def cursor_side(after: _C | None, before: _C | None) -> tuple[_C | None, str]:
    """The cursor given and the direction it reads (AFTER when none): the one rule, for this
    library's entry points and for an app reading them from a request, that a page is read from
    one side of one position."""
    if after is not None and before is not None:
        raise PaginationError("give either after or before, not both")
    return (before, BEFORE) if before is not None else (after, AFTER)


def paginate(
    session: Any,
    stmt: Select[Any],
    sort: Keyset,
    *,
    limit: int,
    codec: CursorCodec,
    after: str | Position | None = None,
    before: str | Position | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
    seek: SeekForm | None = None,
    window: Window | None = None,
) -> Page:
    """One page of `stmt` in the sort's order: the first page, or the page `after`/`before` a
    cursor. `session` is a Session (binds included) or a Connection.

    `after`/`before` is a cursor string, or the Position a caller already decoded from one
    (``codec.decode(cursor)``, e.g. to read its meta first): it is not decoded again, and is
    checked against the sort, direction and filters all the same.

    `filters` are the user-facing filters already applied to `stmt`; their fingerprint is bound
    into the cursors so a cursor cannot be replayed against other filters. `meta` (text to
    text, e.g. the WAL position the page was read at) is sealed into every cursor the page
    returns, unchecked here; `codec.decode(cursor).meta` gives it back. `seek` is the form of the
    seek predicate ("auto" or "bounded", see statement.py; default: the sort's). `window` bounds
    the page's work by a narrower statement's range (see Window).
    Raises InvalidCursor or CursorMismatch (PaginationError) for a cursor the client should not
    send, KeysetError for a statement or sort that cannot be paged (the server's mistake).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PaginationError("limit must be a positive integer")
    cursor, direction = cursor_side(after, before)
    fingerprint = filters_fingerprint(filters)
    position, keys = None, None
    if cursor is not None:
        position = cursor if isinstance(cursor, Position) else codec.decode(cursor)
        keys = sort.accept(position, direction=direction, filters=fingerprint)
    backward = direction == BEFORE
    inclusive = bool(position and position.inclusive)
    make = _encoder(codec, sort, fingerprint, meta)
    window_end = None
    if window is not None:
        stmt, window_end = _within(session, stmt, sort, window, keys, backward, inclusive, seek)
    built, exact = _planned(session, stmt, sort, seek)
    if window is not None:
        exact = None  # bounded by this page's own window end: a statement no other page reads

    # Fetch one extra row to learn whether the page has a successor, without COUNT(*). On a
    # cursor page the read starts at the cursor's own row: when it is still there (nearly
    # always) it proves a row on the side the reader came from, within the same index range
    # (limit + 2 entries, one descent). When it was deleted, or the page came back empty,
    # one index probe asks instead: "a cursor was given" does not prove a previous row.
    rows, near = built.fetch(
        session,
        stmt,
        keys,
        backward=backward,
        inclusive=inclusive,
        limit=limit + 1,
        start_at_keys=position is not None and not inclusive,
        exact=exact,
    )
    if rows and keys is not None and not inclusive:
        sort.check_advance(keys, rows.keys(0), backward=backward)
    more_beyond = len(rows) > limit
    rows.rows = rows.rows[:limit]
    if backward:
        rows.rows.reverse()
    page = Page(items=rows.items())
    if rows:
        page.head_cursor = make(rows.keys(0), BEFORE)
    if keys is not None and not near:
        near = built.exists(session, stmt, keys, backward=not backward, inclusive=not inclusive)

    # The far side is known from the extra row. Within one statement "a row at or before the
    # cursor" is the same as "a row before the page's first row": nothing lies between them
    # (after a separate probe, whatever lies between was inserted since: a row all the same).
    # An empty page has no edge row, so its cursor for the way back includes the position.
    # A `before` cursor at the first row is head_cursor, already sealed: reuse it.
    far_cursor = None
    if more_beyond:
        far_cursor = page.head_cursor if backward else make(rows.keys(-1), AFTER)
    near_cursor = None
    if near:
        if not rows:
            assert position is not None  # `near` is only known from a cursor's position
            near_cursor = make(position.keys, AFTER if backward else BEFORE, inclusive=True)
        else:
            near_cursor = make(rows.keys(-1), AFTER) if backward else page.head_cursor
    if far_cursor is None and window_end is not None:  # cut by the window: on from its end
        far_cursor = make(window_end, BEFORE if backward else AFTER)
    page.next_cursor, page.prev_cursor = (near_cursor, far_cursor) if backward else (far_cursor, near_cursor)
    return page


def _within(
    session: Any,
    stmt: Select[Any],
    sort: Keyset,
    window: Window,
    keys: Sequence[Any] | None,
    backward: bool,
    inclusive: bool,
    seek: SeekForm | None,
) -> tuple[Select[Any], tuple[Any, ...] | None]:
    """`stmt` kept to the rows up to the window's end, and that end's key values (None: fewer
    than `window.size` rows of the lead remain, and `stmt` is read to its end)."""
    size = window.size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise PaginationError("a window's size must be a positive integer")
    if sort.nulls_last is not None:
        raise KeysetError(
            f"sort {sort.name!r}: a window is one index range, and a first term with "
            ".nulls_first()/.nulls_last() is two; page it without a window"
        )
    lead = _plan(session, window.lead, sort, seek)
    read = Read(None, None if keys is None else 0, len(keys or ()), inclusive)
    probe = lead.range_end_probe(window.lead, read, keys, size=size, backward=backward)
    found = session.execute(probe, lead.bind(keys) if keys is not None else {}).first()
    if found is None:
        return stmt, None
    end = tuple(to_cursor(t.type, v) for t, v in zip(sort.columns, found, strict=True))
    # The rows up to the end are the rows past it reading the other way, the end included.
    upto = lead.seek(end, backward=not backward, inclusive=True, to=True)
    bounded = stmt.having(upto) if sort.aggregated else stmt.where(upto)
    return bounded.params(lead.bind(end, to=True)), end


def _plan(session: Any, stmt: Any, sort: Keyset, seek: SeekForm | None) -> Any:
    """The statement's plan on the engine it will run on: a Connection's, or the one a Session
    binds it to (which may be one of several, Session(binds=...))."""
    return _planned(session, stmt, sort, seek)[0]


def _planned(session: Any, stmt: Any, sort: Keyset, seek: SeekForm | None) -> tuple[Any, Any]:
    """`_plan()`, and the statement's exact bound values (planning.planned())."""
    plain = isinstance(session, Connection)
    dialect = session.dialect if plain else session.get_bind(clause=stmt).dialect
    return planned(stmt, sort, dialect, plain_rows=plain, seek=seek)


def iterate(
    session: Any,
    stmt: Select[Any],
    sort: Keyset,
    *,
    batch_size: int,
    codec: CursorCodec | None = None,
    after: str | Position | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
    seek: SeekForm | None = None,
) -> Iterator[Batch]:
    """Walk all of `stmt` in the sort's order, `batch_size` rows per query, in constant memory.

    Each batch carries the `after` cursor that resumes right behind it (when a codec is given),
    so an interrupted export can continue where it stopped; `meta` is sealed into it.
    """
    _check_batch_size(batch_size)
    built, exact = _planned(session, stmt, sort, seek)
    fingerprint = filters_fingerprint(filters)
    keys, inclusive = _resume(sort, after, codec, fingerprint)
    make = _encoder(codec, sort, fingerprint, meta) if codec is not None else None
    while True:
        rows, _ = built.fetch(
            session, stmt, keys, backward=False, inclusive=inclusive, limit=batch_size, exact=exact
        )
        if not rows:
            return
        if keys is not None and not inclusive:
            sort.check_advance(keys, rows.keys(0), backward=False)
        keys, inclusive = rows.keys(-1), False
        yield Batch(items=rows.items(), cursor=make(keys, AFTER) if make is not None else None)
        if len(rows) < batch_size:
            return


def _check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PaginationError("batch_size must be a positive integer")


def _resume(
    sort: Keyset, after: str | Position | None, codec: CursorCodec | None, fingerprint: str
) -> tuple[Sequence[Any] | None, bool]:
    """The key values a walk resumes behind (None: from the start), and whether inclusively."""
    if after is None:
        return None, False
    if isinstance(after, Position):
        position = after
    elif codec is None:
        raise PaginationError("resuming from a cursor needs the codec that made it")
    else:
        position = codec.decode(after)
    return sort.accept(position, direction=AFTER, filters=fingerprint), position.inclusive


def iterate_ranges(
    session: Any,
    stmt: Select[Any],
    sort: Keyset,
    *,
    batch_size: int,
    codec: CursorCodec | None = None,
    after: str | Position | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
    seek: SeekForm | None = None,
) -> Iterator[Range]:
    """Walk all of `stmt` as consecutive ranges of `batch_size` rows that the caller reads
    itself: ``session.execute(range.statement, range.params)``, or any other way, such as
    PostgreSQL's ``COPY (SELECT ...) TO STDOUT`` or ``INSERT ... SELECT``. A range's statement
    selects `stmt`'s columns (nothing appended) for the rows past the previous range up to and
    including this range's last row, in the sort's order; every range after the first runs the
    same statement with other parameters (compile it once; one per pattern of NULL key values).
    Each Range carries the `after` cursor that resumes behind it.

    A range is found by one probe from the sort's index alone: the key values of the
    `batch_size`-th row past the previous range; when fewer rows remain, a second probe finds
    the last one and counts them (a short range is the last). Rows
    inserted inside a range between the probe and the read are read with it; a row deleted
    there is not: each range is one index range between two positions, like a page.
    A first term with explicitly placed NULLs is two index ranges: use iterate() for it.
    """
    _check_batch_size(batch_size)
    if sort.nulls_last is not None:
        raise KeysetError(
            f"sort {sort.name!r}: iterate_ranges() reads one index range, and a first term with "
            ".nulls_first()/.nulls_last() is two; use iterate()"
        )
    built = _plan(session, stmt, sort, seek)
    fingerprint = filters_fingerprint(filters)
    keys, inclusive = _resume(sort, after, codec, fingerprint)
    make = _encoder(codec, sort, fingerprint, meta) if codec is not None else None
    # One probe per way of starting (from the top, past a row, at a position), one range
    # statement per pattern of NULLs in its two positions: the same objects for every range.
    probes: dict[tuple[Any, ...], Select[Any]] = {}
    bounded: dict[tuple[Any, ...], Select[Any]] = {}

    def probe_of(read: Read, keys: Sequence[Any] | None, *, counted: bool) -> Select[Any]:
        key = (counted, read.seek_from is None, read.inclusive, tuple(v is None for v in keys or ()))
        if key not in probes:
            make_probe = built.range_probe if counted else built.range_end_probe
            probes[key] = make_probe(stmt, read, keys, size=batch_size)
        return probes[key]

    def range_of(read: Read, keys: Sequence[Any] | None, last: Sequence[Any]) -> Select[Any]:
        key = (read.seek_from is None, read.inclusive, tuple(v is None for v in (*(keys or ()), "", *last)))
        if key not in bounded:
            bounded[key] = built.range_statement(stmt, read, keys, last)
        return bounded[key]

    while True:
        read = Read(None, None if keys is None else 0, len(keys or ()), inclusive)
        params = built.bind(keys) if keys is not None else {}
        # A full range's end is the batch_size-th row; only the last, short range is counted.
        found = session.execute(probe_of(read, keys, counted=False), params).first()
        rows = batch_size
        if found is None:
            found = session.execute(probe_of(read, keys, counted=True), params).first()
            if found is None:
                return
            rows = found[-1]
        last = tuple(to_cursor(t.type, v) for t, v in zip(sort.columns, found, strict=False))
        if keys is not None and not inclusive:
            sort.check_advance(keys, last, backward=False)
        yield Range(
            statement=range_of(read, keys, last),
            params={**params, **built.bind(last, to=True)},
            cursor=make(last, AFTER) if make is not None else None,
            rows=rows,
        )
        if rows < batch_size:
            return
        keys, inclusive = last, False


def start_at(
    sort: Keyset,
    values: Sequence[Any],
    *,
    codec: CursorCodec,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> str:
    """An `after` cursor at key values rather than at a row: the page it opens starts at the
    first row at or past `values` in the sort's order (a jump to a date, an amount, a name).

    `values` may be a prefix of the sort's terms (``["Ana"]`` for customer, id): it then
    matches every row sharing it. None stands for a NULL of a nullable term. The page has a
    `prev_cursor` when rows lie before it, so the reader scrolls both ways from there. Raises
    InvalidPosition (a PaginationError) naming the value a column could not hold.
    """
    return codec.encode(position_at(sort, values, side=AFTER, filters=filters, meta=meta))


def end_at(
    sort: Keyset,
    values: Sequence[Any],
    *,
    codec: CursorCodec,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> str:
    """A `before` cursor at key values: the page it opens ends with the last row at or before
    `values` in the sort's order. At values past every row's (the largest a term's type holds,
    in its direction), it opens the last page of the list in one read of the index's end."""
    return codec.encode(position_at(sort, values, side=BEFORE, filters=filters, meta=meta))


def position_at(
    sort: Keyset,
    values: Sequence[Any],
    *,
    side: str = AFTER,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> Position:
    """The position start_at() (`side` AFTER) or end_at() (BEFORE) seals, unsealed: for a caller
    that reads the page itself first (``paginate(after=position)`` decodes nothing) and seals it
    only where a client needs it (``codec.encode(position)``, e.g. for a URL). Raises
    InvalidPosition naming the value a column could not hold."""
    values = tuple(values)
    if side not in (AFTER, BEFORE):
        raise PaginationError(f"side must be AFTER or BEFORE, not {side!r}")
    if not 1 <= len(values) <= len(sort.columns):
        raise InvalidPosition(
            f"sort {sort.name!r} takes 1 to {len(sort.columns)} values, not {len(values)}: {list(values)!r}"
        )
    keys = []
    for i, value in enumerate(values):
        why = (
            None if value is None else misfit(sort.columns[i].type, value, computed=sort.columns[i].computed)
        )
        if why is not None:
            raise InvalidPosition(f"{value!r} cannot be a value of {sort.describe(i)}: {why}")
        keys.append(to_cursor(sort.columns[i].type, value))
    return Position(
        sort.name, side, filters_fingerprint(filters), tuple(keys), True, dict(meta or {}), sort.terms
    )


def keyset_select(
    stmt: Select[Any],
    sort: Keyset,
    keys: Sequence[Any] | None = None,
    *,
    limit: int,
    backward: bool = False,
    inclusive: bool = False,
    dialect: str = "",
    flag_keys_row: bool = False,
    seek: SeekForm | None = None,
) -> Select[Any]:
    """`stmt` restricted to rows past `keys`, in the sort's order, with the key terms appended
    where the statement does not select them, key values bound (as a Session runs it).

    With `flag_keys_row` (and `inclusive`), one more column, `_keyset_at`, says which row is the
    one at `keys` itself. This is the statement a cursor page runs (paginate() binds the keys
    at execution instead): compile it or EXPLAIN it to see what a page costs;
    tests/test_plans.py checks that it is the SQL paginate() sends and reads its plan.
    """
    engine = URL.create(dialect).get_dialect()() if dialect else _default_dialect()
    built = plan(stmt, sort, engine, plain_rows=False, seek=seek)
    read = reads(sort, keys, backward=backward, inclusive=inclusive)[0]
    page, params = built.statement(
        stmt, read, keys, limit=limit, backward=backward, flag_keys_row=flag_keys_row
    )
    return page.params(params) if params else page


def _default_dialect() -> Any:
    from sqlalchemy.engine.default import DefaultDialect

    return DefaultDialect()
