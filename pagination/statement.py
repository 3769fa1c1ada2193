"""The SQL of a page: every statement paging sends is built here, from a sort and a statement.

`plan()` analyses a statement's shape once (what it may be refused for, which terms may be NULL
in it, where each key term sits in its rows) and returns a `Plan`, remembered per shape, that
builds a read: the seek predicate, the ORDER BY, the key labels appended, LIMIT, and runs it.

The seek predicate (rows past a position) has two forms, chosen per call (``seek=``):
- ``"auto"``: a row value ``(a, b) < (:a, :b)`` where the planner reads it as an index range
  (PostgreSQL, SQLite) and every term runs the same way and is NOT NULL; otherwise the
  expanded form below;
- ``"bounded"``: always the expanded form with a leading bound on the first term,
  ``a <= :a AND (a < :a OR (a = :a AND b < :b))``: the bound gives the range, the OR only
  filters the rows that tie on it. postgres_fdw ships this form to a foreign table (a row value
  it filters locally, reading every shard from its start).

NULLs: a nullable term without an explicit ``.nulls_first()``/``.nulls_last()`` is ordered the
engine's way (PostgreSQL: NULL above every value, so last ascending and first descending;
SQLite and MariaDB: below, so first ascending and last descending), so a walk equals the
unpaged query on the engine it runs on. Its comparison adds the NULLs on their side
(``a > :a OR a IS NULL``), and a NULL key value compares as ``a IS NULL``. A first term with
explicit placement is read as two index ranges instead (its values, then its NULLs, or the
other way round); a later one is ordered by NULLS FIRST/LAST (by ``(a IS NULL)`` on MariaDB).
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    Connection,
    Select,
    and_,
    bindparam,
    false,
    func,
    literal_column,
    or_,
    select,
    true,
    tuple_,
)
from sqlalchemy.engine import IteratorResult
from sqlalchemy.engine.result import SimpleResultMetaData
from sqlalchemy.sql.cache_key import NO_CACHE
from sqlalchemy.sql.elements import BindParameter, ColumnClause, ColumnElement, Over
from sqlalchemy.sql.selectable import CTE, CompoundSelect, Exists, FromClause, Join, ScalarSelect
from sqlalchemy.sql.visitors import anon_map

from .errors import KeysetError
from .lineage import (
    base,
    equalities,
    final_froms,
    key_columns,
    leaves,
    nullable,
    optional_tables,
    statement_keys,
    unlabel,
)
from .sort import SEEK_FORMS, Keyset, SeekForm, Term, order_clauses
from .values import to_cursor

_T = TypeVar("_T")
Items = Literal["keyed", "own", "keys"]  # what a read selects (Plan._item_refs)

# Planners that turn a row-value comparison into an index range (PostgreSQL's "Index Cond",
# SQLite's SEARCH); MariaDB and MySQL scan for it (docs/design.md has the measurements).
ROW_VALUE_DIALECTS = frozenset({"postgresql", "sqlite"})
# Where each engine's ORDER BY puts NULLs: True, above every value (last ascending).
NULLS_HIGH = {
    "postgresql": True,
    "oracle": True,
    "sqlite": False,
    "mysql": False,
    "mariadb": False,
    "mssql": False,
}
_MAX_PLANS = 256


def refuse(stmt: Any, dialect: Any, problem: str) -> KeysetError:
    """A KeysetError saying what is wrong and what to write instead, with the SQL."""
    try:
        sql = str(stmt.compile(dialect=dialect))
    except Exception:  # the message must not fail for want of SQL
        sql = repr(stmt)
    return KeysetError(f"{problem}\nSQL: {sql}")


@dataclass(frozen=True)
class Read:
    """One index range of a page. A sort whose first term has explicitly placed NULLs reads its
    values and its NULLs as two reads, each in the order of the other terms."""

    lead: str | None  # None, or the part of the first term read: "values" or "nulls"
    seek_from: int | None  # the first term the seek compares; None: from the read's start
    depth: int  # the terms the seek compares end here
    inclusive: bool


def reads(sort: Keyset, keys: Sequence[Any] | None, *, backward: bool, inclusive: bool) -> list[Read]:
    """The reads, in order, for the rows past `keys`."""
    if sort.nulls_last is None:
        return [Read(None, None if keys is None else 0, len(keys or ()), inclusive)]
    order = ["values", "nulls"] if sort.nulls_last != backward else ["nulls", "values"]
    if keys is None:
        return [Read(lead, None, 0, False) for lead in order]
    here = "nulls" if keys[0] is None else "values"
    found = []
    if here == "values":
        found.append(Read("values", 0, len(keys), inclusive))
    elif len(keys) > 1:  # among the NULLs: the other terms decide
        found.append(Read("nulls", 1, len(keys), inclusive))
    elif inclusive:  # start_at([None]): all the NULLs
        found.append(Read("nulls", None, 0, False))
    return found + [Read(lead, None, 0, False) for lead in order[order.index(here) + 1 :]]


class Plan:
    """How to page statements of one shape with one sort on one engine: checked and worked out
    once (`plan()`), then every read of every page is built from it."""

    def __init__(self, stmt: Select[Any], sort: Keyset, dialect: Any, *, plain_rows: bool, seek: SeekForm):
        self.sort, self.dialect, self.seek_form = sort, dialect.name, seek
        optional = optional_tables(stmt) if _joined(stmt) else set()
        two_reads = sort.nulls_last is not None
        # May a term be NULL in this statement's rows? (A first term read as two ranges is
        # compared within its values only.)
        # Without GROUP BY an aggregate's one row may aggregate no rows: then it is NULL.
        empty = not stmt._group_by_clauses
        self.nullable = tuple(
            not (i == 0 and two_reads) and nullable(t.expr, optional, empty=empty)
            for i, t in enumerate(sort.columns)
        )
        high = NULLS_HIGH.get(self.dialect)
        for t, may in zip(sort.columns, self.nullable, strict=True):
            if may and t.nulls is None and high is None:
                raise refuse(
                    stmt,
                    dialect,
                    f"sort {sort.name!r}: {t.name} may be NULL, and where {self.dialect} puts NULLs "
                    "is not known here: place them with .nulls_first() or .nulls_last()",
                )
        # Reading forward, do a term's NULLs come after its values?
        self.nulls_after = tuple(
            (t.nulls == "last") if t.nulls is not None else (bool(high) != t.descending) for t in sort.columns
        )
        self.n_items, self.key_index, self.missing = _layout(stmt, sort, plain_rows)
        self.params = tuple(
            bindparam(f"_keyset_key_{i}", type_=t.bind_type) for i, t in enumerate(sort.columns)
        )
        self.to_params = tuple(
            bindparam(f"_keyset_to_{i}", type_=t.bind_type) for i, t in enumerate(sort.columns)
        )
        self.labels = tuple(t.expr.label(f"_keyset_{i}") for i, t in enumerate(sort.columns))
        # MariaDB (10.11) drops rows from a SELECT DISTINCT over a derived table, a view or a CTE
        # ordered by a column and then an expression it selects: (0, 'a') and (0, 'id') ordered
        # by `count, length(info)` came back as one row, whatever the LIMIT. Ordered by the
        # select item's position or label they do not, so there every term that is not a
        # column is ordered by its item (`_item_refs`; a DISTINCT selects every term it orders
        # by). tests/test_library_statements.py has the cases.
        distinct = self.dialect in ("mysql", "mariadb") and bool(stmt._distinct)
        self.by_item = tuple(distinct and not isinstance(t.expr, ColumnClause) for t in sort.columns)
        self._built: dict[tuple[Any, ...], Any] = {}

    def _cached(self, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
        part = self._built.get(key)
        if part is None:
            part = self._built[key] = build()
        return part

    # --- parameters ---------------------------------------------------------------------------

    def bind(self, keys: Sequence[Any], *, to: bool = False) -> dict[str, Any]:
        """Execution parameters putting key values (all, or a prefix) into the seek."""
        params = self.to_params if to else self.params
        return {p.key: v for p, v in zip(params, keys, strict=False) if v is not None}

    # --- ORDER BY -----------------------------------------------------------------------------

    def order_by(
        self,
        exprs: Sequence[ColumnElement[Any]] | None = None,
        *,
        backward: bool = False,
        first: int = 0,
        items: Items = "keyed",
    ) -> tuple[ColumnElement[Any], ...]:
        """ORDER BY of a read (of `exprs` in place of the terms, e.g. a subquery's columns),
        from term `first` on; `items`: what the read selects (`_item_refs`)."""
        if exprs is None:
            return self._cached(
                ("order_by", backward, first, items), lambda: self._order_by(None, backward, first, items)
            )
        return self._order_by(exprs, backward, first, None)

    def _order_by(
        self, exprs: Sequence[ColumnElement[Any]] | None, backward: bool, first: int, items: Items | None
    ) -> tuple[ColumnElement[Any], ...]:
        # MariaDB/MySQL have no NULLS FIRST/LAST: (term IS NULL) first there.
        return order_clauses(
            self.sort.columns,
            exprs,
            backward=backward,
            first=first,
            nullable=self.nullable,
            nulls_clause=self.dialect not in ("mysql", "mariadb"),
            refs=self._item_refs(items) if items is not None and any(self.by_item) else None,
        )

    def _item_refs(self, items: Items) -> tuple[ColumnElement[Any] | None, ...]:
        """The select items the terms marked `by_item` are ordered by, in a read that selects
        `items`: "keyed", the caller's columns and then the terms it does not select (labels:
        `keyed`); "own", the caller's columns alone (a term it does not select keeps its
        expression); "keys", the terms alone, in order. A position counts SQL columns, which the
        caller's are one each unless an ORM entity is among them, and then every term is
        appended (`_layout`)."""
        refs: list[ColumnElement[Any] | None] = []
        for i, marked in enumerate(self.by_item):
            ref: ColumnElement[Any] | None = None
            if marked and items == "keys":
                ref = literal_column(str(i + 1))
            elif marked and i not in self.missing:
                ref = literal_column(str(self.key_index[i] + 1))
            elif marked and items == "keyed":
                ref = self.labels[i]
            refs.append(ref)
        return tuple(refs)

    # --- the seek predicate -------------------------------------------------------------------

    def seek(
        self,
        keys: Sequence[Any],
        *,
        backward: bool = False,
        inclusive: bool = False,
        depth: int = 0,
        first: int = 0,
        to: bool = False,
    ) -> ColumnElement[bool]:
        """Rows past `keys` in this order (before, when `backward`); with `inclusive` the row at
        them too. Only the first `depth` terms are compared (a prefix, see start_at()), from term
        `first` (the NULL read of a first term compares the others). With `to`, under the
        parameter names of `bind(..., to=True)`: the rows up to a second position."""
        depth = depth or len(self.sort.columns)
        nulls = tuple(v is None for v in keys[:depth])
        return self._cached(
            ("seek", backward, inclusive, depth, first, nulls, to),
            lambda: self._seek(
                backward, inclusive, depth, first, nulls, self.to_params if to else self.params
            ),
        )

    def _seek(
        self, backward: bool, inclusive: bool, depth: int, first: int, nulls: tuple[bool, ...], params: Any
    ) -> ColumnElement[bool]:
        terms = list(range(first, depth))
        may_null = [self.nullable[i] or nulls[i] for i in terms]
        same_way = len({self.sort.columns[i].descending for i in terms}) == 1
        if (
            self.seek_form == "auto"
            and self.dialect in ROW_VALUE_DIALECTS
            and same_way
            and len(terms) > 1
            and not any(may_null)
        ):
            row = tuple_(*(self.sort.columns[i].expr for i in terms))
            bound = tuple_(*(params[i] for i in terms))
            return _compare(row, self.sort.columns[first].descending != backward, bound, inclusive)
        branches = []
        for k, i in enumerate(terms):
            ties = [self._equal(j, nulls[j], params[j]) for j in terms[:k]]
            last = k == len(terms) - 1
            branches.append(and_(*ties, self._past(i, nulls[i], params[i], backward, inclusive and last)))
        expanded = or_(*branches)
        lead = self.sort.columns[first]
        if len(terms) == 1 or may_null[0]:
            return expanded
        return and_(_compare(lead.expr, lead.descending != backward, params[first], True), expanded)

    def _equal(self, i: int, is_null: bool, param: Any) -> ColumnElement[bool]:
        expr = self.sort.columns[i].expr
        return expr.is_(None) if is_null else expr == param

    def _past(self, i: int, is_null: bool, param: Any, backward: bool, or_equal: bool) -> ColumnElement[bool]:
        """Rows whose term `i` lies past the key value (or at it, `or_equal`) in reading order."""
        t: Term = self.sort.columns[i]
        nulls_after = self.nulls_after[i] != backward
        if is_null:  # past a NULL: the values, when NULLs come first; at it: the NULLs
            if or_equal:
                return t.expr.is_(None) if nulls_after else true()
            return false() if nulls_after else t.expr.is_not(None)
        compared = _compare(t.expr, t.descending != backward, param, or_equal)
        return or_(compared, t.expr.is_(None)) if self.nullable[i] and nulls_after else compared

    def at(self, keys: Sequence[Any]) -> ColumnElement[bool]:
        """True for the row at `keys`, by the database's own equality (a case-insensitive
        collation or PAD SPACE agrees with the seek predicate, not with Python's ==)."""
        nulls = tuple(v is None for v in keys)
        return self._cached(
            ("at", nulls),
            lambda: and_(
                *(self._equal(i, n, p) for i, (n, p) in enumerate(zip(nulls, self.params, strict=False)))
            ),
        )

    # --- statements ---------------------------------------------------------------------------

    def keyed(self, stmt: Select[Any]) -> Select[Any]:
        """The caller's statement with the key terms it does not select appended."""
        return stmt.add_columns(*(self.labels[i] for i in self.missing)) if self.missing else stmt

    def restrict(
        self, stmt: Select[Any], read: Read, keys: Sequence[Any] | None, *, backward: bool
    ) -> Select[Any]:
        """`stmt` keeping the rows of `read` past `keys` (HAVING for a key of aggregates)."""
        conditions: list[ColumnElement[bool]] = []
        lead = self.sort.columns[0].expr
        if read.lead == "nulls":
            conditions.append(lead.is_(None))
        elif read.lead == "values" and read.seek_from is None:
            conditions.append(lead.is_not(None))  # a seek from a value leaves NULLs out by itself
        if read.seek_from is not None and keys is not None:
            conditions.append(
                self.seek(
                    keys, backward=backward, inclusive=read.inclusive, depth=read.depth, first=read.seek_from
                )
            )
        if not conditions:
            return stmt
        return stmt.having(*conditions) if self.sort.aggregated else stmt.where(*conditions)

    def read_order(
        self, read: Read, *, backward: bool, items: Items = "keyed"
    ) -> tuple[ColumnElement[Any], ...]:
        """ORDER BY within a read. Among the first term's NULLs it is left out on MariaDB (a
        constant there, yet it made MariaDB sort instead of reading the index range; without it,
        PostgreSQL reads the primary key and filters: tests/test_library_plans.py)."""
        drop = read.lead == "nulls" and self.dialect in ("mysql", "mariadb")
        return self.order_by(backward=backward, first=1 if drop else 0, items=items)

    def statement(
        self,
        stmt: Select[Any],
        read: Read,
        keys: Sequence[Any] | None,
        *,
        limit: int,
        backward: bool,
        flag_keys_row: bool,
    ) -> tuple[Select[Any], dict[str, Any]]:
        """The statement of one read, key values left as parameters, and those parameters."""
        page = self.restrict(self.keyed(stmt), read, keys, backward=backward)
        params: dict[str, Any] = {}
        if keys is not None:
            if flag_keys_row:
                page = page.add_columns(self.at(keys).label("_keyset_at"))
            params = self.bind(keys)
        return page.order_by(None).order_by(*self.read_order(read, backward=backward)).limit(limit), params

    def range_probe(
        self, stmt: Select[Any], read: Read, keys: Sequence[Any] | None, *, size: int
    ) -> Select[Any]:
        """The probe of a range (iterate_ranges): the last key values among the next `size` rows
        past `keys`, read from the sort's index alone, and how many rows there were."""
        keys_only = stmt.with_only_columns(*self.labels, maintain_column_froms=True)
        window = self.restrict(keys_only, read, keys, backward=False)
        ordered = window.order_by(None).order_by(*self.order_by(items="keys"))
        rows = ordered.limit(size).subquery("_keyset_window")
        columns = list(rows.c)  # by position: the labels are the key terms in order
        last_first = self.order_by(columns, backward=True)
        return select(*columns, func.count().over().label("_keyset_rows")).order_by(*last_first).limit(1)

    def range_end_probe(
        self, stmt: Select[Any], read: Read, keys: Sequence[Any] | None, *, size: int
    ) -> Select[Any]:
        """The key values of the `size`-th row past `keys` (none when fewer rows remain), read
        from the sort's index alone: the end of a full range (iterate_ranges). Its OFFSET skips
        index entries inside the one range a seek starts, never more than `size` of them, as
        range_probe's LIMIT reads them; it needs no window, no count and no reversed sort, which
        cost range_probe ten times more on SQLite (1.7 against 18.9 ms for 20,000 rows)."""
        keys_only = stmt.with_only_columns(*self.labels, maintain_column_froms=True)
        window = self.restrict(keys_only, read, keys, backward=False)
        return window.order_by(None).order_by(*self.order_by(items="keys")).limit(1).offset(size - 1)

    def range_statement(
        self, stmt: Select[Any], read: Read, keys: Sequence[Any] | None, last: Sequence[Any]
    ) -> Select[Any]:
        """A range's statement: `stmt`'s own columns for the rows past `keys` up to and including
        the key values `last` (bound with ``bind(last, to=True)``), in the sort's order."""
        upto = self.seek(last, backward=True, inclusive=True, to=True)
        part = self.restrict(stmt, read, keys, backward=False)
        part = part.having(upto) if self.sort.aggregated else part.where(upto)
        return part.order_by(None).order_by(*self.order_by(items="own"))

    def fetch(
        self,
        executor: Any,
        stmt: Select[Any],
        keys: Sequence[Any] | None,
        *,
        backward: bool,
        inclusive: bool,
        limit: int,
        start_at_keys: bool = False,
    ) -> tuple[Rows, bool]:
        """Rows of the statement past `keys` in the sort's order.

        With `start_at_keys`, the read starts at `keys` inclusive, one row more is read, and the
        row found there is left out of the rows; the flag says whether it was found. It can only
        be the first row: every other row lies strictly past `keys`, which are unique.
        """
        flagged = start_at_keys and keys is not None
        kept: list[Any] = []
        metadata, found = None, False
        for k, read in enumerate(reads(self.sort, keys, backward=backward, inclusive=inclusive or flagged)):
            if len(kept) >= limit:
                break
            flag_here = flagged and k == 0  # the cursor's own row can only be in the first read
            page, params = self.statement(
                stmt,
                read,
                keys,
                limit=limit - len(kept) + (1 if flag_here else 0),
                backward=backward,
                flag_keys_row=flag_here,
            )
            rows, read_metadata = execute(executor, page, params)
            metadata = metadata or read_metadata
            if flag_here and rows and rows[0][-1]:
                found, rows = True, rows[1:]
            kept += rows
        return Rows(kept, self, metadata), found

    def exists(
        self, executor: Any, stmt: Select[Any], keys: Sequence[Any], *, backward: bool, inclusive: bool
    ) -> bool:
        """One index probe (per read): is there any row past `keys` in that direction?"""
        # Every key term in the select list: a SELECT DISTINCT may only ORDER BY what it selects.
        columns = stmt.with_only_columns(*(t.expr for t in self.sort.columns), maintain_column_froms=True)
        for read in reads(self.sort, keys, backward=backward, inclusive=inclusive):
            probe = self.restrict(columns, read, keys, backward=backward)
            order = self.read_order(read, backward=backward, items="keys")
            probe = probe.order_by(None).order_by(*order).limit(1)
            if executor.execute(probe, self.bind(keys)).first() is not None:
                return True
        return False


def _compare(expr: Any, descending: bool, value: Any, or_equal: bool) -> ColumnElement[bool]:
    """`expr` past `value` when reading values ascending (`descending`: descending)."""
    compared: ColumnElement[bool]
    if descending:
        compared = expr <= value if or_equal else expr < value
    else:
        compared = expr >= value if or_equal else expr > value
    return compared


def execute(executor: Any, stmt: Select[Any], params: dict[str, Any]) -> tuple[list[Any], Any]:
    result = executor.execute(stmt, params)
    # A joined eager load of a collection repeats its parent per child row: the ORM asks for
    # unique() to fold them back (LIMIT already counts parents: the ORM nests it).
    if getattr(getattr(result, "context", None), "loaders_require_uniquing", False):
        result = result.unique()
    return result.all(), result._metadata


class Rows:
    """The rows a read returned: items for the caller, key values on demand (only for the rows
    that become cursors, the first and the last, not for every row of an export batch)."""

    def __init__(self, rows: list[Any], plan: Plan, metadata: Any):
        self.rows, self._plan, self._metadata = rows, plan, metadata

    def __len__(self) -> int:
        return len(self.rows)

    def items(self) -> list[Any]:
        if not self.rows:
            return []
        n = self._plan.n_items
        if n == 1:  # one entity or column: the item is that value
            return [row[0] for row in self.rows]
        if all(len(row) == n for row in self.rows):
            return list(self.rows)
        # Several columns: Rows as the unpaged statement gives them, without what paging
        # appended (key columns, the cursor-row flag), cut by position.
        return list(IteratorResult(_first_columns(self._metadata, n), (row[:n] for row in self.rows)).all())

    def keys(self, index: int) -> tuple[Any, ...]:
        row = self.rows[index]
        columns = self._plan.sort.columns
        return tuple(to_cursor(t.type, row[i]) for t, i in zip(columns, self._plan.key_index, strict=True))


def _first_columns(metadata: Any, n: int) -> SimpleResultMetaData:
    """The result metadata of a row's first `n` columns, by position.

    Not ``Result.columns(*range(n))``: that maps each index to the column's *name* and the name
    back to the first column so named, so where names collide (two aliased entities, which
    the ORM leaves unnamed; ``a.id`` and ``b.id``) every such column became the first one and
    the page held the wrong objects. A name shared by several columns keeps its values and
    its place, and is ambiguous to look up by name, as in the unpaged rows.
    """
    frozen = metadata._for_freeze()  # the rows' values are already converted
    keys = list(frozen._keys[:n])
    shared = {k for k, count in Counter(keys).items() if count > 1}
    extra = [() if k in shared else frozen._keymap[k][2] for k in keys]
    return SimpleResultMetaData(
        keys, extra=extra, _ambiguous_keys=frozenset(k for k in shared if k is not None) or None
    )


# --- the shape of a statement, analysed once -----------------------------------------------------


def _joined(stmt: Select[Any]) -> bool:
    return bool(stmt._setup_joins) or any(isinstance(f, Join) for f in stmt._from_obj)


def _layout(
    stmt: Select[Any], sort: Keyset, plain_rows: bool
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(the caller's columns in a row, where each key term is in a row, the terms appended)."""
    # Through a Session, ORM entities (and Bundles) select all their columns but give one value
    # per row: their columns are not positions in the row, so keys are appended. A Connection
    # gives every selected column.
    selected = list(stmt.selected_columns)
    if plain_rows:
        n = len(selected)
    else:
        descriptions = stmt.column_descriptions
        n = len(descriptions)
        if any(isinstance(d.get("type"), type) for d in descriptions):
            selected = []
    found = [next((j for j, c in enumerate(selected) if _same(c, t.expr)), None) for t in sort.columns]
    missing = tuple(i for i, j in enumerate(found) if j is None)
    appended = {i: n + k for k, i in enumerate(missing)}
    return n, tuple(j if j is not None else appended[i] for i, j in enumerate(found)), missing


def _same(column: Any, expr: Any) -> bool:
    """Is this selected column the key term? By identity (the ORM's annotated copy of a column is
    another object standing for the same one) or, for an expression, by structure; a label by
    what it labels, never by its name (a name may be another column's)."""
    if column is expr or base(column) is base(expr):
        return True
    inner = getattr(column, "element", None) if not isinstance(column, ColumnClause) else None
    for candidate in (column, inner):
        if candidate is None:
            continue
        if base(candidate) is base(expr):
            return True
        structural = not isinstance(expr, ColumnClause) and not isinstance(candidate, ColumnClause)
        if structural and candidate.compare(expr):
            return True
    return False


def _unique_problem(stmt: Select[Any], sort: Keyset, *, where: bool) -> str | None:
    """Why the sort's terms may tie on two rows of this statement (None: they cannot).

    A row of a join is a row of each side: the sort needs a unique key of every FROM, except a
    side joined by the whole of its unique key (many-to-one, by ON or, `where`, by WHERE).
    """
    terms = [key_columns(t.expr) for t in sort.columns]
    froms = final_froms(stmt)
    equal = _inner_equalities(froms)

    def among_terms(column: Any) -> bool:
        column = base(column)
        return any(
            t is column
            or (
                not isinstance(column, ColumnClause) and not isinstance(t, ColumnClause) and t.compare(column)
            )
            or any(t is other for other in equal.get(column, ()))
            for t in terms
        )

    if any(all(among_terms(c) for c in k) for k in statement_keys(stmt, where=where, froms=froms)):
        return None
    shown = ", ".join(sorted({str(f) for f in froms})) or "its columns"
    return (
        f"sort {sort.name!r} is not unique in this statement's rows (from {shown}), so rows "
        "could tie and be skipped or repeated: end it in a unique key of every table, alias or "
        "subquery the statement reads (a join to many: the many side's key too); a subquery's "
        "keys are its table's key it selects, its GROUP BY terms, all the columns of a DISTINCT "
        "or UNION, or for a UNION ALL a column holding a different constant in each branch "
        "(literal(1).label('branch')) with each branch's key"
    )


def _inner_equalities(froms: list[Any]) -> dict[Any, set[Any]]:
    """Columns required equal on every row by an inner join's ON (``post_tags.tag_id = tags.id``
    of a many-to-many through a relationship): a key column may be stood for by its equal, so
    ``Tag.id, Post.id`` is the association table's key. Not below an outer join's optional side
    (unmatched, its columns are NULL there)."""
    found: dict[Any, set[Any]] = {}

    def visit(node: Any, optional: bool) -> None:
        if not isinstance(node, Join):
            return
        if not (optional or node.isouter or node.full):
            for a, b in equalities(node.onclause):
                if isinstance(a, ColumnClause) and isinstance(b, ColumnClause):
                    found.setdefault(a, set()).add(b)
                    found.setdefault(b, set()).add(a)
        visit(node.left, optional or node.full)
        visit(node.right, optional or node.isouter or node.full)

    for from_ in froms:
        visit(from_, False)
    return found


def _distinct_problem(stmt: Select[Any], sort: Keyset, missing: tuple[int, ...]) -> str | None:
    """A SELECT DISTINCT keeps its rows only if the key terms appended to it add none: when each
    is one of the columns it selects already (inside an entity or a Bundle, whose values are read
    from columns of their own), or when those columns hold a key of its rows without DISTINCT
    (which is then a no-op)."""
    if not (stmt._distinct and missing) or stmt._distinct_on:
        return None
    columns = list(stmt.selected_columns)  # an entity's and a Bundle's columns too
    missing = tuple(i for i in missing if not any(_same(c, sort.columns[i].expr) for c in columns))
    if not missing:
        return None
    plain = stmt._generate()
    plain._distinct = False
    selected = [unlabel(c) for c in stmt.selected_columns]
    for key in statement_keys(plain, where=True):
        if all(
            any(s is base(c) or (not isinstance(c, ColumnClause) and s.compare(c)) for s in selected)
            for c in key
        ):
            return None
    names = ", ".join(sort.columns[i].name for i in missing)
    return (
        f"sort {sort.name!r}: SELECT DISTINCT does not select {names}, and selecting it could "
        "add rows: select the sort's terms too (then they are part of what is distinct), or "
        "sort by columns the statement selects"
    )


class _Remembered:
    """The plans (or refusals) of the shapes seen last: at most `size`, the least recently used
    forgotten first; one lock, so threads serving requests may look up and add at once."""

    def __init__(self, size: int):
        self._size = size
        self._entries: OrderedDict[tuple[Any, ...], tuple[Keyset, Plan | str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], sort: Keyset) -> Plan | str | None:
        with self._lock:
            found = self._entries.get(key)
            # The entry holds its sort, so the sort's id in the key is no other sort's meanwhile.
            if found is None or found[0] is not sort:
                return None
            self._entries.move_to_end(key)
            return found[1]

    def put(self, key: tuple[Any, ...], sort: Keyset, verdict: Plan | str) -> None:
        with self._lock:
            self._entries[key] = (sort, verdict)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


PLANS = _Remembered(_MAX_PLANS)


def shape(stmt: Select[Any], sort: Keyset) -> tuple[Any, ...] | None:
    """The shape of `stmt` paged by `sort`: equal for statements that differ only in the values
    of their WHERE and HAVING (a filter made anew per request); None where SQLAlchemy cannot key
    the statement (an element without a cache key): it is then analysed per call.

    SQLAlchemy's cache key, taken over the statement and the sort's terms in one pass, so an
    anonymous alias in both is the same alias. A cache key leaves every bound value out, but
    the analysis reads some: whether a value is NULL (``coalesce(x, :v)``), which constant a
    UNION ALL branch selects. Those outside the WHERE and HAVING stay in the shape; the sort
    itself by identity (a plan holds its terms, and a refusal names it)."""
    anon = anon_map()
    bound: list[BindParameter[Any]] = []
    key = stmt._gen_cache_key(anon, bound)
    terms = tuple(t.expr._gen_cache_key(anon, bound) for t in sort.columns)
    filtering: list[BindParameter[Any]] = []
    filters = stmt._where_criteria + stmt._having_criteria
    for criterion in filters:
        criterion._gen_cache_key(anon_map(), filtering)
    if NO_CACHE in anon:
        return None
    skipped = {id(b) for b in filtering}
    values: tuple[Any, ...] = tuple(
        None if id(b) in skipped else (b.callable is not None, b.value) for b in bound
    )
    try:
        hash(values)
    except TypeError:  # an unhashable value (a list) outside the filters: by its text
        values = (repr(values),)
    return (id(sort), key, terms, values)


def plan(stmt: Any, sort: Keyset, dialect: Any, *, plain_rows: bool, seek: SeekForm | None = None) -> Plan:
    """The plan of `stmt`'s shape for this sort, engine and seek form: checked (KeysetError with
    the SQL and what to write instead) and worked out once per shape, not per page."""
    if not isinstance(stmt, Select):
        raise refuse(stmt, dialect, _not_a_select(stmt))
    form = seek or "auto"
    if form not in SEEK_FORMS:
        raise KeysetError(f'seek must be "auto" or "bounded", not {form!r}')
    found = shape(stmt, sort)
    key = None if found is None else (dialect.name, plain_rows, form, *found)
    verdict = PLANS.get(key, sort) if key is not None else None
    if verdict is None:
        verdict = _verdict(stmt, sort, dialect, plain_rows, form)
        if key is not None:
            PLANS.put(key, sort, verdict)
    if isinstance(verdict, str):
        raise refuse(stmt, dialect, verdict)
    return verdict


def _not_a_select(stmt: Any) -> str:
    """Why `stmt` cannot be paged as it is, and the select() to give instead. A UNION (also
    the recursive part of a CTE) has no WHERE or ORDER BY of its own that a seek could go into:
    its rows are read through a select() from it."""
    what = type(stmt).__name__
    ending = "and sort by its columns, ending in a key unique in its rows"
    if isinstance(stmt, CTE):
        kind = "recursive CTE" if stmt.recursive else "CTE"
        return f"cannot page a {kind} ({stmt.name}) itself: page select({stmt.name}) from it, {ending}"
    if isinstance(stmt, FromClause):
        return f"cannot page a {what} itself: page a select() from it, {ending}"
    if isinstance(stmt, CompoundSelect):
        recursive = [f.name for f in _surface_froms(stmt) if isinstance(f, CTE) and f.recursive]
        if recursive:
            return (
                f"cannot page a UNION that is the recursive part of a CTE ({recursive[0]}): make "
                f"it the CTE (.cte(recursive=True) ... .union_all(...)), page select({recursive[0]}) "
                f"from it, {ending}"
            )
        return (
            "cannot page a UNION, INTERSECT or EXCEPT as the statement: select from it as a "
            "subquery (u = union(...).subquery(); select(u)) and sort by u.c columns, ending in a "
            "key unique in its rows"
        )
    return f"cannot page a {what}: give a select()"


def _surface_froms(stmt: Any) -> list[Any]:
    """The FROMs the branches of a compound select read directly (inside joins, not inside a
    CTE's own statement). The recursive part of a recursive CTE reads the CTE while it is being
    defined: the seed CTE, whose statement is not yet the UNION."""
    found: list[Any] = []

    def leaves(from_: Any) -> None:
        if isinstance(from_, Join):
            leaves(from_.left)
            leaves(from_.right)
        elif not (isinstance(from_, CTE) and isinstance(from_.element, CompoundSelect)):
            found.append(from_)

    for part in stmt.selects:
        if isinstance(part, CompoundSelect):
            found += _surface_froms(part)
        elif isinstance(part, Select):
            for from_ in part.get_final_froms():
                leaves(from_)
    return found


def _verdict(stmt: Select[Any], sort: Keyset, dialect: Any, plain_rows: bool, form: SeekForm) -> Plan | str:
    """The Plan of a statement's shape, or why it cannot be paged (what to write instead)."""
    if stmt._limit_clause is not None or stmt._offset_clause is not None or stmt._fetch_clause is not None:
        return (
            "the statement already has LIMIT/OFFSET: paging sets its own LIMIT, and an OFFSET would "
            "drop rows on every page; remove .limit()/.offset() (page size is paginate's limit), or "
            "select from it as a subquery to page a fixed slice"
        )
    if stmt._distinct_on:
        return "DISTINCT ON picks rows by its own ORDER BY: page a subquery of it instead"
    problem = _eager_problem(stmt) or _term_problem(stmt, sort)
    if problem is not None:
        return problem
    try:
        sort.check_dialect(dialect)
        problem = _unique_problem(stmt, sort, where=False)
        if problem is not None and stmt._where_criteria and len(stmt.get_final_froms()) > 1:
            # FROMs joined only by the WHERE's equalities (Book.author_id == Author.id).
            problem = _unique_problem(stmt, sort, where=True)
        if problem is not None:
            return problem
        built = Plan(stmt, sort, dialect, plain_rows=plain_rows, seek=form)
        return _distinct_problem(stmt, sort, built.missing) or built
    except KeysetError as err:
        return str(err).split("\nSQL: ")[0]


def _own_parts(expr: Any) -> Iterator[Any]:
    """The elements of a term, not those inside a subquery of it (which has FROMs of its own)."""
    yield expr
    if isinstance(expr, (ScalarSelect, Select, Exists)):
        return
    for child in expr.get_children():
        yield from _own_parts(child)


def _term_problem(stmt: Select[Any], sort: Keyset) -> str | None:
    """A term no seek can compare: a window function (it is computed after WHERE and HAVING,
    where the seek goes), or a column of a FROM the statement does not read (SQL would add it
    as a cross join, or fail naming the table)."""
    froms = {base(leaf) for f in stmt.get_final_froms() for leaf in leaves(f)}
    for t in sort.columns:
        parts = list(_own_parts(t.expr))
        if any(isinstance(p, Over) for p in parts):
            return (
                f"sort {sort.name!r}: {t.name} is a window function, computed after the WHERE and "
                "HAVING a seek goes into: select it labelled in a subquery (w = stmt.add_columns("
                "func.row_number().over(...).label('n')).subquery()) and page select(w) sorted by w.c.n"
            )
        outside = sorted(
            {
                str(getattr(p.table, "name", None) or p.table)
                for p in parts
                if isinstance(p, ColumnClause) and p.table is not None and base(p.table) not in froms
            }
        )
        if outside:
            return (
                f"sort {sort.name!r}: {t.name} reads {', '.join(outside)}, which the statement does "
                "not select from: join it (stmt.join(...)) or sort by the statement's own columns"
            )
    return None


def _eager_problem(stmt: Select[Any]) -> str | None:
    """contains_eager() of a collection reads the caller's own join: a page's LIMIT would count
    joined rows, not parents, and the ORM folds them into parents with partial collections. A
    SELECT DISTINCT with joinedload() of a collection: the ORM moves the DISTINCT into a subquery
    of its own, joined to the collection outside it, where no seek can reach (refused before, as
    a sort reading a table the statement did not select from)."""
    for option in stmt._with_options:
        for load in getattr(option, "context", ()):
            eager = "eager_from_alias" in getattr(load, "local_opts", {})
            path = getattr(load, "path", ())
            collection = [str(p) for p in path if getattr(p, "uselist", False)]
            joined = getattr(load, "strategy", None) == (("lazy", "joined"),)
            if stmt._distinct and joined and collection:
                return (
                    f"SELECT DISTINCT with joinedload() of a collection ({collection[-1]}): the ORM "
                    "puts the DISTINCT in a subquery of its own, joined to the collection outside "
                    "it, where a page's seek cannot go; load it with selectinload() (one more query "
                    "per page), or drop .distinct() (the ORM folds a joined collection's rows back "
                    "into one parent each)"
                )
            if eager and collection:
                return (
                    f"contains_eager() of a collection ({collection[-1]}): a page's LIMIT would count "
                    "joined rows, not parents, and cut collections short; load it with "
                    "selectinload() (one more query per page) or joinedload() (paged by parent: "
                    "the ORM limits the parents in a subquery), and drop the join, or page the "
                    "joined rows as rows (select(Parent, Child), sorted by both keys)"
                )
    return None


def executor_dialect(executor: Any, stmt: Any) -> Any:
    """The dialect the statement will run on: a Connection's, or the engine a Session binds the
    statement to (which may be one of several, Session(binds=...))."""
    if isinstance(executor, Connection):
        return executor.dialect
    return executor.get_bind(clause=stmt).dialect
