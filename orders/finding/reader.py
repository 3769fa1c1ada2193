"""Reading a list request: the one way into the pagination library. `read` for a page (and the
one-row probes of go-to), `ranges` for the export's batches; `page` for the request's own page
(a several-word search within its window, orders/finding/search_window.py); `start` for where it
starts: its cursor's position, or its go-to's first row. Each hands the library the request's
codec, filters, seek form and meta, and a decoded `Position`, never a string to decode again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, Select
from sqlalchemy.orm import Session

from orders.finding.goto import covers, nothing_at, nothing_past
from orders.finding.named import names_holding
from orders.finding.params import InvalidParameter
from orders.finding.request import ListRequest
from orders.finding.search import Search
from orders.finding.search_window import led_by_rarest, window
from pagination import (
    AFTER,
    BEFORE,
    Page,
    Position,
    Range,
    Window,
    filters_fingerprint,
    iterate_ranges,
    paginate,
    position_at,
)


def read(
    listing: ListRequest,
    connection: Connection,
    stmt: Select[Any] | None = None,
    *,
    start: str | Position | None = None,
    backward: bool = False,
    limit: int | None = None,
    within: Window | None = None,
) -> Page:
    """One page of `listing` (`stmt`: its statement unless narrowed) from `start`, sealed with
    its codec, filters and meta, in its seek form (`within` a window). The session's
    connection, not the session: the statement is Core (plain rows), and the ORM's execute
    and row loading around it were a tenth of a page's time."""
    return paginate(
        connection,
        listing.statement() if stmt is None else stmt,
        listing.sort,
        limit=listing.limit if limit is None else limit,
        codec=listing.codec,
        seek=listing.seek,
        after=None if backward else start,
        before=start if backward else None,
        filters=listing.filters,
        meta=listing.meta,
        window=within,
    )


def ranges(
    listing: ListRequest,
    session: Session,
    stmt: Select[Any],
    *,
    start: str | Position | None,
    batch_size: int,
) -> Iterator[Range]:
    """The export's batches of `listing` (`stmt`: its statement with the export's columns) from
    `start`, each one index range (pagination.iterate_ranges)."""
    return iterate_ranges(
        session,
        stmt,
        listing.sort,
        batch_size=batch_size,
        codec=listing.codec,
        after=start,
        filters=listing.filters,
        seek=listing.seek,
    )


def start(listing: ListRequest, session: Session) -> Position | None:
    """Where `listing` is read from: its go-to's first row, or its cursor's position (None: the top)."""
    if listing.goto is not None:
        return _goto_start(listing, session)
    return listing.position


def page(listing: ListRequest, session: Session) -> Page:
    """The request's page, read through `session`."""
    at = start(listing, session)
    backward = listing.backward and listing.goto is None
    connection = session.connection()
    search = listing.search
    if search is not None and len(search.words) > 1 and not listing.sharded:
        # The names first (orders/finding/named.py): none holds every word, nothing matches; a
        # few, their orders, one range per name; else the window of the rarest word's orders.
        named = names_holding(connection, search.words)
        led = None if named.none or named.keys else led_by_rarest(listing, search, connection)
        if named.keys:
            found = read(
                replace(listing, search=replace(search, names=named.keys)),
                connection,
                start=at,
                backward=backward,
            )
        elif led is None:  # no name holds every word: nothing matches, anywhere in the list
            if at is not None:  # a cursor of another sort or search is refused all the same
                side = BEFORE if backward else AFTER
                listing.sort.accept(at, direction=side, filters=filters_fingerprint(listing.filters))
            found = Page([])
        else:
            found = read(led, connection, start=at, backward=backward, within=window(led))
    else:
        found = read(listing, connection, start=at, backward=backward)
    session.info["page_rows"] = len(found.items)  # the request's log line (orders/web/request_log.py)
    return found


# --- Go to ---------------------------------------------------------------------------------


def _goto_start(listing: ListRequest, session: Session) -> Position:
    """The inclusive `after` position at the first row of `listing` at or past its go-to, or
    InvalidParameter saying plainly that nothing is there (a value outside the list's rows,
    a name no word of which starts with what was typed): the list is not moved.

    A name goes to the first row, in the list's order, whose name has a word starting with
    each word typed (as the search matches: surnames too); a date or an amount to the first
    row at or past it, unless the value lies beyond either end of the list."""
    goto = listing.goto
    assert goto is not None
    if listing.choice.goto == "name":
        found = _first_named(listing, session)
        if found is None:
            raise InvalidParameter(f"no name in this list has a word starting with {goto.text[:40]!r}")
        return replace(listing, goto=None).position_at(found)
    position = position_at(listing.sort, [goto.value], filters=listing.filters)
    first = read(listing, session.connection(), start=position, limit=1)
    if not first.items:
        raise InvalidParameter(nothing_past(listing.choice, goto))
    if not first.has_previous and not covers(listing.choice, goto, first.items[0]):
        raise InvalidParameter(nothing_at(listing.choice, goto, first.items[0]))
    return position


def _first_named(listing: ListRequest, session: Session) -> Any:
    """The first row of `listing` whose name has a word starting with each word of the go-to
    (the search's rule), or None."""
    goto = listing.goto
    assert goto is not None
    words = goto.value
    search = listing.search.plus(words) if listing.search is not None else Search(goto.text, words=words)
    # Read from the rarest word's range: an absent word costs nothing, a rare one its few rows.
    plain = replace(listing, goto=None, cursor=None, position=None)
    led = led_by_rarest(plain, search, session.connection())
    if led is None:
        return None  # a word no order holds
    first = read(led, session.connection(), limit=1)
    return first.items[0] if first.items else None
