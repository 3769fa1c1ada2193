"""The sort: a named, total order of rows (the `Keyset` class), its terms, and accepting a position.

A sort knows nothing of statements or engines: the SQL a page adds to a statement is built by
`statement.py` from a sort's terms.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, TypeVar, cast

from sqlalchemy import Column as TableColumn
from sqlalchemy import Integer, Numeric
from sqlalchemy.orm import RelationshipProperty
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import BinaryExpression, ColumnClause, ColumnElement, Label, UnaryExpression

from .cursor import Position
from .errors import CursorMismatch, InvalidCursor, KeysetError
from .lineage import base, flatten, is_aggregate, sources, value_type
from .values import dialect_problem, from_cursor, loose_number, misfit

_T = TypeVar("_T")
# Key values whose order in Python is the engines' order (text is not: collations differ).
_ORDERED = (int, float, Decimal, dt.date, dt.time, dt.timedelta, bytes)

# The form of the seek predicate (see statement.py): "auto" picks per engine, "bounded" is the
# expanded form with a leading bound on every engine (what postgres_fdw ships to a shard).
SeekForm = Literal["auto", "bounded"]
SEEK_FORMS = ("auto", "bounded")


@dataclass(frozen=True)
class Term:
    """One column (or expression) of a sort, its direction and where its NULLs go.

    What it is made of (`computed`, `bind_type`, `type`) is worked out from its expression on
    first use and kept: a page asked it about twenty times, each a walk of the expression."""

    expr: ColumnElement[Any]
    descending: bool
    name: str  # for messages
    nulls: str | None = None  # "first" or "last" when given explicitly; None: the engine's way

    @functools.cached_property
    def computed(self) -> bool:
        """Is it computed (an aggregate, arithmetic, a subquery's expression) rather than a
        table's column? Its values are then of whatever type the engine returns."""
        if not isinstance(self.expr, ColumnClause):
            return True
        return not isinstance(base(self.expr), TableColumn) or sources(self.expr) is not None

    @functools.cached_property
    def bind_type(self) -> Any:
        """The type its key values are bound as. SQLAlchemy types ``int / int`` as an Integer,
        but the engines return a fraction (PostgreSQL a NUMERIC): bound as an Integer (cast
        ``::INTEGER`` by psycopg) the key would be truncated and the seek would loop."""
        divides = any(
            isinstance(e, BinaryExpression) and e.operator is operators.truediv
            for e in visitors.iterate(self.expr)
        )
        return Numeric() if divides and isinstance(self.expr.type, Integer) else self.expr.type

    @functools.cached_property
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
    if isinstance(getattr(term, "property", None), RelationshipProperty):
        raise KeysetError(
            f"sort {sort!r}: {term} is a relationship, not a column: sort by its foreign key "
            "column, or join it and sort by the joined table's columns"
        )
    # .desc().nulls_last() and .nulls_last().desc() nest the other way round: peel both.
    while True:
        if hasattr(term, "__clause_element__"):
            term = term.__clause_element__()
        if not (isinstance(term, UnaryExpression) and term.modifier in _MODIFIERS):
            break
        field_, value = _MODIFIERS[term.modifier]
        found[field_] = value
        term = term.element
    # Sort by what a label names, never by the label: a label's name may be another column's
    # (Bundle("b", x.label("y"), y.label("x"))), and SQL resolves a bare name in ORDER BY to the
    # selected column of that name first.
    while isinstance(term, Label):
        term = term.element
    if not isinstance(term, ColumnElement):
        raise KeysetError(f"sort {sort!r}: {term!r} is not a column or SQL expression")
    return Term(term, found["descending"], str(getattr(term, "key", None) or term), found["nulls"])


def order_clauses(
    terms: Sequence[Term],
    exprs: Sequence[ColumnElement[Any]] | None = None,
    *,
    backward: bool = False,
    first: int = 0,
    nullable: Sequence[bool] | None = None,
    nulls_clause: bool = False,
    refs: Sequence[ColumnElement[Any] | None] | None = None,
) -> tuple[ColumnElement[Any], ...]:
    """The one ORDER BY of a sort's terms (of `exprs` in their place, e.g. a subquery's columns),
    from term `first` on, reversed when `backward`: every unpaged query's (Keyset.order_by) and
    every read's (statement.py). A term with its NULLs placed explicitly that may be NULL (all of
    them unless `nullable` says which) is ordered by ``(term IS NULL)`` first, or, with
    `nulls_clause` (an engine that has it), by NULLS FIRST/LAST; other NULLs go where the
    engine puts them. `refs`: where a term is ordered by a reference to its select item (a
    position, a label; None for the term itself), for an engine that needs it (planning.py,
    `by_item`)."""
    clauses: list[ColumnElement[Any]] = []
    for i, t in enumerate(terms):
        if i < first:
            continue
        expr = t.expr if exprs is None else exprs[i]
        ref = refs[i] if refs is not None else None
        ref = expr if ref is None else ref
        clause = ref.desc() if t.descending != backward else ref.asc()
        if t.nulls is not None and (nullable is None or nullable[i]):
            last = (t.nulls == "last") != backward
            if nulls_clause:
                clause = clause.nulls_last() if last else clause.nulls_first()
            else:
                is_null = expr.is_(None)
                clauses.append(is_null.asc() if last else is_null.desc())
        clauses.append(clause)
    return tuple(clauses)


def columns_in(expr: ColumnElement[Any]) -> list[ColumnClause[Any]]:
    """The columns (of tables, aliases, subqueries) an expression reads."""
    return [e for e in visitors.iterate(expr) if isinstance(e, ColumnClause) and e.table is not None]


class Keyset:
    """A sort: a named, total order, ``Keyset("newest", Order.created_at.desc(), Order.id.desc())``.

    Terms are columns or SQL expressions (``func.lower(name)``, ``coalesce(...)``, labels,
    aggregates over a GROUP BY, a ``Bundle`` for its columns), each ``.asc()`` (the default) or
    ``.desc()``, optionally ``.nulls_first()``/``.nulls_last()``. A nullable term without them
    has its NULLs where the engine's own ORDER BY puts them (planning.py). Whether the terms
    are unique in a statement's rows is checked per statement, when it is paged.

    The seek's form is not the sort's: ``paginate(..., seek=...)`` chooses it per call (see
    statement.py), so one sort serves both.
    """

    def __init__(self, name: str, *order_by: Any):
        if not order_by:
            raise KeysetError(f"sort {name!r} needs at least one column")
        self.name = name
        self.columns = tuple(_term(term, name) for term in flatten(order_by))
        # With its NULLs placed explicitly, the first term is read as two index ranges, its
        # values and its NULLs (statement.py). Reading forward, do its NULLs come after its
        # values? None: no explicit placement.
        lead = self.columns[0]
        self.nulls_last: bool | None = None if lead.nulls is None else lead.nulls == "last"
        self.aggregated = any(is_aggregate(t.expr) for t in self.columns)
        self._cache: dict[tuple[Any, ...], Any] = {}  # threads racing only build a part twice

    def __repr__(self) -> str:
        terms = ", ".join(f"{t.name} {'desc' if t.descending else 'asc'}" for t in self.columns)
        return f"Keyset({self.name!r}: {terms})"

    @functools.cached_property
    def terms(self) -> str:
        """A fingerprint of the terms, their directions and NULL placements, sealed into every
        cursor: a cursor opens only this sort, not another of the same name (the "default"
        sort of another resource). Over each term's SQL text (its tables and columns) without a
        dialect; bound values are in it where they can be rendered."""
        parts = []
        for t in self.columns:
            try:
                sql = str(t.expr.compile(compile_kwargs={"literal_binds": True}))
            except Exception:  # a value with no literal form: the term's shape alone
                sql = str(t.expr)
            parts.append([sql, t.descending, t.nulls])
        digest = hashlib.sha256(json.dumps(parts).encode()).digest()[:9]
        return base64.urlsafe_b64encode(digest).decode()

    def over(self, *order_by: Any) -> Keyset:
        """This sort read from other columns that hold the same values in the same order (a
        denormalized copy: a search table's copy of the sorted columns), term for term: the
        same name and fingerprint, so that each opens the other's cursors. A page may then be
        read from either (the app reads a search from its words table or from the orders of a
        few names) and the reader's next page from the other, as the data decides. That the
        copies hold the same values is the caller's promise; their directions and NULL
        placements must be this sort's."""
        copy = Keyset(self.name, *order_by)
        shape = [(t.descending, t.nulls) for t in copy.columns]
        if shape != [(t.descending, t.nulls) for t in self.columns]:
            raise KeysetError(
                f"sort {self.name!r}: over() takes one term per term of the sort, "
                "with the same directions and NULL placements"
            )
        copy.__dict__["terms"] = self.terms  # the cached_property, filled with this sort's
        return copy

    def cached(self, key: tuple[Any, ...], build: Callable[[], _T]) -> _T:
        """What `build()` returns, built once per key for this sort (SQL parts, checks)."""
        part = self._cache.get(key)
        if part is None:
            part = self._cache[key] = build()
        return cast(_T, part)

    def check_dialect(self, dialect: Any) -> None:
        """Refuse, before the first page, key types this engine cannot compare exactly."""

        def check() -> bool:
            for term in self.columns:
                problem = dialect_problem(term.type, dialect)
                if problem:
                    raise KeysetError(f"sort {self.name!r}: {term.name} {problem}")
            return True

        self.cached(("dialect", dialect.name), check)

    def order_by(self, *, backward: bool = False) -> tuple[ColumnElement[Any], ...]:
        """ORDER BY clauses of the whole order for an unpaged query (reversed when `backward`),
        the same on every engine: explicitly placed NULLs are ordered by ``(term IS NULL)``
        first (MariaDB has no NULLS FIRST/LAST); other NULLs go where the engine puts them."""
        return self.cached(("order_by", backward), lambda: order_clauses(self.columns, backward=backward))

    def accept(self, position: Position, *, direction: str, filters: str) -> tuple[Any, ...]:
        """The key values of a position, ready to bind; refuses one made for another sort,
        direction or filters (CursorMismatch), or holding values the terms cannot (InvalidCursor)."""
        if position.sort != self.name:
            raise CursorMismatch(
                f"cursor was made for sort {position.sort!r}, not {self.name!r}: "
                "start again from the first page of this sort"
            )
        if position.terms is not None and position.terms != self.terms:
            raise CursorMismatch(
                f"cursor was made for another sort named {self.name!r}"
                + (" (by an earlier version)" if position.terms == "" else "")
                + ": start again from the first page of this sort"
            )
        if position.direction != direction:
            raise CursorMismatch(
                f"cursor was made for {position.direction!r}, not {direction!r}: "
                f"pass it as {position.direction!r}"
            )
        if position.filters != filters:
            raise CursorMismatch("cursor was made for other filters: start again from the first page")
        # Only an inclusive position (start_at(), or the way back from an empty page) may hold
        # a prefix of the key values; every cursor made from a row holds all of them.
        n = len(position.keys)
        if not (n == len(self.columns) or (position.inclusive and 1 <= n < len(self.columns))):
            raise InvalidCursor(f"cursor does not fit sort {self.name!r}")
        keys = tuple(from_cursor(t.type, v) for t, v in zip(self.columns, position.keys, strict=False))
        # None is a key value of a nullable term (a NULL of a row): a row never has it in a NOT
        # NULL term, so a None there matches no row and the seek still reads past its place.
        # Made by this sort from a row (its fingerprint): the row's own values, which a column
        # may hold past its declared range (SQLite keeps a NUMERIC as it comes) or as NaN.
        own = bool(position.terms) and position.terms == self.terms
        if any(
            v is not None and misfit(t.type, v, computed=t.computed, sealed=own) is not None
            for t, v in zip(self.columns, keys, strict=False)
        ):
            raise InvalidCursor(f"cursor does not fit sort {self.name!r}")
        return tuple(
            loose_number(t.type, v) if t.computed else v for t, v in zip(self.columns, keys, strict=False)
        )

    def check(self, position: Position, *, direction: str, filters: str) -> None:
        """Refuse a cursor made for another sort, direction or filters (see accept())."""
        self.accept(position, direction=direction, filters=filters)

    def check_advance(self, keys: Sequence[Any], first: Sequence[Any], *, backward: bool) -> None:
        """Refuse to go on when the row a read began with does not lie strictly past the
        position `keys` it was read from (in reading order): the seek compared another value
        than the row holds (a key bound as a type that rounds it), and the next page would
        begin at the same row again: an endless walk. Python's order decides only where it is
        the engines' (numbers, times, bytes); text and anything else is left to the database."""
        reached = 0
        for t, at, row in zip(self.columns, keys, first, strict=False):
            reached += 1
            if at is None or row is None:
                if at is None and row is None:
                    continue
                return  # where NULLs go is the engine's, not Python's
            try:
                if row == at:
                    continue
                if not isinstance(row, _ORDERED) or not isinstance(at, _ORDERED) or row != row or at != at:
                    return  # a float NaN is unequal to itself, and unordered: the engine's to say
                before: bool = cast(Any, row) < at  # a TypeError for unlike types: undecided
                if before == (t.descending != backward):
                    return
            except (TypeError, ArithmeticError):  # a NaN, or values Python cannot compare
                return
            break
        # The term compared inexactly: a computed one (typed by a guess) before a column. No key
        # values in the message: a cursor is sealed so that logs do not show them.
        compared = self.columns[:reached]
        culprit = next((t for t in compared if t.computed), compared[0]).name
        raise KeysetError(
            f"sort {self.name!r}: the walk cannot advance (a read after a cursor began at a row "
            f"not past it). {culprit} is compared as another value than it is read: cast it to "
            "the type the engine returns for it."
        )

    def describe(self, i: int) -> str:
        return f"{self.columns[i].name} ({self.columns[i].type})"
