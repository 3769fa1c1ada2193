"""What a key term is made of: can it be NULL, and which columns of a FROM are unique.

A term may be a column of a table, of an alias, of a subquery or CTE (whose column stands for
an expression of the inner statement, or one per branch of a UNION), or an expression over such
columns. Both questions are answered by following each column back to what it is made of, not
by its name: names collide (two aliases of one table both have an ``id``), lineage does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import Column as TableColumn
from sqlalchemy import Enum, Index, Integer, Numeric, String, Table, UniqueConstraint
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    BooleanClauseList,
    Case,
    ClauseList,
    ColumnClause,
    ColumnElement,
    False_,
    Grouping,
    Label,
    True_,
    TypeCoerce,
    UnaryExpression,
)
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import (
    AliasedReturnsRows,
    CompoundSelect,
    FromClause,
    Join,
    ScalarSelect,
    Select,
)
from sqlalchemy.sql.sqltypes import NULLTYPE

# Functions that aggregate over a group: a key made of one is compared in HAVING, not WHERE.
AGGREGATES = frozenset(
    {
        "count",
        "sum",
        "min",
        "max",
        "avg",
        "array_agg",
        "string_agg",
        "group_concat",
        "bool_and",
        "bool_or",
    }
)
# Functions that yield a value (not NULL) on every engine whenever all their arguments do; any
# other function is taken as possibly NULL (nullif, JSON functions, date parsing, ...).
_NOT_NULL_FUNCTIONS = frozenset(
    {
        "lower",
        "upper",
        "length",
        "char_length",
        "character_length",
        "octet_length",
        "abs",
        "sign",
        "round",
        "floor",
        "ceil",
        "ceiling",
        "trim",
        "ltrim",
        "rtrim",
        "concat",
        "replace",
        "greatest",
        "least",
    }
)
# Aggregates that may be NULL for a group of values (string_agg/group_concat of no non-NULL
# value is NULL; so is any aggregate of no rows, see `empty`).
_NULL_AGGREGATES = frozenset({"string_agg", "group_concat", "bool_and", "bool_or"})
# Operators yielding a value whenever both sides do. Not division or modulo (by zero: NULL on
# SQLite and MariaDB), nor JSON extraction (a missing key or a JSON null is NULL).
_NOT_NULL_OPERATORS = frozenset(
    {
        operators.add,
        operators.sub,
        operators.mul,
        operators.concat_op,
        operators.eq,
        operators.ne,
        operators.lt,
        operators.le,
        operators.gt,
        operators.ge,
        operators.and_,
        operators.or_,
    }
)
_ARITHMETIC = frozenset({operators.add, operators.sub, operators.mul})
_NEVER_NULL_OPERATORS = frozenset(
    {operators.is_, operators.is_not, operators.is_distinct_from, operators.is_not_distinct_from}
)
_MAX_KEY_COMBINATIONS = 32


def base(element: Any) -> Any:
    """The element without the ORM's annotations (an aliased entity's column is an annotated
    copy of the alias's column)."""
    deannotate = getattr(element, "_deannotate", None)
    return deannotate() if deannotate is not None else element


def is_aggregate(expr: Any) -> bool:
    """Does `expr` aggregate over the statement's groups? (Not when the aggregate is inside a
    scalar subquery: that one aggregates its own rows.)"""
    if isinstance(expr, FunctionElement) and expr.name.lower() in AGGREGATES:
        return True
    if isinstance(expr, (ScalarSelect, Select)):
        return False
    return any(is_aggregate(child) for child in expr.get_children())


def optional_tables(stmt: Select[Any]) -> set[Any]:
    """FROMs on the optional side of an outer join: their columns are NULL where nothing matched."""
    optional: set[Any] = set()

    def visit(node: Any, maybe_null: bool) -> None:
        if isinstance(node, Join):
            visit(node.left, maybe_null or node.full)
            visit(node.right, maybe_null or node.isouter or node.full)
        elif maybe_null:
            optional.add(node)

    for from_ in stmt.get_final_froms():
        visit(from_, False)
    return optional


def _branches(stmt: Any) -> Iterator[Select[Any]]:
    """The SELECTs of a statement: itself, or every branch of a (nested) UNION."""
    if isinstance(stmt, CompoundSelect):
        for select in stmt.selects:
            yield from _branches(select)
    elif isinstance(stmt, Select):
        yield stmt


def sources(column: ColumnClause[Any]) -> list[tuple[ColumnElement[Any], Select[Any]]] | None:
    """For a column of a subquery or CTE: the expression it stands for in each branch of the
    inner statement, with that branch. None for any other column."""
    from_ = base(column.table)
    if not isinstance(from_, AliasedReturnsRows) or not isinstance(from_.element, (Select, CompoundSelect)):
        return None
    column = base(column)
    position = next((i for i, c in enumerate(from_.c) if c is column), None)
    if position is None:
        return None
    found = []
    for select in _branches(from_.element):
        selected = list(select.selected_columns)
        if position < len(selected):
            found.append((selected[position], select))
    return found


def nullable(expr: Any, optional: Any = frozenset(), *, empty: bool = False) -> bool:
    """Can `expr` be NULL? NOT NULL only when proven: a NOT NULL column (not on the `optional`
    side of an outer join), a non-NULL constant, or an operator or function that yields a value
    whenever its arguments do (`_NOT_NULL_OPERATORS`, `_NOT_NULL_FUNCTIONS`) over proven
    arguments; coalesce() when one argument is proven, count() and IS [NOT] always. Everything
    else may be NULL: JSON extraction, division and modulo (by zero: NULL on SQLite and MariaDB),
    NULLIF, CASE without ELSE, casts (MariaDB's CAST yields NULL for what it cannot convert),
    other functions, SQL text (``literal_column``). Followed through labels, scalar subqueries
    and the columns of subqueries, CTEs and unions. With `empty`, aggregates may see no rows (a
    scalar subquery, a statement without GROUP BY): all but count() are then NULL."""
    if isinstance(expr, (Label, Grouping)):
        return nullable(expr.element, optional, empty=empty)
    if isinstance(expr, TypeCoerce):  # no SQL of its own
        return nullable(expr.clause, optional, empty=empty)
    if isinstance(expr, (True_, False_)):
        return False
    if isinstance(expr, BindParameter):
        return expr.callable is not None or expr.value is None
    if isinstance(expr, FunctionElement):
        name = expr.name.lower()
        if name == "count":
            return False
        if empty and name in AGGREGATES:
            return True
        args = list(expr.clauses)
        if name == "coalesce":
            return all(nullable(arg, optional, empty=empty) for arg in args)
        if name in _NOT_NULL_FUNCTIONS or (name in AGGREGATES and name not in _NULL_AGGREGATES):
            return any(nullable(arg, optional, empty=empty) for arg in args)
        return True
    if isinstance(expr, ScalarSelect):
        # One row always when it aggregates without GROUP BY; otherwise it may find none.
        inner = expr.element
        if isinstance(inner, Select) and not inner._group_by_clauses:
            (column,) = inner.selected_columns
            if is_aggregate(column):
                return nullable(column, optional_tables(inner), empty=True)
        return True
    if isinstance(expr, Case):
        results = [result for _, result in expr.whens]
        return expr.else_ is None or any(nullable(r, optional, empty=empty) for r in [*results, expr.else_])
    if isinstance(expr, BinaryExpression):
        if expr.operator in _NEVER_NULL_OPERATORS:
            return False
        if expr.operator not in _NOT_NULL_OPERATORS:
            return True
        if expr.operator in _ARITHMETIC and not isinstance(expr.type, (Integer, Numeric)):
            return True  # date arithmetic: MariaDB yields NULL out of range
        return nullable(expr.left, optional, empty=empty) or nullable(expr.right, optional, empty=empty)
    if isinstance(expr, UnaryExpression):
        if expr.modifier is None and expr.operator in (operators.neg, operators.inv):
            return nullable(expr.element, optional, empty=empty)
        return True
    if isinstance(expr, BooleanClauseList):  # AND/OR of values are values
        return any(nullable(c, optional, empty=empty) for c in expr.clauses)
    if isinstance(expr, ColumnClause):
        table = getattr(expr, "table", None)
        if table is None:
            return True  # SQL text, or a name the library cannot follow
        if table in optional or base(table) in optional:
            return True
        found = sources(expr)
        if found is not None:
            return any(nullable(inner, optional_tables(select)) for inner, select in found)
        if isinstance(base(expr), TableColumn):
            return bool(expr.nullable)
        # A column of an alias of a table (its copy of `nullable`); of anything else: unknown.
        return bool(getattr(expr, "nullable", True))
    return True


def table_keys(table: Any) -> list[set[Any]]:
    """Column sets that no two rows of a table share: primary key, unique constraints/indexes."""
    keys = [set(table.primary_key)] if len(table.primary_key) else []
    for constraint in table.constraints:
        if isinstance(constraint, UniqueConstraint):
            keys.append(set(constraint.columns))
    for index in table.indexes:
        if (
            isinstance(index, Index)
            and index.unique
            and all(isinstance(e, TableColumn) for e in index.expressions)
        ):
            keys.append(set(index.expressions))
    keys += [{c} for c in table.columns if c.unique]
    return [k for k in keys if k and not any(c.nullable for c in k)]


def unique_keys(from_: Any) -> list[set[Any]]:
    """Column sets of `from_` (a table, an alias, a subquery, a CTE) that no two of its rows share."""
    from_ = base(from_)
    if isinstance(from_, Table):
        return table_keys(from_)
    if not isinstance(from_, AliasedReturnsRows):
        return []
    inner = from_.element
    columns = list(from_.c)
    if isinstance(inner, FromClause):  # an alias of a table (or of an alias)
        mapped = [{from_.corresponding_column(c) for c in key} for key in unique_keys(inner)]
        return [key for key in mapped if None not in key]
    if getattr(from_, "recursive", False):
        # Its rows come from iterations the library cannot follow; but a UNION (not UNION ALL)
        # drops repeats, so all its columns together are unique.
        distinct = isinstance(inner, CompoundSelect) and not str(inner.keyword).upper().endswith("ALL")
        return [set(columns)] if distinct and not any(nullable(c) for c in columns) else []
    positions: list[set[int]] = []
    if isinstance(inner, Select):
        positions = select_keys(inner)
    elif isinstance(inner, CompoundSelect):
        positions = _compound_keys(inner)
    keys = [{columns[i] for i in key} for key in positions if all(i < len(columns) for i in key)]
    return [key for key in keys if not any(nullable(c) for c in key)]


def _position(selected: list[Any], expr: Any) -> int | None:
    """Where `expr` is among a statement's selected columns (by lineage or structure)."""
    target = base(expr)
    for i, column in enumerate(selected):
        column = base(column)
        inner = base(column.element) if isinstance(column, Label) else column  # an ORM column's label
        if inner is target or column is target:
            return i
    for i, column in enumerate(selected):
        column = base(column)
        inner = base(column.element) if isinstance(column, Label) else column
        if isinstance(target, ColumnClause) and not isinstance(target, TableColumn):
            continue
        if not isinstance(target, ColumnClause) and inner.compare(target):
            return i
    return None


def leaves(from_: Any) -> Iterator[Any]:
    if isinstance(from_, Join):
        yield from leaves(from_.left)
        yield from leaves(from_.right)
    else:
        yield from_


def select_keys(select: Select[Any]) -> list[set[int]]:
    """Positions of `select`'s columns that no two of its rows share."""
    selected = list(select.selected_columns)
    everything = set(range(len(selected)))
    keys: list[set[int]] = []
    if select._distinct and not select._distinct_on:
        keys.append(everything)
    if select._distinct_on:  # one row per value of its DISTINCT ON terms
        on = [_position(selected, d) for d in select._distinct_on]
        if None not in on:
            keys.append({i for i in on if i is not None})
    if select._group_by_clauses:
        group = [_position(selected, g) for g in group_terms(select)]
        if None not in group:
            keys.append({i for i in group if i is not None})
        return keys
    if any(is_aggregate(c) for c in selected):
        return [everything]  # aggregates without GROUP BY: one row
    per_leaf: list[list[set[int]]] = []
    for leaf in (leaf for f in select.get_final_froms() for leaf in leaves(f)):
        found = []
        for key in unique_keys(leaf):
            where = [_position(selected, c) for c in key]
            if None not in where:
                found.append({i for i in where if i is not None})
        if not found:
            return keys
        per_leaf.append(found)
    # Every row of a join is one combination of a row of each FROM: a key of each identifies it.
    for combination in itertools.islice(itertools.product(*per_leaf), _MAX_KEY_COMBINATIONS):
        keys.append(set().union(*combination))
    return keys


def _literal(expr: Any) -> Any:
    expr = expr.element if isinstance(expr, Label) else expr
    if isinstance(expr, BindParameter) and expr.callable is None:
        return ("value", expr.value)
    return None


def _compound_keys(compound: CompoundSelect[Any]) -> list[set[int]]:
    """Keys of a UNION/INTERSECT/EXCEPT: all its columns when it is DISTINCT; a key of every
    branch when a column holds a different constant in each branch (UNION ALL); a key of the first
    branch for INTERSECT/EXCEPT, whose rows are some of the first branch's."""
    keyword = str(compound.keyword).upper()
    branches = list(_branches(compound))
    if not branches:
        return []
    width = len(list(branches[0].selected_columns))
    keys: list[set[int]] = []
    if not keyword.endswith("ALL"):
        keys.append(set(range(width)))
    if "UNION" not in keyword:
        keys += select_keys(branches[0])
        return keys
    per_branch = [select_keys(b) for b in branches]
    for position in range(width):
        constants = [_literal(list(b.selected_columns)[position]) for b in branches]
        if None in constants or len(set(map(repr, constants))) != len(constants):
            continue
        # This column tells the branches apart: a key of each branch, plus it, is a key.
        for combination in itertools.islice(itertools.product(*per_branch), _MAX_KEY_COMBINATIONS):
            keys.append({position}.union(*combination))
    return keys


def flatten(terms: Iterable[Any]) -> Iterator[Any]:
    """Key terms, with a ``Bundle`` given as a term expanded into its columns."""
    for term in terms:
        element = term.__clause_element__() if hasattr(term, "__clause_element__") else term
        if isinstance(element, ClauseList) and not isinstance(element, ColumnElement):
            yield from element.clauses
        else:
            yield term


def equalities(onclause: Any) -> list[tuple[Any, Any]]:
    """The ``a = b`` pairs an ON clause requires (its top-level AND terms)."""
    pairs = []
    is_and = getattr(onclause, "operator", None) is operators.and_ and hasattr(onclause, "clauses")
    for clause in onclause.clauses if is_and else [onclause]:
        if isinstance(clause, BinaryExpression) and clause.operator is operators.eq:
            pairs.append((base(clause.left), base(clause.right)))
    return pairs


def _tables_of(expr: Any) -> set[Any]:
    return {
        base(c.table) for c in visitors.iterate(expr) if isinstance(c, ColumnClause) and c.table is not None
    }


def _covered(key: set[Any], pairs: list[tuple[Any, Any]], other: set[Any]) -> bool:
    """Is every column of `key` required equal to something of the `other` side only (or a constant)?"""
    for column in key:
        if not any(
            (a is column and _tables_of(b) <= other) or (b is column and _tables_of(a) <= other)
            for a, b in pairs
        ):
            return False
    return True


def from_keys(from_: Any) -> list[set[Any]]:
    """Column sets no two rows of a FROM (a join too) share. A row of a join is a pair of rows of
    its sides, so a key of each side together is a key; where the ON clause matches a whole key
    of one side, each row of the other side meets at most one of its rows, and that other side's
    key alone is one (its key must not come from an optional side, which is NULL where unmatched)."""
    if not isinstance(from_, Join):
        return unique_keys(from_)
    left, right = from_keys(from_.left), from_keys(from_.right)
    keys = [lk | rk for lk, rk in itertools.islice(itertools.product(left, right), _MAX_KEY_COMBINATIONS)]
    pairs = equalities(from_.onclause)
    left_tables = {base(t) for t in leaves(from_.left)}
    right_tables = {base(t) for t in leaves(from_.right)}
    if not from_.full and any(_covered(rk, pairs, left_tables) for rk in right):
        keys += left  # many-to-one: one right row at most per left row
    if not (from_.full or from_.isouter) and any(_covered(lk, pairs, right_tables) for lk in left):
        keys += right
    return keys


def final_froms(stmt: Select[Any]) -> list[Any]:
    """The statement's FROMs. An ORM join through a relationship's `secondary` table makes a new
    anonymous alias of it each time they are worked out: compare columns of one call only."""
    if stmt._with_options:  # a joined eager load's join repeats no row: the ORM folds it back
        stmt = stmt._generate()
        stmt._with_options = ()
    return list(stmt.get_final_froms())


def statement_keys(
    stmt: Select[Any], *, where: bool = False, froms: list[Any] | None = None
) -> list[set[Any]]:
    """Sets of expressions no two rows of the statement share (as columns of its FROMs, GROUP BY
    terms or, for DISTINCT, its selected columns). With `where`, FROMs joined by the WHERE's
    equalities (``Book.author_id == Author.id``) count as joined by ON."""
    keys: list[set[Any]] = []
    if stmt._distinct and not stmt._distinct_on:
        keys += _determined({unlabel(c) for c in stmt.selected_columns})
    if stmt._group_by_clauses:
        keys += _determined({unlabel(g) for g in group_terms(stmt)})
        return keys
    froms = final_froms(stmt) if froms is None else froms
    choices = [froms]
    if where and len(froms) > 1:
        choices += _joined_by_where(froms, [p for c in stmt._where_criteria for p in equalities(c)])
    for kept in choices:
        per_from = [from_keys(f) for f in kept]
        for combination in itertools.islice(itertools.product(*per_from), _MAX_KEY_COMBINATIONS):
            keys.append(set().union(*combination))
    return keys


def group_terms(select: Select[Any]) -> list[Any]:
    """The GROUP BY terms, an entity's (``group_by(Author)``: a list of its columns) expanded."""
    found: list[Any] = []
    for term in select._group_by_clauses:
        if isinstance(term, ClauseList) and not isinstance(term, ColumnElement):
            found += list(term.clauses)
        else:
            found.append(term)
    return found


def unlabel(expr: Any) -> Any:
    """What a (possibly labelled) column stands for: never its label's name."""
    expr = base(expr)
    while isinstance(expr, Label):
        expr = base(expr.element)
    return expr


def _determined(columns: set[Any]) -> list[set[Any]]:
    """`columns` (unique together), and the same with a FROM's other columns left out where it
    holds a whole key of that FROM (a table, an alias, a subquery): the key alone decides them
    (GROUP BY author.id, author.name is unique on author.id; so is a DISTINCT of an entity's
    columns, also of an aliased entity's)."""
    found = [columns]
    froms = {c.table for c in columns if isinstance(c, ColumnClause) and c.table is not None}

    def decided(column: Any, from_: Any) -> bool:  # a column of `from_`, or an expression of only those
        if isinstance(column, ColumnClause):
            return column.table is from_
        return _tables_of(column) == {base(from_)}

    reduced = columns  # every FROM whose key is there reduced to it: entities of a join
    for from_ in froms:
        for key in unique_keys(from_):
            if key <= columns:
                found.append({c for c in columns if not decided(c, from_)} | key)
                reduced = {c for c in reduced if not decided(c, from_)} | key
    return [*found, reduced]


def _joined_by_where(froms: list[Any], pairs: list[tuple[Any, Any]]) -> list[list[Any]]:
    """Lists of the FROMs whose keys a row needs, once one (or, one at a time, several) required
    equal by `pairs` to a whole key of theirs from the others is left out (many-to-one). A FROM
    left out is decided by those kept, so two cannot each be left out for the other."""

    def decided(from_: Any, kept: list[Any]) -> bool:
        others = {base(t) for f in kept if f is not from_ for t in leaves(f)}
        return any(_covered(key, pairs, others) for key in from_keys(from_))

    choices = [[f for f in froms if f is not from_] for from_ in froms if decided(from_, froms)]
    kept = list(froms)
    for from_ in froms:
        if len(kept) > 1 and decided(from_, kept):
            kept.remove(from_)
    return [*choices, kept]


def key_columns(expr: Any) -> Any:
    """What a sort term stands for in a key: the term, or the column of ``coalesce(column, value)``
    (where the column is NULL its row is the only one of its kind: see from_keys())."""
    expr = unlabel(expr)
    if isinstance(expr, FunctionElement) and expr.name.lower() == "coalesce":
        first, *rest = list(expr.clauses)
        if all(isinstance(r, BindParameter) for r in rest):
            return base(first)
    return expr


def value_type(expr: Any) -> Any:
    """The SQL type of `expr`'s values; for a column of a UNION whose branches differ, the
    widest generic type of the branches (a String of no length, a Numeric of no precision)."""
    if not isinstance(expr, ColumnClause):
        # An expression's type is its first argument's (coalesce(String(20), String(255)) is a
        # String(20)): its values are not bounded by that length.
        if isinstance(expr.type, String) and not isinstance(expr.type, Enum) and expr.type.length:
            return String()
        return expr.type
    found = sources(expr)
    if not found or len(found) < 2:
        return expr.type
    types = [inner.type for inner, _ in found]
    if all(repr(t) == repr(types[0]) for t in types):
        return types[0]
    affinity = types[0]._type_affinity
    return affinity() if affinity is not None else NULLTYPE
