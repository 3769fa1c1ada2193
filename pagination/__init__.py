"""Keyset pagination for SQLAlchemy 2 with opaque, sealed cursors. Framework-free.

Words, one per concept:
- *sort*: a named, total order of rows, an instance of the `Keyset` class (the name is kept
  for compatibility: it defines the keyset of every row);
- *keyset*: the tuple of a row's values in a sort's terms (``Position.keys`` in a cursor);
- *position*: a keyset and a direction (`after`/`before`), bound to a sort and its filters;
- *cursor*: a position sealed into an opaque string for clients.

Modules, one job each: `sort` (the Keyset class and the seek SQL), `lineage` (what a term is
made of: nullability, unique keys), `values` (key values between rows, cursors and engines),
`cursor` (sealing), `paging` (paginate, iterate, iterate_ranges, start_at, keyset_select), `asyncio` (the same
for AsyncSession/AsyncConnection), `results` (Page, Batch, Range), `errors`.
"""

from .cursor import AFTER, BEFORE, MAX_CURSOR_LENGTH, CursorCodec, Position, filters_fingerprint
from .errors import (
    CursorMismatch,
    CursorTooLong,
    InvalidCursor,
    InvalidPosition,
    KeysetError,
    PaginationError,
)
from .paging import iterate, iterate_ranges, keyset_select, paginate, start_at
from .results import Batch, Page, Range
from .sort import Keyset, SeekForm

__version__ = "1.0.0"  # the distribution's version (pagination/pyproject.toml)

__all__ = [
    "AFTER",
    "BEFORE",
    "MAX_CURSOR_LENGTH",
    "Batch",
    "CursorCodec",
    "CursorMismatch",
    "CursorTooLong",
    "InvalidCursor",
    "InvalidPosition",
    "Keyset",
    "KeysetError",
    "Page",
    "PaginationError",
    "Position",
    "Range",
    "SeekForm",
    "__version__",
    "filters_fingerprint",
    "iterate",
    "iterate_ranges",
    "keyset_select",
    "paginate",
    "start_at",
]
