"""What a route is, declared at the route: a list read (the replicas may serve it, orders/web/read_routing.py)
and whether it streams, or exempt from the rate limits (orders/web/limits.py).

    @bp.get("/orders")
    @list_read
    def orders(): ...

Modules ask `read_kind(view)` / `is_unlimited(view)` of the view function; no module keeps its
own list of endpoint names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

ReadKind = Literal["page", "stream"]
View = TypeVar("View", bound=Callable[..., Any])
_READ = "_list_read"
_UNLIMITED = "_unlimited"


def list_read(view: View) -> View:
    """A read of the list (a page, a fragment, the new-orders count): one snapshot per request."""
    setattr(view, _READ, "page")
    return view


def streaming_read(view: View) -> View:
    """A list read that streams beyond its request's first statement (the export): no per-page
    snapshot, since a long REPEATABLE READ transaction on a standby holds back its replay."""
    setattr(view, _READ, "stream")
    return view


def unlimited(view: View) -> View:
    """Not rate limited: load balancers and monitors ask every few seconds from one address."""
    setattr(view, _UNLIMITED, True)
    return view


def read_kind(view: Callable[..., Any] | None) -> ReadKind | None:
    kind: ReadKind | None = getattr(view, _READ, None)
    return kind


def is_unlimited(view: Callable[..., Any] | None) -> bool:
    return bool(getattr(view, _UNLIMITED, False))
