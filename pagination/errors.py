"""The pagination library's error tree.

ValueError
 └── PaginationError          anything a client sent that cannot be paged
      ├── InvalidCursor       not one of our cursors: malformed, altered, too long, old version
      ├── CursorMismatch      one of our cursors, given with another sort, direction or filters
      └── InvalidPosition     start_at() values the sort's columns cannot hold
ValueError
 └── KeysetError              a sort or statement that cannot be paged correctly (a programming error)
      └── CursorTooLong       a row's key values too long for a cursor (the server's data, not the client)

An app maps PaginationError to a client error (400). KeysetError is the server's: a 500.
"""


class PaginationError(ValueError):
    """A page request that cannot be served as given; the message says why."""


class InvalidCursor(PaginationError):
    """The cursor is not one this server issued (malformed, tampered, too long or outdated)."""


class CursorMismatch(PaginationError):
    """A genuine cursor used with a different sort, direction or filters than it was made for."""


class InvalidPosition(PaginationError):
    """A value given to start_at() that its column could not hold; the message names it."""


class KeysetError(ValueError):
    """A sort or statement that would not give a total, stable order; the message says why."""


class CursorTooLong(KeysetError):
    """A row's key values do not fit in a cursor of the codec's max_length."""
