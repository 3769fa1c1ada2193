"""What cannot be paged exactly, said in words with the SQL and what to write instead: a
statement that is not a select(), a sort that may tie in its rows, a SELECT DISTINCT the key
terms would add rows to, a window function or a foreign table in a term, an eager load a LIMIT
would cut. Each `..._problem` returns the reason or None; planning.py asks them once per shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Select
from sqlalchemy.sql.elements import ColumnClause, Over
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import CTE, CompoundSelect, Exists, FromClause, Join, ScalarSelect

from .errors import KeysetError
from .lineage import base, key_columns, leaves, same_term, unlabel
from .sort import Keyset
from .uniqueness import equalities, final_froms, statement_keys


def problem(stmt: Select[Any], sort: Keyset, dialect: Any, *, appended: tuple[int, ...]) -> str | None:
    """Why `stmt` cannot be paged by `sort` on this engine (what to write instead), or None: every
    refusal in one place, in the order a reader would meet them. `appended`: the terms the
    statement does not select (planning.py's layout), which a DISTINCT would then change."""
    if stmt._limit_clause is not None or stmt._offset_clause is not None or stmt._fetch_clause is not None:
        return (
            "the statement already has LIMIT/OFFSET: paging sets its own LIMIT, and an OFFSET would "
            "drop rows on every page; remove .limit()/.offset() (page size is paginate's limit), or "
            "select from it as a subquery to page a fixed slice"
        )
    if stmt._distinct_on:
        return "DISTINCT ON picks rows by its own ORDER BY: page a subquery of it instead"
    found = eager_problem(stmt) or term_problem(stmt, sort)
    if found is not None:
        return found
    try:
        sort.check_dialect(dialect)
    except KeysetError as err:
        return str(err)
    found = distinct_problem(stmt, sort, appended)
    if found is not None:
        return found
    found = unique_problem(stmt, sort, where=False)
    if found is not None and stmt._where_criteria and len(stmt.get_final_froms()) > 1:
        # FROMs joined only by the WHERE's equalities (Book.author_id == Author.id).
        found = unique_problem(stmt, sort, where=True)
    return found


def refuse(stmt: Any, dialect: Any, problem: str) -> KeysetError:
    """A KeysetError saying what is wrong and what to write instead, with the SQL."""
    try:
        sql = str(stmt.compile(dialect=dialect))
    except Exception:  # the message must not fail for want of SQL
        sql = repr(stmt)
    return KeysetError(f"{problem}\nSQL: {sql}")


def unique_problem(stmt: Select[Any], sort: Keyset, *, where: bool) -> str | None:
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
    # Named, not printed: a subquery's or a join's SQL follows the message anyway.
    shown = ", ".join(sorted({str(getattr(leaf, "name", None) or leaf) for f in froms for leaf in leaves(f)}))
    return (
        f"sort {sort.name!r} is not unique in this statement's rows (from {shown or 'its columns'}): "
        "rows could tie and be skipped or repeated. End it in a unique key of each table, alias "
        "or subquery it reads (pagination/README.md, 'What it refuses')."
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


def distinct_problem(stmt: Select[Any], sort: Keyset, missing: tuple[int, ...]) -> str | None:
    """A SELECT DISTINCT keeps its rows only if the key terms appended to it add none: when each
    is one of the columns it selects already (inside an entity or a Bundle, whose values are read
    from columns of their own), or when those columns hold a key of its rows without DISTINCT
    (which is then a no-op)."""
    if not (stmt._distinct and missing) or stmt._distinct_on:
        return None
    columns = list(stmt.selected_columns)  # an entity's and a Bundle's columns too
    missing = tuple(i for i in missing if not any(same_term(c, sort.columns[i].expr) for c in columns))
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


def not_a_select(stmt: Any) -> str:
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


def _own_parts(expr: Any) -> Iterator[Any]:
    """The elements of a term, not those inside a subquery of it (which has FROMs of its own)."""
    yield expr
    if isinstance(expr, (ScalarSelect, Select, Exists)):
        return
    for child in expr.get_children():
        yield from _own_parts(child)


def term_problem(stmt: Select[Any], sort: Keyset) -> str | None:
    """A term no seek can compare: a window function (it is computed after WHERE and HAVING,
    where the seek goes), or a column of a FROM the statement does not read (SQL would add it
    as a cross join, or fail naming the table)."""
    froms = {base(leaf) for f in stmt.get_final_froms() for leaf in leaves(f)}
    for t in sort.columns:
        parts = list(_own_parts(t.expr))
        scalar = next(
            (
                p
                for p in parts
                if isinstance(p, FunctionElement)
                and p.name.lower() in ("max", "min")
                and len(p.clauses.clauses) > 1
            ),
            None,
        )
        if scalar is not None:
            return (
                f"sort {sort.name!r}: {scalar.name}() of {len(scalar.clauses.clauses)} arguments in "
                f"{t.name} is SQLite's scalar function, not an aggregate (PostgreSQL and MariaDB "
                "have none): sort by func.max()/min() of one column over a GROUP BY, or by a "
                "column holding the value."
            )
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


def eager_problem(stmt: Select[Any]) -> str | None:
    """contains_eager() of a collection reads the caller's own join: a page's LIMIT would count
    joined rows, not parents, and the ORM folds them into parents with partial collections. A
    SELECT DISTINCT with joinedload() of a collection: the ORM moves the DISTINCT into a subquery
    of its own, joined to the collection outside it, where no seek can reach (refused before, as
    a sort reading a table the statement did not select from)."""
    for option in stmt._with_options:
        for load in getattr(option, "context", ()):
            eager = "eager_from_alias" in getattr(load, "local_opts", {})
            inner = bool(getattr(load, "local_opts", {}).get("innerjoin"))
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
            if joined and inner and collection:
                return (
                    f"joinedload(..., innerjoin=True) of a collection ({collection[-1]}): the ORM "
                    "limits the parents in a subquery and inner-joins the collection outside it, "
                    "so a page would drop its parents without children and come back short. Load "
                    "it with joinedload() or selectinload() and filter the parents by "
                    ".where(Parent.children.any())."
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
