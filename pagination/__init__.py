"""Keyset pagination for SQLAlchemy 2 with opaque, sealed cursors. Framework-free.

The glossary: one meaning a word, here and in the app (docs/life-of-a-request.md links here;
tests/test_architecture.py refuses the names these words replaced):
- *sort*: a named, total order of rows: an instance of `Keyset` (the class keeps the name of
  the technique, keyset pagination; an argument, attribute or variable holding one is `sort`);
- *term*: one column or expression of a sort, with its direction (and NULL placement);
- *key values* (``keys``): a row's values in a sort's terms, in order (``Position.keys``);
- *position*: key values and a direction (`after`/`before`), bound to a sort and its filters;
  `position_at()` makes one from values (the app's go-to), a decoded cursor is one;
- *cursor*: a position sealed into an opaque string for clients, by a *codec* (`CursorCodec`);
- *meta*: text sealed into a position and its cursor, never checked here (the app's: the LSN,
  PostgreSQL's WAL location, a page was read at);
- *seek*: the condition keeping the rows past a position; its *form* is an option of the built
  statement (``paginate(..., seek="bounded")``), not of the sort;
- *window*: a bound on a page's work, a narrower statement's next rows (`Window`);
- *read*: one statement of a page, one index range; *plan*: how a statement's shape is paged.

A cursor's way to the SQL: `paging.paginate()` decodes it (`cursor`), the sort accepts its
position (`sort.Keyset.accept`), `planning.plan()` analyses the statement's shape once
(`refusals`: what cannot be paged; `lineage`: what a term is made of; `uniqueness`: which
columns are unique), and the `statement.Plan` it remembers builds and runs each read (seek,
ORDER BY, key labels, LIMIT) into `rows.Rows`; `values` converts key values between rows,
cursors and engines;
`results` holds Page, Batch, Range; `asyncio` the async entry points.
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
from .paging import (
    Window,
    cursor_side,
    end_at,
    iterate,
    iterate_ranges,
    keyset_select,
    paginate,
    position_at,
    start_at,
)
from .results import Batch, Page, Range
from .sort import Keyset, SeekForm

__version__ = "2.1.0"  # the distribution's version (pagination/pyproject.toml)

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
    "Window",
    "__version__",
    "cursor_side",
    "end_at",
    "filters_fingerprint",
    "iterate",
    "iterate_ranges",
    "keyset_select",
    "paginate",
    "position_at",
    "start_at",
]
