"""Keyset pagination for SQLAlchemy 2 with opaque, sealed cursors. Framework-free."""

from .cursor import AFTER, BEFORE, MAX_CURSOR_LENGTH, CursorCodec, Position, filters_fingerprint
from .errors import (
    CursorMismatch,
    CursorTooLong,
    InvalidCursor,
    InvalidPosition,
    KeysetError,
    PaginationError,
)
from .keyset import Batch, Keyset, Page, iterate, keyset_select, paginate, start_at

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
    "filters_fingerprint",
    "iterate",
    "keyset_select",
    "paginate",
    "start_at",
]
