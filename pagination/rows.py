"""The rows a read returned (`Rows`): the caller's items, cut from what paging appended, and the
key values of the rows that become cursors. `execute` runs a read and folds a joined eager
load's repeated parents, as the ORM asks."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import Select
from sqlalchemy.engine import IteratorResult
from sqlalchemy.engine.result import SimpleResultMetaData

from .values import to_cursor


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

    def __init__(self, rows: list[Any], n_items: int, keyed: tuple[tuple[Any, int], ...], metadata: Any):
        """`n_items`: the caller's columns in a row; `keyed`: per sort term, its type and where
        its key value is in a row (the plan's layout, statement.py)."""
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
        # appended (key columns, the cursor-row flag), cut by position.
        return list(IteratorResult(_first_columns(self._metadata, n), (row[:n] for row in self.rows)).all())

    def keys(self, index: int) -> tuple[Any, ...]:
        row = self.rows[index]
        return tuple(to_cursor(type_, row[i]) for type_, i in self._keyed)


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
