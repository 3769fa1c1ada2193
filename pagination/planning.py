"""What a statement's shape allows, worked out once per shape: `plan()` checks a statement and
a sort (refusals.py says, in words with the SQL, what cannot be paged exactly), works out which
terms may be NULL in its rows (lineage.py) and where each key term sits in them, and remembers
the `Plan` (statement.py) or the refusal per shape, engine and seek form in `PLANS`.

NULLs: a nullable term without an explicit ``.nulls_first()``/``.nulls_last()`` is ordered the
engine's way (PostgreSQL: NULL above every value, so last ascending and first descending;
SQLite and MariaDB: below, so first ascending and last descending), so a walk equals the
unpaged query on the engine it runs on; the Plan compares it with the NULLs on their side.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from sqlalchemy import Select
from sqlalchemy.sql.cache_key import NO_CACHE
from sqlalchemy.sql.elements import BindParameter, ColumnClause
from sqlalchemy.sql.selectable import Join
from sqlalchemy.sql.visitors import anon_map

from .errors import KeysetError
from .lineage import nullable, optional_tables, same_term
from .refusals import not_a_select, refuse
from .refusals import problem as problem_of
from .sort import SEEK_FORMS, Keyset, SeekForm
from .statement import Plan
from .values import carrier

_MAX_PLANS = 256
# Where each engine's ORDER BY puts NULLs: True, above every value (last ascending).
NULLS_HIGH = {
    "postgresql": True,
    "oracle": True,
    "sqlite": False,
    "mysql": False,
    "mariadb": False,
    "mssql": False,
}


def _joined(stmt: Select[Any]) -> bool:
    return bool(stmt._setup_joins) or any(isinstance(f, Join) for f in stmt._from_obj)


def _nullable(stmt: Select[Any], sort: Keyset) -> tuple[bool, ...]:
    """May each term be NULL in this statement's rows? (A first term read as two ranges is
    compared within its values only.) Without GROUP BY an aggregate's one row may aggregate no
    rows: then it is NULL."""
    optional = optional_tables(stmt) if _joined(stmt) else set()
    two_reads = sort.nulls_last is not None
    empty = not stmt._group_by_clauses
    return tuple(
        not (i == 0 and two_reads) and nullable(t.expr, optional, empty=empty)
        for i, t in enumerate(sort.columns)
    )


def _null_problem(sort: Keyset, may_be_null: tuple[bool, ...], dialect: str) -> str | None:
    """A nullable term ordered the engine's way on an engine whose NULL placement is unknown."""
    for t, may in zip(sort.columns, may_be_null, strict=True):
        if may and t.nulls is None and NULLS_HIGH.get(dialect) is None:
            return (
                f"sort {sort.name!r}: {t.name} may be NULL, and where {dialect} puts NULLs "
                "is not known here: place them with .nulls_first() or .nulls_last()"
            )
    return None


def _layout(
    stmt: Select[Any], sort: Keyset, plain_rows: bool, dialect: Any
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(the caller's columns in a row, where each key term is in a row, the terms appended).
    A term a driver would carry inexactly (values.carrier) is appended even when selected: its
    key is read as the engine holds it, the caller's column as the caller typed it."""
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
    found = [
        None
        if carrier(t.type, dialect) is not None
        else next((j for j, c in enumerate(selected) if same_term(c, t.expr)), None)
        for t in sort.columns
    ]
    missing = tuple(i for i, j in enumerate(found) if j is None)
    appended = {i: n + k for k, i in enumerate(missing)}
    return n, tuple(j if j is not None else appended[i] for i, j in enumerate(found)), missing


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


def shape(stmt: Select[Any], sort: Keyset) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    """The shape of `stmt` paged by `sort`, and its bound values exactly, from one walk.

    The shape: equal for statements that differ only in the values of their WHERE and HAVING (a
    filter made anew per request); None where SQLAlchemy cannot key the statement (an element
    without a cache key): it is then analysed per call. SQLAlchemy's cache key, taken over the
    statement and the sort's terms in one pass, so an anonymous alias in both is the same alias.
    A cache key leaves every bound value out, but the analysis reads some: whether a value is
    NULL (``coalesce(x, :v)``), which constant a UNION ALL branch selects. Those outside the
    WHERE and HAVING stay in the shape; the sort itself by identity (a plan holds its terms, and
    a refusal names it).

    The exact values (None when there is no such key): within one shape, statements with the
    same exact values are the same statement, so a read built for one may run for the other
    (Plan.statement's `exact`). Exactly: each value's type, the value and its repr(), so values
    equal to Python but not to the database (Decimal("1.0") and Decimal("1.00"), the same
    instant in two time zones) are told apart. None (built per call) for a value computed at
    execution (a bind's callable), an unhashable one (a list), or a statement with execution
    options (not in SQLAlchemy's key).

    Kept per statement object and sort when its values are exact (a statement the caller builds
    once and pages again, as SQLAlchemy keeps its own cache key on it: statements are immutable);
    a statement with a value computed at execution, or unhashable, is walked on every call."""
    kept = _SHAPES.get(stmt)
    if kept is not None and kept[0] is sort:
        return kept[1]
    found = _shape(stmt, sort)
    if found[1] is not None:
        _SHAPES[stmt] = (sort, found)
    return found


_Shape = tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]
_SHAPES: weakref.WeakKeyDictionary[Any, tuple[Keyset, _Shape]] = weakref.WeakKeyDictionary()


def _shape(stmt: Select[Any], sort: Keyset) -> tuple[tuple[Any, ...] | None, tuple[Any, ...] | None]:
    anon = anon_map()
    bound: list[BindParameter[Any]] = []
    key = stmt._gen_cache_key(anon, bound)
    terms = tuple(t.expr._gen_cache_key(anon, bound) for t in sort.columns)
    filtering: list[BindParameter[Any]] = []
    filters = stmt._where_criteria + stmt._having_criteria
    for criterion in filters:
        criterion._gen_cache_key(anon_map(), filtering)
    if NO_CACHE in anon:
        return None, None
    skipped = {id(b) for b in filtering}
    values: tuple[Any, ...] = tuple(
        None if id(b) in skipped else (b.callable is not None, b.value) for b in bound
    )
    try:
        hash(values)
    except TypeError:  # an unhashable value (a list) outside the filters: by its text
        values = (repr(values),)
    exact: tuple[Any, ...] | None = None
    if not stmt._execution_options and all(b.callable is None for b in bound):
        exact = tuple((type(b.value), b.value, repr(b.value)) for b in bound)
        try:
            hash(exact)
        except TypeError:
            exact = None
    return (id(sort), key, terms, values), exact


def plan(stmt: Any, sort: Keyset, dialect: Any, *, plain_rows: bool, seek: SeekForm | None = None) -> Plan:
    """The plan of `stmt`'s shape for this sort, engine and seek form: checked (KeysetError with
    the SQL and what to write instead) and worked out once per shape, not per page."""
    return planned(stmt, sort, dialect, plain_rows=plain_rows, seek=seek)[0]


def planned(
    stmt: Any, sort: Keyset, dialect: Any, *, plain_rows: bool, seek: SeekForm | None = None
) -> tuple[Plan, tuple[Any, ...] | None]:
    """`plan()`, and the statement's exact bound values (`shape()`): the key under which the
    plan keeps the reads it built for this statement (Plan.statement's `exact`)."""
    if not isinstance(stmt, Select):
        raise refuse(stmt, dialect, not_a_select(stmt))
    form = seek or "auto"
    if form not in SEEK_FORMS:
        raise KeysetError(f'seek must be "auto" or "bounded", not {form!r}')
    found, exact = shape(stmt, sort)
    key = None if found is None else (dialect.name, plain_rows, form, *found)
    verdict = PLANS.get(key, sort) if key is not None else None
    if verdict is None:
        verdict = _verdict(stmt, sort, dialect, plain_rows, form)
        if key is not None:
            PLANS.put(key, sort, verdict)
    if isinstance(verdict, str):
        raise refuse(stmt, dialect, verdict)
    return verdict, exact


def _verdict(stmt: Select[Any], sort: Keyset, dialect: Any, plain_rows: bool, form: SeekForm) -> Plan | str:
    """The Plan of a statement's shape, or why it cannot be paged (what to write instead): the
    shape worked out first (which terms may be NULL, where each sits in a row), then every
    refusal in one call (refusals.py), then the Plan."""
    try:
        may_be_null = _nullable(stmt, sort)
        layout = _layout(stmt, sort, plain_rows, dialect)
        problem = problem_of(stmt, sort, dialect, appended=layout[2]) or _null_problem(
            sort, may_be_null, dialect.name
        )
    except KeysetError as err:
        return str(err)
    if problem is not None:
        return problem
    high = NULLS_HIGH.get(dialect.name)
    # Reading forward, do a term's NULLs come after its values?
    after = tuple((t.nulls == "last") if t.nulls else (bool(high) != t.descending) for t in sort.columns)
    # MariaDB (10.11) drops rows from a SELECT DISTINCT over a derived table, a view or a CTE
    # ordered by a column and then an expression it selects: (0, 'a') and (0, 'id') ordered
    # by `count, length(info)` came back as one row, whatever the LIMIT. Ordered by the
    # select item's position or label they do not, so there every term that is not a
    # column is ordered by its item (`Plan._item_refs`; a DISTINCT selects every term it
    # orders by). tests/test_library_statements.py has the cases.
    distinct = dialect.name in ("mysql", "mariadb") and bool(stmt._distinct)
    by_item = tuple(distinct and not isinstance(t.expr, ColumnClause) for t in sort.columns)
    return Plan(
        sort,
        dialect,
        seek=form,
        nullable=may_be_null,
        nulls_after=after,
        by_item=by_item,
        layout=layout,
    )
