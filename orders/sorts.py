"""The list's sorts, in one registry (SORTS): each sort's name (the URL's `sort=`), its label, its
keyset (terms ending in the id, each backed by an index of orders/models.py), what "Go to" reads
for it, and whether a status filter reads it through the (status, created_at, id) index.

The views, templates, OpenAPI document, CLI, export, benchmarks and tests read sorts from here
only: a new sort is one entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from pagination import Keyset

from .models import Order

# What "Go to" reads for a sort (orders/jump.py parses each; orders.html picks the input).
GotoKind = Literal["datetime", "amount", "name"]


@dataclass(frozen=True)
class Sort:
    name: str
    label: str  # the Sort control's option
    keyset: Keyset
    goto: GotoKind
    goto_label: str
    index: str  # the index each page's range reads (tests/test_plans.py checks it is used)
    # With a status filter, the (status, created_at, id) index serves this sort (MariaDB needs a
    # hint to read it as a range: orders/listing.py).
    status_index: bool = False

    @cached_property
    def bounded_keyset(self) -> Keyset:
        """The same order with the expanded seek and its leading bound (`seek="bounded"`): the
        form postgres_fdw ships to every shard (a row value is filtered on the coordinator, so
        each shard would be read from its first row). Used when DATABASE_SHARD_URLS is set."""
        return Keyset(self.name, *self.keyset.part_order_by(), seek="bounded")

    def keyset_for(self, *, sharded: bool) -> Keyset:
        return self.bounded_keyset if sharded else self.keyset


SORTS: dict[str, Sort] = {
    sort.name: sort
    for sort in (
        Sort(
            "newest",
            "Newest first",
            Keyset("newest", Order.created_at.desc(), Order.id.desc()),
            "datetime",
            "Go to date and time",
            "ix_orders_created_at_id",
            status_index=True,
        ),
        Sort(
            "oldest",
            "Oldest first",
            Keyset("oldest", Order.created_at.asc(), Order.id.asc()),
            "datetime",
            "Go to date and time",
            "ix_orders_created_at_id",
            status_index=True,
        ),
        Sort(
            "amount",
            "Largest amount",
            Keyset("amount", Order.amount.desc(), Order.id.desc()),
            "amount",
            "Go to amount",
            "ix_orders_amount_id",
        ),
        Sort(
            "customer",
            "Customer A–Z",
            Keyset("customer", Order.customer_key.asc(), Order.id.asc()),
            "name",
            "Go to customer name",
            "ix_orders_customer_key_id",
        ),
    )
}
DEFAULT_SORT = "newest"
# Each sort's keyset alone, for code that pages with the library directly (export, tests, bench).
KEYSETS: dict[str, Keyset] = {name: sort.keyset for name, sort in SORTS.items()}
