"""Read routing to PostgreSQL streaming replicas, without ever letting a walk go back in time.

`DATABASE_URL` is the primary and takes every write. `DATABASE_REPLICA_URLS` (comma-separated) are
hot standbys that serve the list reads: the HTML list and its fragments, `GET /api/orders`, the
new-orders poll and the CSV export. Without replicas, or on SQLite or MariaDB (which have no WAL
position to compare), nothing here is switched on and the app reads and writes the one database.

The rule that keeps keyset pagination's promise across lagging replicas:

- Every page is read in one REPEATABLE READ transaction whose first statement reads the node's
  WAL position (`pg_current_wal_lsn()` on the primary; on a standby the position it has received,
  which is at least `pg_last_wal_replay_lsn()`: see PAGE_LSN_SQL). That statement fixes the
  transaction's snapshot *before* the function is evaluated, so the position is at least as far
  as anything the page's rows can show. It is stamped into every cursor of the page
  (`meta={"lsn": ...}`).
- A page after a cursor is read only on a node known to have replayed at least the cursor's
  position *before* its snapshot is taken (our cached lower bound, else a fresh probe), so the
  next page's snapshot contains everything the previous page's could see. A replica that lags is
  skipped; the primary answers when no replica is ready.
- A first page goes to a replica only while that replica has been fully caught up with the
  primary within `REPLICA_MAX_LAG_MS` (see `NodeState.lag`).
- After a POST or DELETE the write's position goes back in a cookie and a `Read-After-LSN`
  header; that client's reads then route as if they carried a cursor at that position.

Routing uses SQLAlchemy's documented hook for it, `Session.get_bind` (RoutingSession below): the
request's read engine sits in `session.info`; flushes and DML always go to the primary.
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.dml import UpdateBase

from pagination import PaginationError

from .db import client_bounds, get_session, make_engine
from .errors import ApiError
from .routes import read_kind, unlimited

log = logging.getLogger(__name__)

COOKIE = "read_after_lsn"
HEADER = "Read-After-LSN"
# How long cached replica positions are trusted before a request refreshes them. Stale values are
# always safe (positions only grow), they only send more reads to the primary.
REFRESH_SECONDS = 0.1
# A node that failed is left out for this long, then probed again.
RETRY_SECONDS = 1.0
# With the primary down, how long a read waits for a replica to replay its cursor's position, or
# for a primary to answer again: long enough for Patroni to fail over after a PostgreSQL crash
# (2.7 to 4.3 s measured by bench-cluster on loopback), not for a whole host lost (the leader key's
# time to live: 30 s by default); that read then answers 503 with Retry-After.
PRIMARY_DOWN_WAIT_SECONDS = 5.0

# Marks a read that went back to the primary once after failing there (see _without_primary).
PRIMARY_AGAIN = "primary, again"
PRIMARY_LSN_SQL = "SELECT pg_current_wal_lsn()::text"
REPLICA_LSN_SQL = "SELECT pg_last_wal_replay_lsn()::text"
# What a page on a standby is stamped with: the replayed position, and the received one above it.
# A standby's startup process makes a replayed commit visible an instant before it advances the
# replayed position, so a snapshot can hold a commit just past pg_last_wal_replay_lsn(); it cannot
# hold one the standby has not received. (NULL receive position: streaming stopped; GREATEST skips
# NULLs.) On the primary both are pg_current_wal_lsn().
# A replica promoted since it was last probed (a failover) is read like the primary it now is,
# and its pages are stamped with its own position.
PAGE_LSN_SQL = {
    True: "SELECT pg_current_wal_lsn()::text, pg_current_wal_lsn()::text",
    False: (
        "SELECT pg_last_wal_replay_lsn()::text, CASE WHEN pg_is_in_recovery() "
        "THEN GREATEST(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()) "
        "ELSE pg_current_wal_lsn() END::text"
    ),
}


def parse_lsn(value: str | None) -> int | None:
    """PostgreSQL's `X/Y` (two hex numbers) as one integer; None for anything else."""
    if not value or len(value) > 17:
        return None
    high, sep, low = value.partition("/")
    try:
        if not sep or not high or not low:
            return None
        return (int(high, 16) << 32) | int(low, 16)
    except ValueError:
        return None


def format_lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def probe_engine(engine: Engine) -> Engine:
    """A small engine for position probes: autocommit and no pre-ping, so a probe is one round
    trip (through the request engine it was four: ping, BEGIN, query, ROLLBACK). A dead connection
    fails the probe, which takes the node out of rotation; SQLAlchemy drops that connection, and
    the next probe reconnects."""
    return create_engine(
        engine.url,
        isolation_level="AUTOCOMMIT",
        pool_size=1,
        max_overflow=4,
        connect_args={"connect_timeout": 2, "options": "-c statement_timeout=2000"},
    )


class RoutingSession(Session):
    """A Session whose reads go to `info["read_bind"]` when a read route was chosen.

    SQLAlchemy's documented way to route a Session (`Session.get_bind`, "Custom Vertical
    Partitioning"). Writes are never routed: a flush or an INSERT/UPDATE/DELETE goes to the
    primary even inside a routed request.
    """

    def get_bind(self, mapper: Any = None, *, clause: Any = None, **kw: Any) -> Any:
        read_bind = self.info.get("read_bind")
        if read_bind is not None and not self._flushing and not isinstance(clause, UpdateBase):
            return read_bind
        return super().get_bind(mapper, clause=clause, **kw)


class RoutingSessionMaker(sessionmaker[RoutingSession]):
    """Sessions opened during a routed request read from that request's node (the CSV export opens
    its own session, which outlives the request)."""

    def __call__(self, **local_kw: Any) -> RoutingSession:
        route = g.get("read_route") if _in_request() else None
        if route is not None and "info" not in local_kw:
            local_kw["info"] = {"read_bind": route.node.engine}
        return super().__call__(**local_kw)


def _in_request() -> bool:
    from flask import has_request_context

    return has_request_context()


@dataclass
class NodeState:
    """What one app process knows about a node. Every field only ever errs on the safe side."""

    name: str
    engine: Engine
    primary: bool = False
    replay: int = 0  # a lower bound of the position the node has replayed (written, on the primary)
    caught_up_at: float = float("-inf")  # monotonic time at which it had all the primary had
    down_until: float = 0.0
    pages: int = 0
    probe_engine: Engine | None = None  # see probe_engine()
    leading: bool = False  # a replica URL whose node was last seen out of recovery (see _probe)

    def up(self, now: float) -> bool:
        return now >= self.down_until

    def lag(self, now: float) -> float:
        """Seconds since this replica was last seen holding everything the primary had written.

        Measured as: read the primary's position at time T, then the replica's; if the replica has
        replayed at least that far, every commit acknowledged before T is on the replica. So a
        first page read there misses nothing committed more than `lag` before it. (Replay
        timestamps would report an idle, fully caught-up replica as lagging, and a replica that
        lost its connection to the primary as current.)
        """
        return now - self.caught_up_at

    def seen(self, lsn: int) -> None:
        self.replay = max(self.replay, lsn)


@dataclass
class Route:
    node: NodeState
    lsn: str | None = None
    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0


class Router:
    """Chooses the node for a read: a replica that is ready, else the primary."""

    def __init__(self, primary: Engine, replicas: list[Engine], *, max_lag_ms: int):
        self.primary = NodeState("primary", primary, primary=True, probe_engine=probe_engine(primary))
        self.replicas = [
            NodeState(f"replica{i + 1}", engine, probe_engine=probe_engine(engine))
            for i, engine in enumerate(replicas)
        ]
        self.max_lag = max_lag_ms / 1000
        self.rerouted = 0  # reads a replica could not take (lagging or down), served elsewhere
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._turn = itertools.count(random.randrange(1000))

    @property
    def nodes(self) -> list[NodeState]:
        return [self.primary, *self.replicas]

    def dispose(self) -> None:
        """Close every connection the router opened (the primary's request engine is the app's)."""
        for node in self.nodes:
            if node.probe_engine is not None:
                node.probe_engine.dispose()
        for node in self.replicas:
            node.engine.dispose()

    # --- probing -------------------------------------------------------------------------

    def _probe(self, node: NodeState) -> int | None:
        """The node's position now, or None (and out of rotation for a while) if it fails."""
        try:
            with (node.probe_engine or node.engine).connect() as conn:
                lsn = parse_lsn(
                    conn.execute(text(PRIMARY_LSN_SQL if node.primary else REPLICA_LSN_SQL)).scalar()
                )
        except DBAPIError as err:
            self.mark_down(node, err)
            return None
        if lsn is None and not node.primary:
            # A replica URL that leads now (DATABASE_REPLICA_URLS may list every node of a
            # failover cluster): no replica reads there until it follows a primary again.
            if not node.leading:
                log.info("%s is not in recovery: it takes no replica reads for now", node.name)
            node.leading = True
            node.down_until = time.monotonic() + RETRY_SECONDS
            return None
        if lsn is None:  # a primary in recovery: not something we route to
            self.mark_down(node, None)
            return None
        node.leading = False
        node.down_until = 0.0
        node.seen(lsn)
        return lsn

    def refresh(self, *, force: bool = False) -> None:
        """Re-read every node's position (at most every REFRESH_SECONDS unless forced).

        One request refreshes; concurrent ones go on with the cached values, which are safe.
        """
        now = time.monotonic()
        if not force and now - self._checked_at < REFRESH_SECONDS:
            return
        if not self._lock.acquire(blocking=force):
            return
        try:
            self._checked_at = now
            started = time.monotonic()
            # The primary first: a replica that has replayed this position afterwards holds every
            # commit acknowledged before `started`.
            primary_lsn = self._probe(self.primary) if self.primary.up(now) or force else None
            for node in self.replicas:
                if not node.up(now) and not force:
                    continue
                lsn = self._probe(node)
                if lsn is not None and primary_lsn is not None and lsn >= primary_lsn:
                    node.caught_up_at = started
        finally:
            self._lock.release()

    def mark_down(self, node: NodeState, err: Exception | None) -> None:
        if node.up(time.monotonic()):
            why = str(err).splitlines()[0][:200] if err else "not in the expected recovery state"
            log.warning("%s out of rotation for %.0f s: %s", node.name, RETRY_SECONDS, why)
        node.down_until = time.monotonic() + RETRY_SECONDS

    # --- choosing ------------------------------------------------------------------------

    def _ready(self, node: NodeState, need: int | None, first_page: bool, now: float) -> bool:
        if need is not None and node.replay < need:
            return False
        return not first_page or node.lag(now) <= self.max_lag

    def choose(self, need: int | None, *, first_page: bool, exclude: set[str]) -> NodeState:
        """The node for a read that must see position `need` (cursor or own write), or a first page.

        Raises ApiError 503 only when the primary is down and no replica reaches `need` in time.
        """
        self.refresh()
        now = time.monotonic()
        start = next(self._turn)
        candidates = [
            self.replicas[(start + i) % len(self.replicas)]
            for i in range(len(self.replicas))
            if self.replicas[(start + i) % len(self.replicas)].name not in exclude
        ]
        candidates = [node for node in candidates if node.up(now)]
        for node in candidates:
            if self._ready(node, need, first_page, now):
                return node
        # Cached positions may just be old (another app process read the last page): ask the
        # replicas that are behind `need` once, before the snapshot is taken.
        if need is not None:
            for node in candidates:
                if (
                    node.replay < need
                    and self._probe(node) is not None
                    and self._ready(node, need, first_page, now)
                ):
                    return node
        if self.replicas:
            self.rerouted += 1
        if self.primary.name not in exclude and self.primary.up(now):
            return self.primary
        return self._without_primary(need, exclude)

    def _without_primary(self, need: int | None, exclude: set[str]) -> NodeState:
        """The primary is down: nothing new can be committed, so the replica that has replayed the
        most is as fresh as any read can be. A cursor's position must still be reached: a clean
        primary shutdown sends its last WAL to the standbys, so wait for them briefly.

        A failover ends the wait at once: DATABASE_URL may name several hosts (libpq's
        `target_session_attrs=read-write`), so the primary answers again once a standby is
        promoted. It holds every acknowledged commit, so it reads any cursor's next page, also
        one stamped with the old primary's position, which the new timeline may not reach yet."""
        deadline = time.monotonic() + PRIMARY_DOWN_WAIT_SECONDS
        while True:
            self.refresh(force=True)
            now = time.monotonic()
            if self.primary.up(now) and PRIMARY_AGAIN not in exclude:
                if self.primary.name in exclude:
                    # This read already failed on the primary (the old one, dying): the one
                    # answering now is another, promoted; it gets one more try per read.
                    exclude.add(PRIMARY_AGAIN)
                return self.primary
            live = [n for n in self.replicas if n.up(now) and n.name not in exclude]
            if live:
                best = max(live, key=lambda n: n.replay)
                if need is None or best.replay >= need:
                    return best
            if time.monotonic() > deadline:
                raise ApiError("unavailable", "the database is not answering; retry in a few seconds")
            time.sleep(0.05)


# --- the request hooks ---------------------------------------------------------------------


def _cursor_lsn() -> tuple[int | None, bool]:
    """The position stamped in the request's cursor, and whether a cursor was given at all."""
    values = request.args.getlist("after") + request.args.getlist("before")
    if len(values) != 1:
        return None, False  # no cursor (a first page), or a request the view will refuse
    try:
        position = current_app.extensions["cursor_codec"].decode(values[0])
    except PaginationError:
        return None, True  # the view answers 400; route it like any other read
    g.cursor_positions = {values[0]: position}  # the page reuses it (orders/listing.py)
    return parse_lsn(position.meta.get("lsn")), True


def _client_lsn() -> int | None:
    """The position of this client's last write: the cookie, or the header an API client sent back."""
    positions = [parse_lsn(request.headers.get(HEADER)), parse_lsn(request.cookies.get(COOKIE))]
    known = [p for p in positions if p is not None]
    return max(known) if known else None


def _route_read() -> None:
    # Only list reads (declared at their routes, orders/routes.py) go to the replicas;
    # everything else (writes, one order, health) stays on the primary.
    if request.method == "GET" and request.endpoint in current_app.extensions["list_reads"]:
        _begin_read(exclude=set())


def _begin_read(exclude: set[str]) -> None:
    """Choose the node for this read and start the page's transaction there."""
    router: Router = current_app.extensions["router"]
    cursor_lsn, has_cursor = _cursor_lsn()
    client_lsn = _client_lsn()
    needs = [p for p in (cursor_lsn, client_lsn) if p is not None]
    need = max(needs) if needs else None
    # A cursor without a position (made before replicas were configured) is routed like a first
    # page: only a replica within REPLICA_MAX_LAG_MS may read it.
    first_page = not has_cursor or cursor_lsn is None
    session = get_session()
    session.info["cursor_positions"] = g.pop("cursor_positions", {})
    streaming = current_app.extensions["list_reads"][request.endpoint] == "stream"
    node = router.choose(need, first_page=first_page, exclude=exclude)
    fresh_retry = True
    while True:
        route = Route(node)
        session.info["read_bind"] = node.engine
        g.read_route = route
        try:
            # The first statement fixes the REPEATABLE READ snapshot, then reads the position:
            # the position is at least as far as anything the page's queries can see. (An export
            # streams for long: it keeps READ COMMITTED, and the statement only checks the node.)
            options = {} if streaming else {"isolation_level": "REPEATABLE READ"}
            conn = session.connection(execution_options=options)
            replayed, lsn = conn.execute(text(PAGE_LSN_SQL[node.primary])).one()
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
            node = router.choose(need, first_page=first_page, exclude=exclude)
            fresh_retry = True
            continue
        if (parsed := parse_lsn(replayed)) is not None:
            node.seen(parsed)  # a lower bound of what the node has replayed (not the stamp)
        if parse_lsn(lsn) is not None:
            route.lsn = lsn
            if not streaming:
                session.info["cursor_meta"] = {"lsn": lsn}
        break
    node.pages += 1
    route.seconds = time.perf_counter() - route.started


def _retry_elsewhere(view: Callable[..., Any]) -> Callable[..., Any]:
    """Run a list view again on another node when its replica went away during the page (the
    position read worked, the page query found the connection gone): the reader sees no error.
    The views only read, so running one twice is harmless."""

    @functools.wraps(view)
    def wrapper(**kwargs: Any) -> Any:
        try:
            return view(**kwargs)
        except DBAPIError as err:
            route: Route | None = g.get("read_route")
            if route is None or route.node.primary or not err.connection_invalidated:
                raise
            current_app.extensions["router"].mark_down(route.node, err)
            get_session().rollback()
            _begin_read(exclude={route.node.name})
            return view(**kwargs)

    return wrapper


def _after(response: Response) -> Response:
    route: Route | None = g.get("read_route")
    if route is not None:
        # Which node read the page, at which position, and what choosing it cost: for operators
        # (browser dev tools show Server-Timing), the cluster tests and the benchmark.
        desc = route.node.name + (f" {route.lsn}" if route.lsn else "")
        response.headers["Server-Timing"] = f'db;desc="{desc}", route;dur={route.seconds * 1000:.3f}'
    elif request.method in ("POST", "DELETE") and 200 <= response.status_code < 300:
        _remember_write(response)
    return response


def _remember_write(response: Response) -> None:
    """Give the client the position its write committed at, so its next reads see the write."""
    try:
        lsn = get_session().execute(text(PRIMARY_LSN_SQL)).scalar()
    except DBAPIError:
        # The write is committed; failing to read the position must not turn it into an error.
        # The client's reads then follow REPLICA_MAX_LAG_MS alone.
        log.warning("could not read the primary's position after a write")
        return
    if parse_lsn(lsn) is None:
        return
    response.headers[HEADER] = lsn
    # Not signed: a client can only change where its own reads go, at worst to the primary.
    max_age = max(60, int(current_app.config["REPLICA_MAX_LAG_MS"] / 1000) * 2)
    response.set_cookie(COOKIE, str(lsn), max_age=max_age, httponly=True, samesite="Lax")


# --- state for operators and load balancers ---------------------------------------------------

bp = Blueprint("replicas", __name__)


@bp.get("/healthz/nodes")
@unlimited
def nodes():  # type: ignore[no-untyped-def]
    """This app process's view of the database nodes, from its cache (no query).

    Always 200 while the process serves requests: haproxy checks app servers with it, and an app
    server should not leave the rotation because a database is down (every app server would)."""
    router: Router | None = current_app.extensions.get("router")
    if router is None:
        return jsonify(routing=False, nodes=[{"name": "primary", "role": "primary"}])
    now = time.monotonic()
    return jsonify(
        routing=True,
        max_lag_ms=int(router.max_lag * 1000),
        rerouted=router.rerouted,
        nodes=[
            {
                "name": node.name,
                "role": "primary" if node.primary else "replica",
                "in_rotation": node.up(now),
                "position": format_lsn(node.replay) if node.replay else None,
                "lag_ms": None
                if node.primary or node.lag(now) == float("inf")
                else round(node.lag(now) * 1000),
                "pages": node.pages,
            }
            for node in router.nodes
        ],
    )


def replica_urls(config: dict[str, Any]) -> list[str]:
    raw = config.get("DATABASE_REPLICA_URLS") or []
    urls = raw.split(",") if isinstance(raw, str) else list(raw)
    return [url.strip() for url in urls if url.strip()]


def init_app(app: Flask) -> None:
    app.register_blueprint(bp)
    urls = replica_urls(app.config)
    if not urls:
        return
    if make_url(app.config["DATABASE_URL"]).get_backend_name() != "postgresql":
        # Only PostgreSQL's WAL positions tell whether a replica has a cursor's rows.
        log.warning("DATABASE_REPLICA_URLS is ignored: replicas are used only with a PostgreSQL primary")
        return
    for url in urls:
        if make_url(url).get_backend_name() != "postgresql":
            raise RuntimeError("DATABASE_REPLICA_URLS must list PostgreSQL standbys of DATABASE_URL")
    timeout = app.config.get("STATEMENT_TIMEOUT_MS")
    router = Router(
        app.extensions["engine"],
        # No pre-ping: a read's first statement (the position) is the ping, and a failure there
        # moves the read to another node (one round trip per page saved).
        [
            make_engine(url, statement_timeout_ms=timeout, pre_ping=False, **client_bounds(app.config))
            for url in urls
        ],
        max_lag_ms=int(app.config["REPLICA_MAX_LAG_MS"]),
    )
    app.extensions["router"] = router
    app.extensions["sessionmaker"] = RoutingSessionMaker(
        app.extensions["engine"], expire_on_commit=False, class_=RoutingSession
    )
    app.before_request(_route_read)
    app.after_request(_after)
    reads = {e: kind for e, view in app.view_functions.items() if (kind := read_kind(view))}
    app.extensions["list_reads"] = reads
    for endpoint in reads:
        app.view_functions[endpoint] = _retry_elsewhere(app.view_functions[endpoint])
