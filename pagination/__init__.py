"""Keyset pagination for SQLAlchemy 2 with opaque, sealed cursors. Framework-free.

Words, one meaning each, here and in the app:
- *sort*: a named, total order of rows: an instance of `Keyset` (the class keeps its old name);
- *term*: one column or expression of a sort, with its direction (and NULL placement);
- *key values* (``keys``): a row's values in a sort's terms, in order (``Position.keys``);
- *position*: key values and a direction (`after`/`before`), bound to a sort and its filters;
- *cursor*: a position sealed into an opaque string for clients;
- *seek*: the condition keeping the rows past a position; its *form* is an option of the built
  statement (``paginate(..., seek="bounded")``), not of the sort;
- *read*: one statement of a page, one index range; *plan*: how a statement's shape is paged.

A cursor's way to the SQL: `paging.paginate()` decodes it (`cursor`), the sort accepts its
position (`sort.Keyset.accept`), `statement.plan()` analyses the statement's shape once (with
`lineage`: what a term is made of, which columns are unique), and the `statement.Plan` builds
and runs each read (seek, ORDER BY, key labels, LIMIT); `values` converts key values between
rows, cursors and engines; `results` holds Page, Batch, Range; `asyncio` the async entry points.
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
from .paging import cursor_side, end_at, iterate, iterate_ranges, keyset_select, paginate, start_at
from .results import Batch, Page, Range
from .sort import Keyset, SeekForm

__version__ = "2.0.0"  # the distribution's version (pagination/pyproject.toml)

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
    "cursor_side",
    "end_at",
    "filters_fingerprint",
    "iterate",
    "iterate_ranges",
    "keyset_select",
    "paginate",
    "start_at",
]
