"""The list's sort choices, in one registry (SORTS): each one's name (the URL's `sort=`), its
label, its library sort (a `Keyset`: terms ending in the id, each backed by an index of
orders/data/models.py), what "Go to" reads for it, and whether a status filter reads it through
the (status, created_at, id) index.

The views, templates, OpenAPI document, CLI, export, benchmarks and tests read sorts from here
only: a new sort is one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import asc, desc

from orders.data.models import Order
from pagination import Keyset

# What "Go to" reads for a sort (orders/finding/goto.py parses each, and GOTO_FIELDS there says
# how the browser shows each).
GotoKind = Literal["datetime", "amount", "name"]


@dataclass(frozen=True)
class SortChoice:
    """One sort the reader can choose: its name, its label, its library sort (a `Keyset`),
    what "Go to" reads for it, the index its pages read."""

    name: str
    label: str  # the Sort control's option
    sort: Keyset
    goto: GotoKind
    index: str  # the index each page's range reads (tests/test_plans.py checks it is used)
    # With a status filter, the (status, created_at, id) index serves this sort (MariaDB needs a
    # hint to read it as a range: orders/finding/request.py).
    status_index: bool = False


def _by_time(name: str, label: str, direction: Callable[[Any], Any]) -> SortChoice:
    """Newest and oldest: one index read both ways, served under a status filter too."""
    sort = Keyset(name, direction(Order.created_at), direction(Order.id))
    return SortChoice(name, label, sort, "datetime", "ix_orders_created_at_id", status_index=True)


# The sort new orders arrive at the top of (the "N new orders" banner), and the default.
NEWEST = "newest"

SORTS: dict[str, SortChoice] = {
    choice.name: choice
    for choice in (
        _by_time(NEWEST, "Newest first", desc),
        _by_time("oldest", "Oldest first", asc),
        SortChoice(
            "amount",
            "Largest amount",
            Keyset("amount", Order.amount.desc(), Order.id.desc()),
            "amount",
            "ix_orders_amount_id",
        ),
        SortChoice(
            "customer",
            "Customer A–Z",
            Keyset("customer", Order.customer_key.asc(), Order.id.asc()),
            "name",
            "ix_orders_customer_key_id",
        ),
    )
}
DEFAULT_SORT = NEWEST
# Each choice's library sort alone, for code that pages with the library directly (export, tests, bench).
LIBRARY_SORTS: dict[str, Keyset] = {name: choice.sort for name, choice in SORTS.items()}
