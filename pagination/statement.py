"""The SQL of a page: every statement paging sends is built here, from a sort and a statement.

A `Plan` (made by planning.py's `plan()`, once per statement shape) builds a read: the seek
predicate, the ORDER BY, the key labels appended, LIMIT, and runs it; `Rows` are what it read.

The seek predicate (rows past a position) has two forms, chosen per call (``seek=``):
- ``"auto"``: a row value ``(a, b) < (:a, :b)`` where the planner reads it as an index range
  (PostgreSQL, SQLite) and every term runs the same way and is NOT NULL; otherwise the
  expanded form below;
- ``"bounded"``: always the expanded form with a leading bound on the first term,
  ``a <= :a AND (a < :a OR (a = :a AND b < :b))``: the bound gives the range, the OR only
  filters the rows that tie on it. postgres_fdw ships this form to a foreign table (a row value
  it filters locally, reading every shard from its start).

NULLs (on which side, planning.py): a nullable term's comparison adds the NULLs on their side
(``a > :a OR a IS NULL``), and a NULL key value compares as ``a IS NULL``. A first term with
explicit placement is read as two index ranges instead (its values, then its NULLs, or the
other way round); a later one is ordered by NULLS FIRST/LAST (by ``(a IS NULL)`` on MariaDB).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from sqlalchemy import (
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
    type_coerce,
)
from sqlalchemy.sql.elements import ColumnElement

from .rows import Rows, execute
from .sort import Keyset, SeekForm, Term, order_clauses
from .values import BOUND_KINDS, bound_kind, carrier

_T = TypeVar("_T")
Items = Literal["keyed", "own", "keys"]  # what a read selects (Plan._item_refs)

# Planners that turn a row-value comparison into an index range (PostgreSQL's "Index Cond",
# SQLite's SEARCH); MariaDB and MySQL scan for it (docs/design.md has the measurements).
ROW_VALUE_DIALECTS = frozenset({"postgresql", "sqlite"})


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

    def __init__(
        self,
        sort: Keyset,
        dialect: Any,
        *,
        seek: SeekForm,
        nullable: tuple[bool, ...],
        nulls_after: tuple[bool, ...],
        by_item: tuple[bool, ...],
        layout: tuple[int, tuple[int, ...], tuple[int, ...]],
    ):
        """planning.py's analysis of the statement, per term: may it be NULL in the rows, do its
        NULLs come after its values reading forward, is it ordered by its select item; and
        `_layout`'s (the caller's columns in a row, where each key term is in a row, the terms
        appended)."""
        self.sort, self.dialect, self.seek_form = sort, dialect.name, seek
        self.nullable, self.nulls_after, self.by_item = nullable, nulls_after, by_item
        self.n_items, self.key_index, self.missing = layout
        # A key a driver would carry inexactly is read and bound as the engine holds it
        # (values.carrier: SQLite's NUMERIC, PostgreSQL's interval); planning.py appends it.
        self.carriers = tuple(carrier(t.type, dialect) for t in sort.columns)
        self.labels = tuple(
            (t.expr if c is None else type_coerce(t.expr, c)).label(f"_keyset_{i}")
            for i, (t, c) in enumerate(zip(sort.columns, self.carriers, strict=True))
        )
        self._built: dict[tuple[Any, ...], Any] = {}
        # statement()'s reads, kept by `exact` (planning.planned()), read, LIMIT and the key values'
        # NULLs and kinds: a next page runs the same object, not built nor keyed by SQLAlchemy again.
        self._reads: dict[tuple[Any, ...], Select[Any]] = {}

    def _cached(self, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
        part = self._built.get(key)
        if part is None:
            part = self._built[key] = build()
        return part

    # --- parameters ---------------------------------------------------------------------------

    def bind(self, keys: Sequence[Any], *, to: bool = False) -> dict[str, Any]:
        """Execution parameters putting key values (all, or a prefix) into the seek."""
        which = "to" if to else "key"
        return {f"_keyset_{which}_{i}": v for i, v in enumerate(keys) if v is not None}

    def kinds(self, keys: Sequence[Any]) -> tuple[str | None, ...]:
        """Per term, the kind of number a key value is bound as when the engine returned another
        than the term's type says (values.bound_kind); part of every cached seek's key."""
        return tuple(bound_kind(t.type, v) for t, v in zip(self.sort.columns, keys, strict=False))

    def _params(self, kinds: tuple[str | None, ...], to: bool) -> tuple[Any, ...]:
        """The seek's parameters, each typed as its key value is (see kinds())."""
        which = "to" if to else "key"

        def build() -> tuple[Any, ...]:
            padded = kinds + (None,) * (len(self.sort.columns) - len(kinds))
            return tuple(
                bindparam(
                    f"_keyset_{which}_{i}",
                    type_=c if c is not None else t.bind_type if kind is None else BOUND_KINDS[kind],
                )
                for i, (t, kind, c) in enumerate(zip(self.sort.columns, padded, self.carriers, strict=True))
            )

        return self._cached(("params", kinds, to), build)

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
        kinds = self.kinds(keys[:depth])
        return self._cached(
            ("seek", backward, inclusive, depth, first, nulls, kinds, to),
            lambda: self._seek(backward, inclusive, depth, first, nulls, self._params(kinds, to)),
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
        kinds = self.kinds(keys)
        return self._cached(
            ("at", nulls, kinds),
            lambda: and_(
                *(
                    self._equal(i, n, p)
                    for i, (n, p) in enumerate(zip(nulls, self._params(kinds, False), strict=False))
                )
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
        exact: tuple[Any, ...] | None = None,
    ) -> tuple[Select[Any], dict[str, Any]]:
        """The statement of one read, key values left as parameters, and those parameters (`_reads`)."""
        nulls = exact is not None and keys is not None and (tuple(v is None for v in keys), self.kinds(keys))
        kept = exact is not None and (exact, read, limit, backward, flag_keys_row, nulls)
        if kept and (found := self._reads.get(kept)) is not None:
            return found, {} if keys is None else self.bind(keys)
        page = self.restrict(self.keyed(stmt), read, keys, backward=backward)
        params: dict[str, Any] = {}
        if keys is not None:
            if flag_keys_row:
                page = page.add_columns(self.at(keys).label("_keyset_at"))
            params = self.bind(keys)
        page = page.order_by(None).order_by(*self.read_order(read, backward=backward)).limit(limit)
        if kept:  # at most 64 (a few per filter value): past them, afresh
            self._reads = {**self._reads, kept: page} if len(self._reads) < 64 else {kept: page}
        return page, params

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
        # A carried key is ordered as its type again (an interval, not its text).
        as_keys = [
            c if k is None or not hasattr(k, "ordered") else k.ordered(c)
            for c, k in zip(columns, self.carriers, strict=True)
        ]
        last_first = self.order_by(as_keys, backward=True)
        return select(*columns, func.count().over().label("_keyset_rows")).order_by(*last_first).limit(1)

    def range_end_probe(
        self, stmt: Select[Any], read: Read, keys: Sequence[Any] | None, *, size: int, backward: bool = False
    ) -> Select[Any]:
        """The key values of the `size`-th row past `keys` (none when fewer rows remain) in the
        reading direction, from the sort's index alone: the end of a full range (iterate_ranges)
        or of a page's window (paginate's `window`). Its OFFSET skips index entries inside the
        one range a seek starts, at most `size`: no window function, count or reversed sort."""
        keys_only = stmt.with_only_columns(*self.labels, maintain_column_froms=True)
        window = self.restrict(keys_only, read, keys, backward=backward)
        ordered = window.order_by(None).order_by(*self.order_by(backward=backward, items="keys"))
        return ordered.limit(1).offset(size - 1)

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
        exact: tuple[Any, ...] | None = None,
    ) -> tuple[Rows, bool]:
        """Rows of the statement past `keys` in the sort's order (`exact`: see statement()).

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
                exact=exact,
            )
            rows, read_metadata = execute(executor, page, params)
            metadata = metadata or read_metadata
            if flag_here and rows and rows[0][-1]:
                found, rows = True, rows[1:]
            kept += rows
        keyed = tuple((t.type, i) for t, i in zip(self.sort.columns, self.key_index, strict=True))
        return Rows(kept, self.n_items, keyed, metadata), found

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
