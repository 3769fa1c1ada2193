"""The pagination library's error tree.

ValueError
 └── PaginationError          anything a client sent that cannot be paged
      ├── InvalidCursor       not one of our cursors: malformed, bad signature, too long, old version
      └── CursorMismatch      one of our cursors, given with another sort, direction or filters
ValueError
 └── KeysetError              a sort definition that cannot page correctly (a programming error)
"""


class PaginationError(ValueError):
    """A page request that cannot be served as given; the message says why."""


class InvalidCursor(PaginationError):
    """The cursor is not one this server issued (malformed, tampered, too long or outdated)."""


class CursorMismatch(PaginationError):
    """A genuine cursor used with a different sort, direction or filters than it was made for."""


class KeysetError(ValueError):
    """A keyset definition that would not give a total, stable order."""
