"""List reads: where each is read, and where it is read again. One wrapper, applied once.

A view declares itself a list read at its route (@list_read, @streaming_read: orders/web/routes.py);
install() wraps each such view with `_list_read`, which reads the list request from the URL once
(orders/finding/request.py list_request: the cursor decoded there), asks the app's read policy to
run the view with it, and hands it to the view as its argument:

- PrimaryReads (one database, or SQLite/MariaDB): a page checks its connection out unpinged and
  runs once more when its first statement found the pooled connection dead (what a ping would
  have caught). The export (a stream) is left as it is.
- ReplicaReads (DATABASE_REPLICA_URLS on PostgreSQL, orders/data/replicas/): before the view, a
  node is chosen by the LSNs of the list request's cursor and of the client, the page's
  transaction begins there, and the list request is stamped with the LSN it is read at (its
  cursors carry it on); a replica lost during the page runs the view again on another node.
  After the view, Server-Timing names the node, and a write's LSN goes back to its client.

A read is harmless to run twice, so neither policy shows the reader an error it can avoid.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from flask import Flask, Response, current_app, g, request
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from orders.data.db import get_session, open_read_session, unpinged_checkouts
from orders.data.replicas.lsn import PAGE_LSN_SQL, PRIMARY_LSN_SQL, parse_lsn
from orders.data.replicas.router import Route, Router
from orders.finding.request import ListRequest, list_request
from orders.web.routes import ReadKind, read_kind

log = logging.getLogger(__name__)

COOKIE = "read_after_lsn"
HEADER = "Read-After-LSN"

View = Callable[..., Any]


class ReadPolicy(Protocol):
    def run(self, view: View, kind: ReadKind, listing: ListRequest) -> Any: ...


def install(app: Flask) -> None:
    """Wrap every list view with the app's read policy (after the blueprints are registered)."""
    router: Router | None = app.extensions.get("router")
    policy: ReadPolicy = ReplicaReads(router) if router is not None else PrimaryReads()
    app.extensions["read_policy"] = policy
    for endpoint, view in list(app.view_functions.items()):
        if (kind := read_kind(view)) is not None:
            app.view_functions[endpoint] = _list_read(view, kind)
    if router is not None:
        app.after_request(_after)


def _list_read(view: View, kind: ReadKind) -> View:
    @functools.wraps(view)
    def wrapper() -> Any:
        policy: ReadPolicy = current_app.extensions["read_policy"]
        return policy.run(view, kind, list_request(request.args))

    return wrapper


class PrimaryReads:
    """Every read on the one database: a page whose pooled connection was dead runs again."""

    def run(self, view: View, kind: ReadKind, listing: ListRequest) -> Any:
        if kind != "page":
            return view(listing)
        with unpinged_checkouts():
            open_read_session()
            try:
                return view(listing)
            except DBAPIError as err:
                # Only a connection found dead by its first statement, where a ping would have
                # found it: a disconnect later in the read is an outage (503), not retried.
                if not (err.connection_invalidated and g.pop("stale_checkout", False)):
                    raise
                log.info("a pooled connection was dead, read again on a fresh one: %s", str(err)[:200])
                get_session().rollback()
                return view(listing)


class ReplicaReads:
    """Reads on a replica that has the reader's LSN, else the primary; a replica lost
    during the page (the LSN read worked, the page query found the connection gone) runs
    the view again on another node."""

    def __init__(self, router: Router) -> None:
        self.router = router

    def run(self, view: View, kind: ReadKind, listing: ListRequest) -> Any:
        # Only GET: everything else (HEAD included) stays on the primary, as writes do.
        read = _begin_read(kind, listing, exclude=set()) if request.method == "GET" else listing
        try:
            return view(read)
        except DBAPIError as err:
            route: Route | None = g.get("read_route")
            if route is None or route.node.primary or not err.connection_invalidated:
                raise
            self.router.mark_down(route.node, err)
            get_session().rollback()
            return view(_begin_read(kind, listing, exclude={route.node.name}))


def _client_lsn() -> int | None:
    """The LSN of this client's last write: the cookie, or the header an API client sent back."""
    lsns = [parse_lsn(request.headers.get(HEADER)), parse_lsn(request.cookies.get(COOKIE))]
    known = [p for p in lsns if p is not None]
    return max(known) if known else None


def _begin_read(kind: ReadKind, listing: ListRequest, exclude: set[str]) -> ListRequest:
    """Choose the node for this read, start the page's transaction there, and give back the list
    request stamped with the LSN it is read at (its cursors carry it to the next page)."""
    router: Router = current_app.extensions["router"]
    has_cursor = listing.position is not None
    cursor_lsn = parse_lsn(listing.position.meta.get("lsn")) if listing.position is not None else None
    client_lsn = _client_lsn()
    needs = [p for p in (cursor_lsn, client_lsn) if p is not None]
    need = max(needs) if needs else None
    # A cursor without an LSN (made before replicas were configured) is routed like a first
    # page: only a replica within REPLICA_MAX_LAG_MS may read it.
    first_page = not has_cursor or cursor_lsn is None
    session = get_session()
    streaming = kind == "stream"
    route = router.choose(need, first_page=first_page, exclude=exclude)
    fresh_retry = True
    while True:
        node = route.node
        session.info["read_bind"] = node.engine
        g.read_route = route
        try:
            # The first statement fixes the REPEATABLE READ snapshot, then reads the LSN:
            # the LSN is at least as far as anything the page's queries can see. (An export
            # streams for long: it keeps READ COMMITTED, and the statement only checks the node.)
            options = {} if streaming else {"isolation_level": "REPEATABLE READ"}
            conn = session.connection(execution_options=options)
            replayed, lsn, started_at = conn.execute(text(PAGE_LSN_SQL[node.primary])).one()
        except DBAPIError as err:
            session.rollback()
            if fresh_retry and err.connection_invalidated and not node.primary:
                # Replica engines skip the pre-ping (this statement is the ping): a connection
                # the node dropped (it restarted) has just emptied the pool; try a fresh one.
                fresh_retry = False
                continue
            # The node stopped answering since it was last probed: take it out, try the next.
            router.mark_down(node, err)
            exclude.add(node.name)
            route = router.choose(need, first_page=first_page, exclude=exclude)
            fresh_retry = True
            continue
        if not node.same_run(started_at):
            # Restarted since it was chosen: the LSN it was chosen for may be one it has
            # not replayed again yet. Choose again (it now has to prove its LSN afresh).
            session.rollback()
            route = router.choose(need, first_page=first_page, exclude=exclude)
            continue
        if (parsed := parse_lsn(replayed)) is not None:
            node.seen(parsed)  # a lower bound of what the node has replayed (not the LSN a page is read at)
        if parse_lsn(lsn) is not None:
            route.lsn = lsn
            if not streaming:
                listing = listing.read_at({"lsn": lsn})
        break
    node.pages += 1
    route.seconds = time.perf_counter() - route.started
    return listing


def _after(response: Response) -> Response:
    route: Route | None = g.get("read_route")
    if route is not None:
        # Which node read the page, at which LSN, and what choosing it cost: for operators
        # (browser dev tools show Server-Timing), the cluster tests and the benchmark.
        desc = route.node.name + (f" {route.lsn}" if route.lsn else "")
        response.headers["Server-Timing"] = f'db;desc="{desc}", route;dur={route.seconds * 1000:.3f}'
    elif request.method in ("POST", "DELETE") and 200 <= response.status_code < 300:
        _remember_write(response)
    return response


def _remember_write(response: Response) -> None:
    """Give the client the LSN its write committed at, so its next reads see the write."""
    try:
        lsn = get_session().execute(text(PRIMARY_LSN_SQL)).scalar()
    except DBAPIError:
        # The write is committed; failing to read the LSN must not turn it into an error.
        # The client's reads then follow REPLICA_MAX_LAG_MS alone.
        log.warning("could not read the primary's LSN after a write")
        return
    if parse_lsn(lsn) is None:
        return
    response.headers[HEADER] = lsn
    # Not signed: a client can only change where its own reads go, at worst to the primary.
    max_age = max(60, int(current_app.config["REPLICA_MAX_LAG_MS"] / 1000) * 2)
    response.set_cookie(COOKIE, str(lsn), max_age=max_age, httponly=True, samesite="Lax")
