"""Which columns are unique in a statement's rows: a table's keys, a subquery's (its table's key
it selects, its GROUP BY terms, all the columns of a DISTINCT or UNION, a UNION ALL's branch
constant with each branch's key), a join's (each side's, unless joined by the whole of its
unique key), followed by lineage (lineage.py), never by name.
"""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy import Column as TableColumn
from sqlalchemy import Index, Table, UniqueConstraint
from sqlalchemy.sql import operators, visitors
from sqlalchemy.sql.elements import (
    BinaryExpression,
    BindParameter,
    ClauseList,
    ColumnClause,
    ColumnElement,
    Label,
)
from sqlalchemy.sql.selectable import (
    AliasedReturnsRows,
    CompoundSelect,
    FromClause,
    Join,
    Select,
)

from .lineage import base, is_aggregate, leaves, nullable, select_branches, unlabel

_MAX_KEY_COMBINATIONS = 32


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
    branches = list(select_branches(compound))
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
