"""Sorts: a named, total order of rows (the `Keyset` class) and the SQL it adds to a statement."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

from sqlalchemy import and_, bindparam, or_, tuple_
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import ColumnClause, ColumnElement, Label, UnaryExpression

from .cursor import Position
from .errors import CursorMismatch, InvalidCursor, KeysetError
from .lineage import base, flatten, is_aggregate, nullable, unique_keys, value_type
from .values import dialect_problem, from_cursor, misfit

# Dialects whose planners turn a row-value comparison into an index range (PostgreSQL's
# "Index Cond", SQLite's SEARCH). MariaDB and MySQL scan for it (docs/design.md has the measurements).
_ROW_VALUE_DIALECTS = {"postgresql", "sqlite"}
_T = TypeVar("_T")

# How a sort compares keysets: see Keyset's docstring.
SeekForm = Literal["auto", "bounded"]


@dataclass(frozen=True)
class Term:
    """One column (or expression) of a sort, its direction and where its NULLs go."""

    expr: ColumnElement[Any]
    descending: bool
    name: str  # for messages
    nulls: str | None = None  # "first" or "last" when given explicitly

    @property
    def type(self) -> Any:
        """The type its values are checked against: a UNION's column takes the first branch's
        type, but holds the values of every branch (a longer text, a wider number)."""
        return value_type(self.expr)


_MODIFIERS = {
    operators.asc_op: ("descending", False),
    operators.desc_op: ("descending", True),
    operators.nulls_first_op: ("nulls", "first"),
    operators.nulls_last_op: ("nulls", "last"),
}


def _term(term: Any, sort: str) -> Term:
    found: dict[str, Any] = {"descending": False, "nulls": None}
    # .desc().nulls_last() and .nulls_last().desc() nest the other way round: peel both.
    while True:
        if hasattr(term, "__clause_element__"):
            term = term.__clause_element__()
        if not (isinstance(term, UnaryExpression) and term.modifier in _MODIFIERS):
            break
        field_, value = _MODIFIERS[term.modifier]
        found[field_] = value
        term = term.element
    if isinstance(term, Label):  # sort by what the label names; the label is only a name
        term = term.element
    if not isinstance(term, ColumnElement):
        raise KeysetError(f"sort {sort!r}: {term!r} is not a column or SQL expression")
    return Term(term, found["descending"], str(getattr(term, "key", None) or term), found["nulls"])


def columns_in(expr: ColumnElement[Any]) -> list[ColumnClause[Any]]:
    """The columns (of tables, aliases, subqueries) an expression reads."""
    return [e for e in visitors.iterate(expr) if isinstance(e, ColumnClause) and e.table is not None]


_NULLS_WHY = {
    False: (
        "NULLs do not compare; each engine puts them elsewhere in its own ORDER BY (PostgreSQL "
        "after the values, SQLite and MariaDB before them), so the order must say: give it an "
        "explicit .nulls_first() or .nulls_last() (paged as two index ranges, its values and its "
        "NULLs, the same order on every engine); or make it NOT NULL, or sort by "
        "coalesce(column, a value)"
    ),
    True: (
        "only the first term may be nullable: after another term, its NULLs sit inside each group "
        "of rows tying on the terms before it, and the rows past a cursor are then not one index "
        "range: the seek needs `IS NULL` branches that no row-value comparison or index bound "
        "expresses, and the NULL placement would have to match how each engine's index stores NULLs "
        "(PostgreSQL largest, SQLite and MariaDB smallest). Instead: make it the first term with "
        ".nulls_first()/.nulls_last(), make it NOT NULL, or sort by coalesce(column, a value "
        "beyond its range) with an index on that expression"
    ),
}


class Keyset:
    """A sort: a named, total order, ``Keyset("newest", Order.created_at.desc(), Order.id.desc())``.

    ``seek`` chooses the form of the seek predicate: ``"auto"`` (the default) compares a row
    value ``(a, b) < (:a, :b)`` on PostgreSQL and SQLite, and the expanded form with a leading
    bound elsewhere; ``"bounded"`` uses the expanded form with a leading bound,
    ``a <= :a AND (a < :a OR (a = :a AND b < :b))``, on every engine. Give ``"bounded"`` where a
    row value is not pushed down: postgres_fdw does not ship row-value comparisons to a foreign
    table, so a sharded (foreign-partitioned) table would be read whole and filtered locally.

    Terms are columns or SQL expressions (``func.lower(name)``, ``coalesce(...)``, labels,
    aggregates over a GROUP BY), each ``.asc()`` (the default) or ``.desc()``. Every term must be
    NOT NULL (NULLs do not compare), and the terms must include a unique key of a table (its
    primary key, a unique column, or every column of a UniqueConstraint) so that no two rows tie
    on all of them. Refused with KeysetError when defined.
    """

    def __init__(self, name: str, *order_by: Any, seek: SeekForm = "auto"):
        if not order_by:
            raise KeysetError(f"sort {name!r} needs at least one column")
        if seek not in ("auto", "bounded"):
            raise KeysetError(f'sort {name!r}: seek must be "auto" or "bounded", not {seek!r}')
        self.name = name
        self.seek_form: SeekForm = seek
        self.columns = tuple(_term(term, name) for term in flatten(order_by))
        # NULLs do not compare, so a nullable term needs its NULLs placed explicitly, and is
        # paged as two parts (its values, then its NULLs, or the other way round): possible for
        # the first term only, where each part is one index range.
        for i, term in enumerate(self.columns):
            if nullable(term.expr) and (term.nulls is None or i > 0):
                raise KeysetError(f"sort {name!r}: {term.name} is nullable and {_NULLS_WHY[i > 0]}")
        lead = self.columns[0]
        # Reading forward, do the first term's NULLs come after its values? None: it has none.
        # An explicit NULLS order is honoured on a NOT NULL column too: it may be the optional
        # side of an outer join in some statement.
        self.nulls_last: bool | None = None
        if lead.nulls is not None:
            self.nulls_last = lead.nulls == "last"
        in_sort = {base(t.expr) for t in self.columns if isinstance(t.expr, ColumnClause)}
        tables = {c.table for c in in_sort if c.table is not None}
        if not any(key <= in_sort for table in tables for key in unique_keys(table)):
            raise KeysetError(
                f"sort {name!r} must include a unique key (the primary key, a unique column or all the "
                f"columns of a UniqueConstraint); {self.columns[-1].name!r} is not unique, so rows "
                "could tie and be skipped or repeated: end the sort in the primary key"
            )
        self.aggregated = any(is_aggregate(t.expr) for t in self.columns)
        # The SQL a page adds to a statement depends only on the sort, the direction and the
        # dialect, never on the position: it is built once, with named parameters for the key
        # values, which every page binds at execution. Building it anew took longer than the
        # rest of paginate() (about 0.1 ms a page).
        self._key_params = tuple(
            bindparam(f"_keyset_key_{i}", type_=t.expr.type) for i, t in enumerate(self.columns)
        )
        self._to_params = tuple(
            bindparam(f"_keyset_to_{i}", type_=t.expr.type) for i, t in enumerate(self.columns)
        )
        self._parts: dict[tuple[Any, ...], Any] = {}  # threads racing only build a part twice

    def __repr__(self) -> str:
        terms = ", ".join(f"{t.name} {'desc' if t.descending else 'asc'}" for t in self.columns)
        return f"Keyset({self.name!r}: {terms})"

    def _cached(self, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = build()
        return cast(_T, part)

    def check_dialect(self, dialect: Any) -> None:
        """Refuse, before the first page, key types this engine cannot compare exactly."""

        def check() -> bool:
            for term in self.columns:
                problem = dialect_problem(term.type, dialect)
                if problem:
                    raise KeysetError(f"sort {self.name!r}: {term.name} {problem}")
            return True

        self._cached(("dialect", dialect.name), check)

    def bind(self, keyset: Sequence[Any]) -> dict[str, Any]:
        """Execution parameters that put a keyset (all of it, or a prefix for `seek`) in the
        clauses of `seek` and `at_keys`."""
        return {p.key: v for p, v in zip(self._key_params, keyset, strict=False)}

    def order_by(self, *, backward: bool = False) -> tuple[ColumnElement[Any], ...]:
        """ORDER BY clauses of the whole order, reversed when reading backward (a `before` page).
        NULLs are placed by ``(term IS NULL)`` first, the same on every engine (MariaDB has no
        NULLS FIRST/LAST)."""
        return self._cached(("order_by", backward), lambda: self._order_by(backward))

    def _order_by(self, backward: bool) -> tuple[ColumnElement[Any], ...]:
        plain = self.part_order_by(backward=backward)
        if self.nulls_last is None:
            return plain
        is_null = self.columns[0].expr.is_(None)
        return (is_null.asc() if self.nulls_last != backward else is_null.desc(), *plain)

    def part_order_by(self, *, backward: bool = False, nulls: bool = False) -> tuple[ColumnElement[Any], ...]:
        """ORDER BY within one part (values or NULLs of the first term): one index range. With
        `nulls`, the first term (all NULL in that part) is left out (see paging._drop_lead)."""
        return self._cached(
            ("part_order_by", backward, nulls),
            lambda: tuple(
                t.expr.desc() if t.descending != backward else t.expr.asc()
                for t in self.columns[1 if nulls else 0 :]
            ),
        )

    def key_labels(self) -> tuple[ColumnElement[Any], ...]:
        """The key terms as `_keyset_0`, `_keyset_1`, ...: appended to a page's columns when the
        statement does not select them itself."""
        return self._cached(
            ("labels",), lambda: tuple(t.expr.label(f"_keyset_{i}") for i, t in enumerate(self.columns))
        )

    def at_keys(self, *, lead_is_null: bool = False) -> ColumnElement[bool]:
        """True for the row at the bound keyset, by the database's own equality (a case-insensitive
        collation or PAD SPACE agrees with the seek predicate, not with Python's ==)."""

        def build() -> ColumnElement[bool]:
            equal = [t.expr == p for t, p in zip(self.columns, self._key_params, strict=True)]
            if lead_is_null:
                equal[0] = self.columns[0].expr.is_(None)
            return and_(*equal)

        return self._cached(("at_keys", lead_is_null), build)

    def seek(
        self,
        *,
        backward: bool = False,
        inclusive: bool = False,
        dialect: str = "",
        depth: int = 0,
        first: int = 0,
    ) -> ColumnElement[bool]:
        """Rows after the bound keyset (`bind(keyset)`) in this order (before, when `backward`);
        with `inclusive`, the row at the keyset too. With `depth`, only the first `depth` terms
        are compared (a prefix position, see start_at()): every row whose prefix lies past the
        bound one, and with `inclusive` every row that shares it. With `first`, the terms before
        it are left out (the NULL part of a nullable first term compares the others only).

        The form is chosen so that each engine reads an index range (tests/test_plans.py):
        - a row value ``(a, b) < (:a, :b)`` where the planner understands it and every column
          runs the same way;
        - otherwise (and always with ``Keyset(..., seek="bounded")``) the expanded OR with a
          leading bound on the first column,
          ``a <= :a AND (a < :a OR (a = :a AND b < :b))``: the bound gives the range, the OR
          only filters the rows that tie on the first column.
        """
        depth = depth or len(self.columns)
        return self._cached(
            ("seek", backward, inclusive, dialect, depth, first),
            lambda: self._seek(backward, inclusive, dialect, depth, first),
        )

    def seek_to(self, *, dialect: str = "") -> ColumnElement[bool]:
        """Rows at or before the keyset bound by `bind_to(keyset)` (all of it: a row's keyset), in
        this order, under parameter names of its own: it combines with `seek()` past another
        keyset into one index range, the rows between two keysets (see paging.iterate_ranges)."""
        return self._cached(
            ("seek_to", dialect),
            lambda: self._seek(True, True, dialect, len(self.columns), 0, self._to_params),
        )

    def bind_to(self, keyset: Sequence[Any]) -> dict[str, Any]:
        """Execution parameters that put a keyset in the clause of `seek_to`."""
        if len(keyset) != len(self.columns):
            raise InvalidCursor(f"a range of sort {self.name!r} ends at a whole keyset")
        return {p.key: v for p, v in zip(self._to_params, keyset, strict=True)}

    def _seek(
        self,
        backward: bool,
        inclusive: bool,
        dialect: str,
        depth: int,
        first: int,
        bound: tuple[Any, ...] | None = None,
    ) -> ColumnElement[bool]:
        terms, values = self.columns[first:depth], (bound or self._key_params)[first:depth]

        def later(
            expr: ColumnElement[Any], descending: bool, value: Any, or_equal: bool
        ) -> ColumnElement[bool]:
            compared: ColumnElement[bool]
            if descending != backward:
                compared = expr <= value if or_equal else expr < value
            else:
                compared = expr >= value if or_equal else expr > value
            return compared

        same_direction = len({t.descending for t in terms}) == 1
        row_value = self.seek_form == "auto" and dialect in _ROW_VALUE_DIALECTS
        if row_value and same_direction and len(terms) > 1:
            row = tuple_(*(t.expr for t in terms))
            return later(row, terms[0].descending, tuple_(*values), inclusive)

        last = len(terms) - 1
        branches = []
        for i, (term, value) in enumerate(zip(terms, values, strict=True)):
            ties = [t.expr == v for t, v in zip(terms[:i], values[:i], strict=True)]
            branches.append(and_(*ties, later(term.expr, term.descending, value, inclusive and i == last)))
        expanded = or_(*branches)
        if last == 0:
            return expanded
        return and_(later(terms[0].expr, terms[0].descending, values[0], True), expanded)

    def accept(self, position: Position, *, direction: str, filters: str) -> tuple[Any, ...]:
        """The keyset of a cursor, ready to bind; refuses one made for another sort, direction
        or filters (CursorMismatch), or holding values the terms cannot (InvalidCursor)."""
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
        # a prefix of the keyset; every cursor made from a row holds all of it.
        n = len(position.keys)
        if not (n == len(self.columns) or (position.inclusive and 1 <= n < len(self.columns))):
            raise InvalidCursor(f"cursor does not fit sort {self.name!r}")
        keyset = tuple(from_cursor(t.type, v) for t, v in zip(self.columns, position.keys, strict=False))
        if any(misfit(t.type, v) is not None for t, v in zip(self.columns, keyset, strict=False)) or (
            None in keyset[1:] or (keyset[0] is None and self.nulls_last is None)
        ):
            raise InvalidCursor(f"cursor does not fit sort {self.name!r}")
        return keyset

    def check(self, position: Position, *, direction: str, filters: str) -> None:
        """Refuse a cursor made for another sort, direction or filters (see accept())."""
        self.accept(position, direction=direction, filters=filters)

    def describe(self, i: int) -> str:
        return f"{self.columns[i].name} ({self.columns[i].type})"
