"""Keyset ("seek method") pagination on SQLAlchemy 2: sorts, seek predicates, pages.

The next page is found from the key values of the last row shown, never by counting rows,
so inserts and deletes elsewhere in the table cannot shift it, and the database reads about
``limit + 1`` index entries at any depth.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, Integer, Numeric, Select, String, and_, bindparam, or_, tuple_
from sqlalchemy.orm import Session
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import ColumnElement, UnaryExpression

from .cursor import AFTER, BEFORE, CursorCodec, Position, filters_fingerprint
from .errors import CursorMismatch, InvalidCursor, InvalidPosition, KeysetError, PaginationError

# Dialects whose planners turn a row-value comparison into an index range (PostgreSQL's
# "Index Cond", SQLite's SEARCH). MariaDB and MySQL scan for it, see docs/design.md.
_ROW_VALUE_DIALECTS = {"postgresql", "sqlite"}


@dataclass(frozen=True)
class _Column:
    expr: ColumnElement[Any]
    descending: bool


def _unwrap(term: Any) -> _Column:
    descending = False
    if isinstance(term, UnaryExpression):
        if term.modifier is operators.desc_op:
            descending = True
        elif term.modifier is not operators.asc_op:
            raise KeysetError(f"unsupported ordering {term}: use .asc() or .desc() (no NULLS)")
        term = term.element
    if hasattr(term, "__clause_element__"):
        term = term.__clause_element__()
    if isinstance(term, UnaryExpression):  # e.g. .desc().nullsfirst()
        raise KeysetError(f"unsupported ordering {term}: NULLS FIRST/LAST cannot be paged")
    if not hasattr(term, "nullable") or not hasattr(term, "table"):
        raise KeysetError(f"keyset columns must be table columns, not {term!r}")
    return _Column(term, descending)


class Keyset:
    """A named, total sort order: ``Keyset("newest", Order.created_at.desc(), Order.id.desc())``.

    Every column must be NOT NULL (NULLs do not compare), and the last one must be unique
    (the primary key) so that no two rows tie on the whole key.
    """

    def __init__(self, name: str, *order_by: Any):
        if not order_by:
            raise KeysetError(f"sort {name!r} needs at least one column")
        self.name = name
        self.columns = tuple(_unwrap(term) for term in order_by)
        for column in self.columns:
            if column.expr.nullable:
                raise KeysetError(
                    f"sort {name!r}: column {column.expr.name!r} is nullable; "
                    "NULLs do not compare, so keyset columns must be NOT NULL"
                )
        last = self.columns[-1].expr
        table_pk = list(getattr(last.table, "primary_key", []))
        unique = getattr(last, "unique", False) or (last.primary_key and len(table_pk) == 1)
        if not unique:
            raise KeysetError(
                f"sort {name!r} must end in a unique column (the primary key); "
                f"{last.name!r} is not unique, so rows could tie and be skipped or repeated"
            )
        # The SQL a page adds to a statement depends only on the sort, the direction and the
        # dialect, never on the position: it is built once, with named parameters for the key
        # values, which every page binds at execution. Building it anew took longer than the
        # rest of paginate() (about 0.1 ms a page).
        self._key_params = tuple(
            bindparam(f"_keyset_key_{i}", type_=c.expr.type) for i, c in enumerate(self.columns)
        )
        self._parts: dict[tuple[Any, ...], Any] = {}  # threads racing only build a part twice

    def _cached(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = build()
        return part

    def bind(self, keys: Sequence[Any]) -> dict[str, Any]:
        """Execution parameters that put `keys` (all of them, or a prefix for `seek`) in the
        clauses of `seek` and `at_keys`."""
        return {p.key: v for p, v in zip(self._key_params, keys, strict=False)}

    def __repr__(self) -> str:
        terms = ", ".join(f"{c.expr.name} {'desc' if c.descending else 'asc'}" for c in self.columns)
        return f"Keyset({self.name!r}: {terms})"

    def order_by(self, *, backward: bool = False) -> tuple[ColumnElement[Any], ...]:
        """ORDER BY clauses, reversed when reading backward (a `before` page)."""
        return self._cached(
            ("order_by", backward),
            lambda: tuple(c.expr.desc() if c.descending != backward else c.expr.asc() for c in self.columns),
        )

    def key_labels(self) -> tuple[ColumnElement[Any], ...]:
        """The key columns as `_keyset_0`, `_keyset_1`, ...: appended to a page's columns."""
        return self._cached(
            ("labels",), lambda: tuple(c.expr.label(f"_keyset_{i}") for i, c in enumerate(self.columns))
        )

    def at_keys(self) -> ColumnElement[bool]:
        """True for the row at the bound keys, by the database's own equality (a case-insensitive
        collation or PAD SPACE agrees with the seek predicate, not with Python's ==)."""
        return self._cached(
            ("at_keys",),
            lambda: and_(*(c.expr == p for c, p in zip(self.columns, self._key_params, strict=True))),
        )

    def seek(
        self, *, backward: bool = False, inclusive: bool = False, dialect: str = "", depth: int = 0
    ) -> ColumnElement[bool]:
        """Rows after the bound keys (`bind(keys)`) in this order (before, when `backward`);
        with `inclusive`, the row at the keys too. With `depth`, only the first `depth` columns
        are compared (a prefix position, see start_at()): every row whose prefix lies past the
        bound one, and with `inclusive` every row that shares it.

        The form is chosen so that each engine reads an index range (measured in the design doc):
        - a row value ``(a, b) < (:a, :b)`` where the planner understands it and every column
          runs the same way;
        - otherwise the expanded OR with a leading bound on the first column,
          ``a <= :a AND (a < :a OR (a = :a AND b < :b))``: the bound gives the range, the OR
          only filters the rows that tie on the first column.
        """
        depth = depth or len(self.columns)
        return self._cached(
            ("seek", backward, inclusive, dialect, depth),
            lambda: self._seek(backward, inclusive, dialect, depth),
        )

    def _seek(self, backward: bool, inclusive: bool, dialect: str, depth: int) -> ColumnElement[bool]:
        columns, values = self.columns[:depth], self._key_params[:depth]

        def later(column: _Column, value: Any, or_equal: bool) -> ColumnElement[bool]:
            smaller = column.descending != backward
            if smaller:
                return column.expr <= value if or_equal else column.expr < value
            return column.expr >= value if or_equal else column.expr > value

        same_direction = len({c.descending for c in columns}) == 1
        if dialect in _ROW_VALUE_DIALECTS and same_direction and len(columns) > 1:
            row = _Column(tuple_(*(c.expr for c in columns)), columns[0].descending)
            return later(row, tuple_(*values), inclusive)

        last = len(columns) - 1
        branches = []
        for i, (column, value) in enumerate(zip(columns, values, strict=True)):
            ties = [c.expr == v for c, v in zip(columns[:i], values[:i], strict=True)]
            branches.append(and_(*ties, later(column, value, inclusive and i == last)))
        expanded = or_(*branches)
        if last == 0:
            return expanded
        return and_(later(columns[0], values[0], True), expanded)

    def check(self, position: Position, *, direction: str, filters: str) -> None:
        """Refuse a cursor made for another sort, direction or filters."""
        if position.sort != self.name:
            raise CursorMismatch(
                f"cursor was made for sort {position.sort!r}, not {self.name!r}: "
                "start again from the first page of this sort"
            )
        if position.direction != direction:
            raise CursorMismatch(
                f"cursor was made for {position.direction!r}, not {direction!r}: "
                f"pass it as {position.direction!r}"
            )
        if position.filters != filters:
            raise CursorMismatch("cursor was made for other filters: start again from the first page")
        # Only an inclusive position (start_at(), or the way back from an empty page) may hold
        # a prefix of the key; every cursor made from a row holds all of it.
        n = len(position.keys)
        if not (n == len(self.columns) or (position.inclusive and 1 <= n < len(self.columns))):
            raise InvalidCursor(f"cursor does not fit sort {self.name!r}")
        for column, value in zip(self.columns, position.keys, strict=False):
            if _misfit(column.expr.type, value) is not None:
                raise InvalidCursor(f"cursor does not fit sort {self.name!r}")

    def describe(self, i: int) -> str:
        column = self.columns[i].expr
        return f"{getattr(column, 'name', None) or column} ({column.type})"


def _misfit(type_: Any, value: Any) -> str | None:
    """Why `value` could not be a value of a column of `type_` (None when it could). Refuses,
    before the database sees it, a key the column cannot hold (it would fail while binding,
    or overflow in the server)."""
    impl = getattr(type_, "impl_instance", None) or type_  # a TypeDecorator's underlying type
    try:
        expected = type_.python_type
    except NotImplementedError:
        return None
    if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
        return f"a {type(value).__name__}, where a {expected.__name__} is needed"
    if isinstance(value, dt.datetime) and getattr(impl, "timezone", False) and value.tzinfo is None:
        return "a time without a timezone, for a timezone-aware column"
    if isinstance(impl, Integer) and isinstance(value, int):
        bits = 63 if isinstance(impl, BigInteger) else 31
        if not -(2**bits) <= value < 2**bits:
            return f"out of range for a {bits + 1}-bit integer"
    if isinstance(impl, Numeric) and isinstance(value, Decimal) and impl.precision is not None:
        whole_digits = impl.precision - (impl.scale or 0)
        if not (value.is_finite() and abs(value) < Decimal(10) ** whole_digits):
            return f"out of range for NUMERIC({impl.precision}, {impl.scale or 0})"
    if isinstance(impl, String) and isinstance(value, str):
        # No engine keeps NUL in text (PostgreSQL refuses it outright), so no row has one.
        if "\x00" in value:
            return "text with a NUL character"
        if impl.length is not None and len(value) > impl.length:
            return f"longer than {impl.length} characters"
    return None


def start_at(
    keyset: Keyset,
    values: Sequence[Any],
    *,
    codec: CursorCodec,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> str:
    """An `after` cursor at key values rather than at a row: the page it opens starts at the
    first row at or past `values` in the sort's order (a jump to a date, an amount, a name).

    `values` may be a prefix of the sort's columns (``["Ana"]`` for customer, id): it then
    matches every row sharing it. The page has a `prev_cursor` when rows lie before it, so the
    reader scrolls both ways from there. Raises InvalidPosition (a PaginationError) naming the
    value a column could not hold.
    """
    values = tuple(values)
    if not 1 <= len(values) <= len(keyset.columns):
        raise InvalidPosition(
            f"sort {keyset.name!r} takes 1 to {len(keyset.columns)} values, "
            f"not {len(values)}: {list(values)!r}"
        )
    for i, value in enumerate(values):
        why = _misfit(keyset.columns[i].expr.type, value)
        if why is not None:
            raise InvalidPosition(f"{value!r} cannot be a value of {keyset.describe(i)}: {why}")
    position = Position(keyset.name, AFTER, filters_fingerprint(filters), values, True, dict(meta or {}))
    return codec.encode(position)


@dataclass
class Page:
    """One page of a keyset walk, in display order."""

    items: list[Any]
    next_cursor: str | None = None  # `after` cursor: set only when a next row exists
    prev_cursor: str | None = None  # `before` cursor: set only when a previous row exists
    # A `before` cursor at the first item, even on the first page: poll it to learn whether
    # rows have arrived above the page (the "N new orders" banner).
    head_cursor: str | None = field(default=None, repr=False)

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None

    @property
    def has_previous(self) -> bool:
        return self.prev_cursor is not None


@dataclass
class Batch:
    """A batch of an export walk and the `after` cursor that resumes right behind it."""

    items: list[Any]
    cursor: str | None


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


def _page_statement(
    stmt: Select[Any],
    keyset: Keyset,
    keys: Sequence[Any] | None,
    *,
    limit: int,
    backward: bool,
    inclusive: bool,
    dialect: str,
    flag_keys_row: bool,
) -> tuple[Select[Any], dict[str, Any]]:
    """The page statement with the key values left as parameters, and those parameters."""
    keyed = stmt.add_columns(*keyset.key_labels())
    params: dict[str, Any] = {}
    if keys is not None:
        keyed = keyed.where(
            keyset.seek(backward=backward, inclusive=inclusive, dialect=dialect, depth=len(keys))
        )
        if flag_keys_row:
            keyed = keyed.add_columns(keyset.at_keys().label("_keyset_at"))
        params = keyset.bind(keys)
    return keyed.order_by(None).order_by(*keyset.order_by(backward=backward)).limit(limit), params


def keyset_select(
    stmt: Select[Any],
    keyset: Keyset,
    keys: Sequence[Any] | None = None,
    *,
    limit: int,
    backward: bool = False,
    inclusive: bool = False,
    dialect: str = "",
    flag_keys_row: bool = False,
) -> Select[Any]:
    """`stmt` restricted to rows past `keys`, in keyset order, with the key columns appended.

    With `flag_keys_row` (and `inclusive`), one more column, `_keyset_at`, says which row is
    the one at `keys` itself. This is the statement a page runs (paginate() binds the keys at
    execution instead); tests EXPLAIN it to prove an index range is read.
    """
    keyed, params = _page_statement(
        stmt,
        keyset,
        keys,
        limit=limit,
        backward=backward,
        inclusive=inclusive,
        dialect=dialect,
        flag_keys_row=flag_keys_row,
    )
    return keyed.params(params) if params else keyed


class _Rows:
    """The rows a page or batch query returned: items for the caller, key values on demand.

    Keys are read only for the rows that become cursors (the first and the last), not for every
    row: an export batch of thousands of rows needs one.
    """

    def __init__(self, rows: Sequence[Any], n_keys: int, n_extra: int):
        self.rows = rows
        self._n_keys, self._n_extra = n_keys, n_extra

    def __len__(self) -> int:
        return len(self.rows)

    def items(self) -> list[Any]:
        # One entity or column: the item is that value. Several: the Row itself, which keeps
        # attribute access by name (the appended _keyset_N columns come along).
        if self.rows and len(self.rows[0]) == self._n_extra + 1:
            return [row[0] for row in self.rows]
        return list(self.rows)

    def keys(self, index: int) -> tuple[Any, ...]:
        return tuple(self.rows[index][-self._n_extra :][: self._n_keys])


def _fetch(
    session: Session,
    stmt: Select[Any],
    keyset: Keyset,
    keys: Sequence[Any] | None,
    *,
    backward: bool,
    inclusive: bool,
    limit: int,
    start_at_keys: bool = False,
) -> tuple[_Rows, bool]:
    """Rows of `stmt` past `keys` in keyset order.

    With `start_at_keys`, the read starts at `keys` inclusive, one row more is read, and the row
    found there is left out of the rows; the flag says whether it was found. It can only be the
    first row: every other row lies strictly past `keys`, and the last key column is unique.
    """
    n = len(keyset.columns)
    flagged = start_at_keys and keys is not None
    extra = n + (1 if flagged else 0)
    keyed, params = _page_statement(
        stmt,
        keyset,
        keys,
        limit=limit + (1 if flagged else 0),
        backward=backward,
        inclusive=inclusive or flagged,
        dialect=_dialect(session),
        flag_keys_row=flagged,
    )
    rows = session.execute(keyed, params).all()
    found = bool(flagged and rows and rows[0][-1])
    return _Rows(rows[1:] if found else rows, n, extra), found


def _exists(
    session: Session,
    stmt: Select[Any],
    keyset: Keyset,
    keys: Sequence[Any],
    *,
    backward: bool,
    inclusive: bool,
) -> bool:
    """One index probe: is there any row past `keys` in that direction?"""
    probe = (
        stmt.with_only_columns(keyset.columns[-1].expr, maintain_column_froms=True)
        .where(
            keyset.seek(backward=backward, inclusive=inclusive, dialect=_dialect(session), depth=len(keys))
        )
        .order_by(None)
        .order_by(*keyset.order_by(backward=backward))
        .limit(1)
    )
    return session.execute(probe, keyset.bind(keys)).first() is not None


def paginate(
    session: Session,
    stmt: Select[Any],
    keyset: Keyset,
    *,
    limit: int,
    codec: CursorCodec,
    after: str | None = None,
    before: str | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> Page:
    """One page of `stmt` in `keyset` order: the first page, or the page `after`/`before` a cursor.

    `filters` are the user-facing filters already applied to `stmt`; their fingerprint is bound
    into the cursors so a cursor cannot be replayed against other filters. `meta` (text to
    text, e.g. the WAL position the page was read at) is sealed into every cursor the page
    returns, unchecked here; `codec.decode(cursor).meta` gives it back.
    Raises InvalidCursor or CursorMismatch (both ValueError) for a cursor the client should not send.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PaginationError("limit must be a positive integer")
    if after is not None and before is not None:
        raise PaginationError("give either after or before, not both")
    fingerprint = filters_fingerprint(filters)
    direction = BEFORE if before is not None else AFTER
    cursor = before if before is not None else after
    position = None
    if cursor is not None:
        position = codec.decode(cursor)
        keyset.check(position, direction=direction, filters=fingerprint)
    backward = direction == BEFORE

    stamp = dict(meta or {})

    def make(keys: Sequence[Any], side: str, inclusive: bool = False) -> str:
        return codec.encode(Position(keyset.name, side, fingerprint, tuple(keys), inclusive, stamp))

    # Fetch one extra row to learn whether the page has a successor, without COUNT(*). On a
    # cursor page the read starts at the cursor's own row: when it is still there (nearly
    # always) it proves a row on the side the reader came from, within the same index range
    # (limit + 2 entries, one descent). When it was deleted, or the page came back empty,
    # one index probe asks instead: "a cursor was given" does not prove a previous row.
    inclusive = bool(position and position.inclusive)
    rows, near = _fetch(
        session,
        stmt,
        keyset,
        position.keys if position else None,
        backward=backward,
        inclusive=inclusive,
        limit=limit + 1,
        start_at_keys=position is not None and not inclusive,
    )
    more_beyond = len(rows) > limit
    rows.rows = rows.rows[:limit]
    if backward:
        rows.rows.reverse()
    page = Page(items=rows.items())
    if rows:
        page.head_cursor = make(rows.keys(0), BEFORE)
    if position is not None and not near:
        near = _exists(session, stmt, keyset, position.keys, backward=not backward, inclusive=not inclusive)

    # The far side is known from the extra row. Within one statement "a row at or before the
    # cursor" is the same as "a row before the page's first row": nothing lies between them
    # (after a separate probe, whatever lies between was inserted since: a row all the same).
    # An empty page has no edge row, so its cursor for the way back includes the position.
    # A `before` cursor at the first row is head_cursor, already signed: reuse it.
    far_cursor = None
    if more_beyond:
        far_cursor = page.head_cursor if backward else make(rows.keys(-1), AFTER)
    near_cursor = None
    if near:
        if not rows:
            near_cursor = make(position.keys, AFTER if backward else BEFORE, inclusive=True)  # type: ignore[union-attr]
        else:
            near_cursor = make(rows.keys(-1), AFTER) if backward else page.head_cursor
    page.next_cursor, page.prev_cursor = (near_cursor, far_cursor) if backward else (far_cursor, near_cursor)
    return page


def iterate(
    session: Session,
    stmt: Select[Any],
    keyset: Keyset,
    *,
    batch_size: int,
    codec: CursorCodec | None = None,
    after: str | None = None,
    filters: Mapping[str, Any] | None = None,
    meta: Mapping[str, str] | None = None,
) -> Iterator[Batch]:
    """Walk all of `stmt` in `keyset` order, `batch_size` rows per query, in constant memory.

    Each batch carries the `after` cursor that resumes right behind it (when a codec is given),
    so an interrupted export can continue where it stopped; `meta` is sealed into it.
    """
    if batch_size < 1:
        raise PaginationError("batch_size must be a positive integer")
    fingerprint = filters_fingerprint(filters)
    stamp = dict(meta or {})
    keys: Sequence[Any] | None = None
    inclusive = False
    if after is not None:
        if codec is None:
            raise PaginationError("resuming from a cursor needs the codec that made it")
        position = codec.decode(after)
        keyset.check(position, direction=AFTER, filters=fingerprint)
        keys, inclusive = position.keys, position.inclusive
    while True:
        rows, _ = _fetch(session, stmt, keyset, keys, backward=False, inclusive=inclusive, limit=batch_size)
        if not rows:
            return
        keys, inclusive = rows.keys(-1), False
        cursor = None
        if codec is not None:
            cursor = codec.encode(Position(keyset.name, AFTER, fingerprint, tuple(keys), False, stamp))
        yield Batch(items=rows.items(), cursor=cursor)
        if len(rows) < batch_size:
            return
