"""Keyset pagination for SQLAlchemy 2 with opaque, signed cursors. Framework-free."""

from .cursor import AFTER, BEFORE, MAX_CURSOR_LENGTH, CursorCodec, Position, filters_fingerprint
from .errors import CursorMismatch, InvalidCursor, KeysetError, PaginationError
from .keyset import Batch, Keyset, Page, iterate, keyset_select, paginate

__all__ = [
    "AFTER",
    "BEFORE",
    "MAX_CURSOR_LENGTH",
    "Batch",
    "CursorCodec",
    "CursorMismatch",
    "InvalidCursor",
    "Keyset",
    "KeysetError",
    "Page",
    "PaginationError",
    "Position",
    "filters_fingerprint",
    "iterate",
    "keyset_select",
    "paginate",
]
