"""What a key term is made of: can it be NULL, what does it aggregate, what type does it compare as.

A term may be a column of a table, of an alias, of a subquery or CTE (whose column stands for
an expression of the inner statement, or one per branch of a UNION), or an expression over such
columns. Each question is answered by following each column back to what it is made of, not
by its name: names collide (two aliases of one table both have an ``id``), lineage does not.
Which columns are unique in a statement's rows is uniqueness.py's question, asked the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import Column as TableColumn
from sqlalchemy import Enum, Integer, Numeric, String
from sqlalchemy.sql import operators
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


def select_branches(stmt: Any) -> Iterator[Select[Any]]:
    """The SELECTs of a statement: itself, or every branch of a (nested) UNION."""
    if isinstance(stmt, CompoundSelect):
        for select in stmt.selects:
            yield from select_branches(select)
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
    for select in select_branches(from_.element):
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


def leaves(from_: Any) -> Iterator[Any]:
    if isinstance(from_, Join):
        yield from leaves(from_.left)
        yield from leaves(from_.right)
    else:
        yield from_


def flatten(terms: Iterable[Any]) -> Iterator[Any]:
    """Key terms, with a ``Bundle`` given as a term expanded into its columns."""
    for term in terms:
        element = term.__clause_element__() if hasattr(term, "__clause_element__") else term
        if isinstance(element, ClauseList) and not isinstance(element, ColumnElement):
            yield from element.clauses
        else:
            yield term


def unlabel(expr: Any) -> Any:
    """What a (possibly labelled) column stands for: never its label's name."""
    expr = base(expr)
    while isinstance(expr, Label):
        expr = base(expr.element)
    return expr


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


def same_term(column: Any, expr: Any) -> bool:
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
