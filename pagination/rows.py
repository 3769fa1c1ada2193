"""The rows a read returned (`Rows`): the caller's items, cut from what paging appended, and the
key values of the rows that become cursors. `execute` runs a read and folds a joined eager
load's repeated parents, as the ORM asks."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import Select
from sqlalchemy.engine.result import SimpleResultMetaData
from sqlalchemy.engine.row import Row

from .values import to_cursor


def execute(executor: Any, stmt: Select[Any], params: dict[str, Any]) -> tuple[list[Any], Any]:
    result = executor.execute(stmt, params)
    # A joined eager load of a collection repeats its parent per child row: the ORM asks for
    # unique() to fold them back (LIMIT already counts parents: the ORM nests it).
    context = getattr(result, "context", None)
    if getattr(context, "loaders_require_uniquing", False):
        result = result.unique()
    return result.all(), (result._metadata, _origin(result._metadata, context))


def _origin(metadata: Any, context: Any) -> tuple[Any, ...]:
    """What a result's metadata is made from, to keep what is worked out of it (`_first_columns_of`):
    a statement run from SQLAlchemy's compiled cache gets the compiled form's metadata, adapted
    to the statement run when another object was compiled (a new object each time, made from
    those two alone); any other result, its own metadata."""
    compiled = getattr(context, "compiled", None)
    cached = getattr(compiled, "_cached_metadata", None)
    if cached is None or context.execution_options.get("driver_column_names"):
        return (metadata,)
    return (cached, context.invoked_statement)


class Rows:
    """The rows a read returned: items for the caller, key values on demand (only for the rows
    that become cursors, the first and the last, not for every row of an export batch)."""

    def __init__(self, rows: list[Any], n_items: int, keyed: tuple[tuple[Any, int], ...], metadata: Any):
        """`n_items`: the caller's columns in a row; `keyed`: per sort term, its type and where
        its key value is in a row (the plan's layout, statement.py); `metadata`: execute()'s, the
        rows' result metadata and what it was made from."""
        self.rows, self._n, self._keyed, self._metadata = rows, n_items, keyed, metadata

    def __len__(self) -> int:
        return len(self.rows)

    def items(self) -> list[Any]:
        if not self.rows:
            return []
        n = self._n
        if n == 1:  # one entity or column: the item is that value
            return [row[0] for row in self.rows]
        if all(len(row) == n for row in self.rows):
            return list(self.rows)
        # Several columns: Rows as the unpaged statement gives them, without what paging
        # appended (key columns, the cursor-row flag), cut by position. Made as SQLAlchemy's
        # results make theirs (Row(metadata, processors, key_to_index, values); the values are
        # already converted), on metadata worked out once per statement's result metadata.
        metadata, origin = self._metadata
        first = _first_columns_of(metadata, origin, n)
        key_to_index = first._key_to_index
        return [Row(first, None, key_to_index, row[:n]) for row in self.rows]

    def keys(self, index: int) -> tuple[Any, ...]:
        row = self.rows[index]
        return tuple(to_cursor(type_, row[i]) for type_, i in self._keyed)


# A statement run again (a kept read, its compiled form cached) gives the same metadata, or one
# made from the same two objects (`_origin`): its first columns' metadata is kept by them, at most
# _KEPT, the objects held so that their ids stay their own. Made afresh per page, with the rows
# put through a Result, this was a tenth of a deep page's read.
_KEPT = 256
_first: dict[tuple[Any, ...], tuple[tuple[Any, ...], SimpleResultMetaData]] = {}


def _first_columns_of(metadata: Any, origin: tuple[Any, ...], n: int) -> SimpleResultMetaData:
    key = (*map(id, origin), n)
    kept = _first.get(key)
    if kept is not None and all(a is b for a, b in zip(kept[0], origin, strict=True)):
        return kept[1]
    made = _first_columns(metadata, n)
    if len(_first) >= _KEPT:
        _first.clear()
    _first[key] = (origin, made)
    return made


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
