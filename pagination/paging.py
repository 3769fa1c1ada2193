"""The paging algorithm: paginate() and iterate() read a statement page by page in a sort's
order, start_at() makes a position from values, keyset_select() shows the SQL a page runs.

The next page is found from the keyset of the last row shown, never by counting rows, so
inserts and deletes elsewhere in the table cannot shift it, and the database reads about
``limit + 1`` index entries at any depth.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column as TableColumn
from sqlalchemy import Connection, Select, func, select
from sqlalchemy.engine import IteratorResult
from sqlalchemy.engine.result import SimpleResultMetaData
from sqlalchemy.sql.elements import ColumnClause, ColumnElement
from sqlalchemy.sql.selectable import Join

from .cursor import AFTER, BEFORE, CursorCodec, Position, filters_fingerprint
from .errors import InvalidPosition, KeysetError, PaginationError
from .lineage import key_columns, nullable, optional_tables, statement_keys
from .results import Batch, Page, Range
from .sort import Keyset, columns_in
from .values import misfit, to_cursor


def _dialect(executor: Any, stmt: Any) -> Any:
    """The dialect the statement will run on: a Connection's, or the engine a Session binds the
    statement to (which may be one of several, Session(binds=...))."""
    if isinstance(executor, Connection):
        return executor.dialect
    return executor.get_bind(clause=stmt).dialect


def _refuse(stmt: Any, dialect: Any, problem: str) -> KeysetError:
    try:
        sql = str(stmt.compile(dialect=dialect))
    except Exception:  # the message must not fail for want of SQL
        sql = repr(stmt)
    return KeysetError(f"{problem}\nSQL: {sql}")


def _check_statement(stmt: Any, sort: Keyset, dialect: Any) -> None:
    """Refuse up front, with the SQL and what to do, what paging would get wrong."""
    if not isinstance(stmt, Select):
        raise _refuse(
            stmt,
            dialect,
            f"cannot page a {type(stmt).__name__}: give a select(); to page a UNION, select from it "
            "as a subquery (u = union(...).subquery(); select(u)) and sort by u.c columns",
        )
    if stmt._limit_clause is not None or stmt._offset_clause is not None or stmt._fetch_clause is not None:
        raise _refuse(
            stmt,
            dialect,
            "the statement already has LIMIT/OFFSET: paging sets its own LIMIT, and an OFFSET would "
            "drop rows on every page; remove .limit()/.offset() (page size is paginate's limit)",
        )
    if stmt._distinct_on:
        raise _refuse(
            stmt, dialect, "DISTINCT ON picks rows by its own ORDER BY: page a subquery of it instead"
        )
    try:
        sort.check_dialect(dialect)
    except KeysetError as err:
        raise _refuse(stmt, dialect, str(err)) from None
    # Only a statement with a join can have an optional side; resolving its FROM list costs
    # about 0.5 ms, more than the rest of a page's Python: skipped for the plain ones.
    joined = stmt._setup_joins or any(isinstance(f, Join) for f in stmt._from_obj)
    problem = _unique_problem(stmt, sort)
    if problem:
        raise _refuse(stmt, dialect, problem)
    optional = optional_tables(stmt) if joined else set()
    if optional:
        for i, term in enumerate(sort.columns):
            if nullable(term.expr, optional) and not (i == 0 and sort.nulls_last is not None):
                outer = ", ".join(
                    sorted({str(c.table) for c in columns_in(term.expr) if c.table in optional})
                )
                raise _refuse(
                    stmt,
                    dialect,
                    f"sort {sort.name!r}: {term.name} comes from the optional side of an outer join "
                    f"({outer}) and is NULL where nothing matched; NULLs do not compare: sort by "
                    "columns of the other side, use an inner join, sort by coalesce(column, a value), "
                    "or make it the first term with .nulls_first()/.nulls_last()",
                )


# Whether a sort's terms are unique in a statement's rows depends on its FROMs, joins, GROUP BY
# and DISTINCT; working it out resolves the FROM list (about 0.5 ms). Remembered per those
# objects (held in the entry, so their ids are not reused while cached).
_VERDICTS: dict[tuple[Any, ...], tuple[tuple[Any, ...], str | None]] = {}


def _unique_problem(stmt: Select[Any], sort: Keyset) -> str | None:
    """Why the sort's terms may tie on two rows of this statement (None: they cannot).

    A row of a join is a row of each side: the sort needs a unique key of every FROM, except a
    side joined by the whole of its unique key (many-to-one), which adds at most one row.
    """
    parts = (
        sort,
        *stmt._raw_columns,
        *stmt._from_obj,
        *(j[0] for j in stmt._setup_joins),
        *(j[1] for j in stmt._setup_joins if j[1] is not None),
        *stmt._group_by_clauses,
    )
    key = (stmt._distinct, *map(id, parts))
    cached = _VERDICTS.get(key)
    if cached is not None:
        return cached[1]
    terms = [key_columns(t.expr) for t in sort.columns]

    def among_terms(column: Any) -> bool:
        return any(t is column or (not isinstance(column, ColumnClause) and t.compare(column)) for t in terms)

    keys = statement_keys(stmt)
    problem = None
    if not any(all(among_terms(c) for c in k) for k in keys):
        froms = ", ".join(sorted({str(f) for f in stmt.get_final_froms()})) or "its columns"
        problem = (
            f"sort {sort.name!r} is not unique in this statement's rows (from {froms}), so rows "
            "could tie and be skipped or repeated: end it in a unique key of every table, alias or "
            "subquery the statement reads (a join to many: the many side's key too); a subquery's "
            "keys are its table's key it selects, its GROUP BY terms, all the columns of a DISTINCT "
            "or UNION, or for a UNION ALL a column holding a different constant in each branch "
            "(literal(1).label('branch')) with each branch's key"
        )
    if len(_VERDICTS) >= _MAX_LAYOUTS:
        _VERDICTS.clear()
    _VERDICTS[key] = (parts, problem)
    return problem


@dataclass(frozen=True)
class _Shape:
    """How to read a page's rows: the caller's columns first, then what paging appended."""

    statement: Select[Any]  # the caller's statement with the key terms it lacks appended
    n_items: int  # the caller's columns: one (an entity or a value) or several (Rows)
    key_index: tuple[int, ...]  # where each key term is in a row


# Where the key terms sit in a statement's rows depends only on its column list (and on
# whether a Session or a Connection runs it), but working it out reads `selected_columns`,
# about 0.14 ms: as much as the rest of a page's Python. Remembered per column list; the
# entries hold the column objects, so their ids cannot be reused while cached.
_LAYOUTS: dict[tuple[Any, ...], tuple[tuple[Any, ...], int, tuple[int | None, ...]]] = {}
_MAX_LAYOUTS = 256


def _layout(stmt: Select[Any], sort: Keyset, executor: Any) -> tuple[int, tuple[int | None, ...]]:
    """(number of the caller's columns in a row, where each key term is among them or None)."""
    raw = tuple(stmt._raw_columns)
    plain_rows = isinstance(executor, Connection)
    key = (id(sort), plain_rows, *map(id, raw))
    cached = _LAYOUTS.get(key)
    if cached is not None:  # same ids of live objects: the same objects
        return cached[1], cached[2]
    # Through a Session, ORM entities select all their columns but give one object per row:
    # their columns are not positions in the row, so keys are appended. A Connection gives
    # every selected column.
    selected = list(stmt.selected_columns)
    if plain_rows:
        n = len(selected)
    else:
        descriptions = stmt.column_descriptions
        n = len(descriptions)
        if any(isinstance(d.get("type"), type) for d in descriptions):
            selected = []
    index = tuple(
        next((j for j, column in enumerate(selected) if _same(column, term.expr)), None)
        for term in sort.columns
    )
    if len(_LAYOUTS) >= _MAX_LAYOUTS:
        _LAYOUTS.clear()
    _LAYOUTS[key] = ((sort, *raw), n, index)
    return n, index


def _shape(stmt: Select[Any], sort: Keyset, executor: Any) -> _Shape:
    n, found = _layout(stmt, sort, executor)
    missing = [i for i, j in enumerate(found) if j is None]
    labels = sort.key_labels()
    keyed = stmt.add_columns(*(labels[i] for i in missing)) if missing else stmt
    appended = {i: n + k for k, i in enumerate(missing)}
    index = tuple(j if j is not None else appended[i] for i, j in enumerate(found))
    return _Shape(keyed, n, index)


def _same(column: Any, expr: Any) -> bool:
    """Is this selected column the key term? A table column is matched by table and name (the
    ORM's annotated copy is another object), an expression by structure, a label by what it names."""
    if column is expr:
        return True
    table = getattr(expr, "table", None)
    if table is not None and isinstance(expr, TableColumn):
        return getattr(column, "table", None) is table and getattr(column, "name", None) == expr.name
    return bool(column.compare(expr) or getattr(column, "element", column).compare(expr))


class _Rows:
    """The rows a page or batch query returned: items for the caller, keysets on demand.

    Keysets are read only for the rows that become cursors (the first and the last), not for
    every row: an export batch of thousands of rows needs one.
    """

    def __init__(self, rows: list[Any], shape: _Shape, sort: Keyset, metadata: Any):
        self.rows = rows
        self._shape, self._sort, self._metadata = shape, sort, metadata

    def __len__(self) -> int:
        return len(self.rows)

    def items(self) -> list[Any]:
        if not self.rows:
            return []
        n = self._shape.n_items
        if n == 1:  # one entity or column: the item is that value
            return [row[0] for row in self.rows]
        if all(len(row) == n for row in self.rows):
            return list(self.rows)
        # Several columns: Rows as the unpaged statement gives them, without what paging
        # appended (key columns, the cursor-row flag), cut by position.
        return list(IteratorResult(_first_columns(self._metadata, n), (row[:n] for row in self.rows)).all())

    def keyset(self, index: int) -> tuple[Any, ...]:
        row = self.rows[index]
        return tuple(
            to_cursor(t.type, row[i]) for t, i in zip(self._sort.columns, self._shape.key_index, strict=True)
        )


def _first_columns(metadata: Any, n: int) -> SimpleResultMetaData:
    """The result metadata of a row's first `n` columns, by position.

    Not ``Result.columns(*range(n))``: that maps each index to the column's *name* and the name
    back to the first column so named, so where names collide (two aliased entities, which
    the ORM leaves unnamed; ``a.id`` and ``b.id``) every such column became the first one and
    the page held the wrong objects. A name shared by several columns keeps its values and
    its place, and is ambiguous to look up by name, as in the unpaged rows.
    """
    # The frozen metadata: the rows' values are already converted (no result processors).
    frozen = metadata._for_freeze()
    keys = list(frozen._keys[:n])
    shared = {k for k, count in Counter(keys).items() if count > 1}
    extra = [() if k in shared else frozen._keymap[k][2] for k in keys]
    return SimpleResultMetaData(
        keys, extra=extra, _ambiguous_keys=frozenset(k for k in shared if k is not None) or None
    )


@dataclass(frozen=True)
class _Part:
    """One index range of a read. A sort whose first term is nullable reads its values and its
    NULLs as two parts, each in the order of the other terms: NULLS FIRST/LAST is not an index
    range on every engine (MariaDB has no such syntax), two plain ranges are."""

    lead: str | None  # None, or the part of the first term: "values" or "nulls"
    seek_from: int | None  # the first term the seek compares; None: from the part's start
    depth: int  # the terms the seek compares end here
    inclusive: bool
    lead_is_null: bool = False


def _parts(sort: Keyset, keyset: Sequence[Any] | None, *, backward: bool, inclusive: bool) -> list[_Part]:
    """The parts to read, in order, for the rows past `keyset`."""
    if sort.nulls_last is None:
        return [_Part(None, None if keyset is None else 0, len(keyset or ()), inclusive)]
    order = ["values", "nulls"] if sort.nulls_last != backward else ["nulls", "values"]
    if keyset is None:
        return [_Part(lead, None, 0, False) for lead in order]
    here = "nulls" if keyset[0] is None else "values"
    parts = []
    if here == "values":
        parts.append(_Part("values", 0, len(keyset), inclusive))
    elif len(keyset) > 1:  # among the NULLs: the other terms decide
        parts.append(_Part("nulls", 1, len(keyset), inclusive, lead_is_null=True))
    elif inclusive:  # start_at([None]): all the NULLs
        parts.append(_Part("nulls", None, 0, False))
    return parts + [_Part(lead, None, 0, False) for lead in order[order.index(here) + 1 :]]


def _drop_lead(part: _Part, dialect: str) -> bool:
    """Among the NULLs, ORDER BY the first term (a constant there) made MariaDB sort instead of
    reading the index range; without it, PostgreSQL reads the primary key and filters. Measured
    by tests/test_library_plans.py."""
    return part.lead == "nulls" and dialect in ("mysql", "mariadb")


def _restrict(stmt: Select[Any], sort: Keyset, part: _Part, *, backward: bool, dialect: str) -> Select[Any]:
    conditions: list[ColumnElement[bool]] = []
    lead = sort.columns[0].expr
    if part.lead == "nulls":
        conditions.append(lead.is_(None))
    elif part.lead == "values" and part.seek_from is None:
        conditions.append(lead.is_not(None))  # a seek from a value leaves NULLs out by itself
    if part.seek_from is not None:
        conditions.append(
            sort.seek(
                backward=backward,
                inclusive=part.inclusive,
                dialect=dialect,
                depth=part.depth,
                first=part.seek_from,
            )
        )
    if not conditions:
        return stmt
    # A key made of an aggregate exists only per group: compared after grouping.
    return stmt.having(*conditions) if sort.aggregated else stmt.where(*conditions)


def _page_statement(
    shape: _Shape,
    sort: Keyset,
    part: _Part,
    keyset: Sequence[Any] | None,
    *,
    limit: int,
    backward: bool,
    dialect: str,
    flag_keys_row: bool,
) -> tuple[Select[Any], dict[str, Any]]:
    """The statement reading one part, key values left as parameters, and those parameters."""
    keyed = _restrict(shape.statement, sort, part, backward=backward, dialect=dialect)
    params: dict[str, Any] = {}
    if keyset is not None:
        if flag_keys_row:
            keyed = keyed.add_columns(sort.at_keys(lead_is_null=part.lead_is_null).label("_keyset_at"))
        params = sort.bind(keyset)
    order = sort.part_order_by(backward=backward, nulls=_drop_lead(part, dialect))
    return keyed.order_by(None).order_by(*order).limit(limit), params


def keyset_select(
    stmt: Select[Any],
    sort: Keyset,
    keyset: Sequence[Any] | None = None,
    *,
    limit: int,
    backward: bool = False,
    inclusive: bool = False,
    dialect: str = "",
    flag_keys_row: bool = False,
) -> Select[Any]:
    """`stmt` restricted to rows past `keyset`, in the sort's order, with the key terms appended
    where the statement does not select them, key values bound.

    With `flag_keys_row` (and `inclusive`), one more column, `_keyset_at`, says which row is the
    one at `keyset` itself. This is the statement a cursor page runs (paginate() binds the keys
    at execution instead): compile it or EXPLAIN it to see what a page costs;
    tests/test_plans.py checks that it is the SQL paginate() sends and reads its plan.
    """
    part = _parts(sort, keyset, backward=backward, inclusive=inclusive)[0]
    keyed, params = _page_statement(
        _shape(stmt, sort, None),
        sort,
        part,
        keyset,
        limit=limit,
        backward=backward,
        dialect=dialect,
        flag_keys_row=flag_keys_row,
    )
    return keyed.params(params) if params else keyed


def _execute(executor: Any, stmt: Select[Any], params: dict[str, Any]) -> tuple[list[Any], Any]:
    result = executor.execute(stmt, params)
    # A joined eager load of a collection repeats its parent per child row: the ORM asks for
    # unique() to fold them back (LIMIT already counts parents: the ORM nests it).
    if getattr(getattr(result, "context", None), "loaders_require_uniquing", False):
        result = result.unique()
    return result.all(), result._metadata


def _fetch(
    executor: Any,
    shape: _Shape,
    sort: Keyset,
    keyset: Sequence[Any] | None,
    *,
    dialect: str,
    backward: bool,
    inclusive: bool,
    limit: int,
    start_at_keys: bool = False,
) -> tuple[_Rows, bool]:
    """Rows of the statement past `keyset` in the sort's order.

    With `start_at_keys`, the read starts at `keyset` inclusive, one row more is read, and the
    row found there is left out of the rows; the flag says whether it was found. It can only be
    the first row: every other row lies strictly past `keyset`, and the keyset is unique.
    """
    flagged = start_at_keys and keyset is not None
    kept: list[Any] = []
    metadata, found = None, False
    for k, part in enumerate(_parts(sort, keyset, backward=backward, inclusive=inclusive or flagged)):
        if len(kept) >= limit:
            break
        # The cursor's own row can only be in the first part, where the read starts at it.
        flag_here = flagged and k == 0
        keyed, params = _page_statement(
            shape,
            sort,
            part,
            keyset,
            limit=limit - len(kept) + (1 if flag_here else 0),
            backward=backward,
            dialect=dialect,
            flag_keys_row=flag_here,
        )
        rows, part_metadata = _execute(executor, keyed, params)
        metadata = metadata or part_metadata
        if flag_here and rows and rows[0][-1]:
            found, rows = True, rows[1:]
        kept += rows
    return _Rows(kept, shape, sort, metadata), found


def _exists(
    executor: Any,
    stmt: Select[Any],
    sort: Keyset,
    keyset: Sequence[Any],
    *,
    dialect: str,
    backward: bool,
    inclusive: bool,
) -> bool:
    """One index probe (per part): is there any row past `keyset` in that direction?"""
    # Every key term in the select list: a SELECT DISTINCT may only ORDER BY what it selects.
    columns = stmt.with_only_columns(*(t.expr for t in sort.columns), maintain_column_froms=True)
    for part in _parts(sort, keyset, backward=backward, inclusive=inclusive):
        probe = _restrict(columns, sort, part, backward=backward, dialect=dialect)
        order = sort.part_order_by(backward=backward, nulls=_drop_lead(part, dialect))
        probe = probe.order_by(None).order_by(*order).limit(1)
        if executor.execute(probe, sort.bind(keyset)).first() is not None:
            return True
    return False


_Encoder = Callable[..., str]  # (keyset, side, inclusive=False) -> a sealed cursor


def _encoder(codec: CursorCodec, sort: Keyset, fingerprint: str, meta: Mapping[str, str] | None) -> _Encoder:
    stamp = dict(meta or {})

    def make(keyset: Sequence[Any], side: str, inclusive: bool = False) -> str:
        return codec.encode(Position(sort.name, side, fingerprint, tuple(keyset), inclusive, stamp))

    return make


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
) -> Page:
    """One page of `stmt` in the sort's order: the first page, or the page `after`/`before` a
    cursor. `session` is a Session (binds included) or a Connection.

    `after`/`before` is a cursor string, or the Position a caller already decoded from one
    (``codec.decode(cursor)``, e.g. to read its meta first): it is not decoded again, and is
    checked against the sort, direction and filters all the same.

    `filters` are the user-facing filters already applied to `stmt`; their fingerprint is bound
    into the cursors so a cursor cannot be replayed against other filters. `meta` (text to
    text, e.g. the WAL position the page was read at) is sealed into every cursor the page
    returns, unchecked here; `codec.decode(cursor).meta` gives it back.
    Raises InvalidCursor or CursorMismatch (PaginationError) for a cursor the client should not
    send, KeysetError for a statement or sort that cannot be paged (the server's mistake).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PaginationError("limit must be a positive integer")
    if after is not None and before is not None:
        raise PaginationError("give either after or before, not both")
    dialect = _dialect(session, stmt)
    _check_statement(stmt, sort, dialect)
    fingerprint = filters_fingerprint(filters)
    direction = BEFORE if before is not None else AFTER
    cursor = before if before is not None else after
    position, keyset = None, None
    if cursor is not None:
        position = cursor if isinstance(cursor, Position) else codec.decode(cursor)
        keyset = sort.accept(position, direction=direction, filters=fingerprint)
    backward = direction == BEFORE
    make = _encoder(codec, sort, fingerprint, meta)
    shape = _shape(stmt, sort, session)

    # Fetch one extra row to learn whether the page has a successor, without COUNT(*). On a
    # cursor page the read starts at the cursor's own row: when it is still there (nearly
    # always) it proves a row on the side the reader came from, within the same index range
    # (limit + 2 entries, one descent). When it was deleted, or the page came back empty,
    # one index probe asks instead: "a cursor was given" does not prove a previous row.
    inclusive = bool(position and position.inclusive)
    rows, near = _fetch(
        session,
        shape,
        sort,
        keyset,
        dialect=dialect.name,
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
        page.head_cursor = make(rows.keyset(0), BEFORE)
    if keyset is not None and not near:
        near = _exists(
            session, stmt, sort, keyset, dialect=dialect.name, backward=not backward, inclusive=not inclusive
        )

    # The far side is known from the extra row. Within one statement "a row at or before the
    # cursor" is the same as "a row before the page's first row": nothing lies between them
    # (after a separate probe, whatever lies between was inserted since: a row all the same).
    # An empty page has no edge row, so its cursor for the way back includes the position.
    # A `before` cursor at the first row is head_cursor, already sealed: reuse it.
    far_cursor = None
    if more_beyond:
        far_cursor = page.head_cursor if backward else make(rows.keyset(-1), AFTER)
    near_cursor = None
    if near:
        if not rows:
            assert position is not None  # `near` is only known from a cursor's position
            near_cursor = make(position.keys, AFTER if backward else BEFORE, inclusive=True)
        else:
            near_cursor = make(rows.keyset(-1), AFTER) if backward else page.head_cursor
    page.next_cursor, page.prev_cursor = (near_cursor, far_cursor) if backward else (far_cursor, near_cursor)
    return page


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
) -> Iterator[Batch]:
    """Walk all of `stmt` in the sort's order, `batch_size` rows per query, in constant memory.

    Each batch carries the `after` cursor that resumes right behind it (when a codec is given),
    so an interrupted export can continue where it stopped; `meta` is sealed into it.
    """
    _check_batch_size(batch_size)
    dialect = _dialect(session, stmt)
    _check_statement(stmt, sort, dialect)
    fingerprint = filters_fingerprint(filters)
    keyset, inclusive = _resume(sort, after, codec, fingerprint)
    make = _encoder(codec, sort, fingerprint, meta) if codec is not None else None
    shape = _shape(stmt, sort, session)
    while True:
        rows, _ = _fetch(
            session,
            shape,
            sort,
            keyset,
            dialect=dialect.name,
            backward=False,
            inclusive=inclusive,
            limit=batch_size,
        )
        if not rows:
            return
        keyset, inclusive = rows.keyset(-1), False
        yield Batch(items=rows.items(), cursor=make(keyset, AFTER) if make is not None else None)
        if len(rows) < batch_size:
            return


def _check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise PaginationError("batch_size must be a positive integer")


def _resume(
    sort: Keyset, after: str | Position | None, codec: CursorCodec | None, fingerprint: str
) -> tuple[Sequence[Any] | None, bool]:
    """The keyset a walk resumes behind (None: from the start), and whether it is inclusive."""
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
) -> Iterator[Range]:
    """Walk all of `stmt` as consecutive ranges of `batch_size` rows that the caller reads
    itself: ``session.execute(range.statement, range.params)``, or any other way, such as
    PostgreSQL's ``COPY (SELECT ...) TO STDOUT`` or ``INSERT ... SELECT``. A range's statement
    selects `stmt`'s columns (nothing appended) for the rows past the previous range up to and
    including this range's last row, in the sort's order; every range after the first runs the
    same statement with other parameters (compile it once). Each Range carries the `after`
    cursor that resumes behind it.

    A range is found by one probe: the last keyset among the next `batch_size` rows, read from
    the sort's index alone, and how many rows there were (a short range is the last). Rows
    inserted inside a range between the probe and the read are read with it; a row deleted
    there is not: each range is one index range between two keysets, like a page.
    The sort's first term must be NOT NULL (a nullable one is two index ranges: use iterate()).
    """
    _check_batch_size(batch_size)
    if sort.nulls_last is not None:
        raise KeysetError(f"sort {sort.name!r}: iterate_ranges() needs NOT NULL terms; use iterate()")
    dialect = _dialect(session, stmt)
    _check_statement(stmt, sort, dialect)
    fingerprint = filters_fingerprint(filters)
    keyset, inclusive = _resume(sort, after, codec, fingerprint)
    make = _encoder(codec, sort, fingerprint, meta) if codec is not None else None
    keys_only = stmt.with_only_columns(*sort.key_labels(), maintain_column_froms=True)
    order = sort.part_order_by()
    upto = sort.seek_to(dialect=dialect.name)
    # One probe and one range statement per way of starting (from the top, past a row, at a
    # position): the statements are the same objects for every range, only parameters change.
    built: dict[tuple[bool, bool], tuple[Select[Any], Select[Any]]] = {}

    def statements(part: _Part) -> tuple[Select[Any], Select[Any]]:
        key = (part.seek_from is None, part.inclusive)
        if key not in built:
            window = _restrict(keys_only, sort, part, backward=False, dialect=dialect.name)
            rows = window.order_by(None).order_by(*order).limit(batch_size).subquery("_keyset_window")
            last_first = [
                rows.c[f"_keyset_{i}"].asc() if t.descending else rows.c[f"_keyset_{i}"].desc()
                for i, t in enumerate(sort.columns)
            ]
            probe = select(*rows.c, func.count().over().label("_keyset_rows")).order_by(*last_first).limit(1)
            bounded = _restrict(stmt, sort, part, backward=False, dialect=dialect.name)
            bounded = bounded.having(upto) if sort.aggregated else bounded.where(upto)
            built[key] = (probe, bounded.order_by(None).order_by(*order))
        return built[key]

    while True:
        part = _Part(None, None if keyset is None else 0, len(keyset or ()), inclusive)
        probe, bounded = statements(part)
        params = sort.bind(keyset) if keyset is not None else {}
        found = session.execute(probe, params).first()
        if found is None:
            return
        last = tuple(to_cursor(t.type, v) for t, v in zip(sort.columns, found, strict=False))
        yield Range(
            statement=bounded,
            params={**params, **sort.bind_to(last)},
            cursor=make(last, AFTER) if make is not None else None,
            rows=found[-1],
        )
        if found[-1] < batch_size:
            return
        keyset, inclusive = last, False


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
    matches every row sharing it. The page has a `prev_cursor` when rows lie before it, so the
    reader scrolls both ways from there. Raises InvalidPosition (a PaginationError) naming the
    value a column could not hold.
    """
    values = tuple(values)
    if not 1 <= len(values) <= len(sort.columns):
        raise InvalidPosition(
            f"sort {sort.name!r} takes 1 to {len(sort.columns)} values, not {len(values)}: {list(values)!r}"
        )
    keyset = []
    for i, value in enumerate(values):
        if value is None and (i > 0 or sort.nulls_last is None):
            raise InvalidPosition(f"None cannot be a value of {sort.describe(i)}: it is not nullable")
        why = misfit(sort.columns[i].type, value)
        if why is not None:
            raise InvalidPosition(f"{value!r} cannot be a value of {sort.describe(i)}: {why}")
        keyset.append(to_cursor(sort.columns[i].type, value))
    return _encoder(codec, sort, filters_fingerprint(filters), meta)(keyset, AFTER, inclusive=True)
