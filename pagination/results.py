"""What a walk returns: a Page (with cursors both ways), a Batch or a Range (with the cursor to resume)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Page:
    """One page of a keyset walk, in display order."""

    items: list[Any]
    next_cursor: str | None = None  # `after` cursor: set only when a next row exists
    prev_cursor: str | None = None  # `before` cursor: set only when a previous row exists
    # A `before` cursor at the first item, even on the first page: poll it to learn whether
    # rows have arrived above the page (the "N new orders" banner).
    head_cursor: str | None = field(default=None, repr=False)

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None

    @property
    def has_previous(self) -> bool:
        return self.prev_cursor is not None


@dataclass
class Batch:
    """A batch of an export walk and the `after` cursor that resumes right behind it."""

    items: list[Any]
    cursor: str | None


@dataclass(frozen=True)
class Range:
    """A range of a walk that the caller reads itself (iterate_ranges): the statement of its
    rows and the parameters to run it with, the `after` cursor that resumes right behind it,
    and how many rows the probe counted in it (rows inserted into the range since come on top)."""

    statement: Any  # a Select of the walked statement's columns, in the sort's order
    params: dict[str, Any]
    cursor: str | None
    rows: int
