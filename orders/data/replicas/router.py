"""What one app process knows of each database node, and the choice of a node for each read."""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from dataclasses import dataclass, field

from flask import Flask
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from orders.core.errors import ApiError
from orders.data.db import bound_reads, client_bounds, make_engine
from orders.data.replicas.lsn import PRIMARY_LSN_SQL, REPLICA_LSN_SQL, format_lsn, parse_lsn
from orders.data.replicas.session import RoutingSession, RoutingSessionMaker

log = logging.getLogger(__name__)

# How long cached replica LSNs are trusted before a request refreshes them. Stale values are
# always safe (LSNs only grow while a server runs; see NodeState.same_run), they only send
# more reads to the primary.
REFRESH_SECONDS = 0.1
# A node that failed is left out for this long, then probed again.
RETRY_SECONDS = 1.0
# With the primary down, how long a read waits for a replica to replay its cursor's LSN, or
# for a primary to answer again: long enough for Patroni to fail over after a PostgreSQL crash
# (2.7 to 4.3 s measured by bench-cluster on loopback), not for a whole host lost (the leader key's
# time to live: 30 s by default); that read then answers 503 with Retry-After.
PRIMARY_DOWN_WAIT_SECONDS = 5.0
# An LSN probe's own bound on the client side (see probe_engine).
PROBE_READ_TIMEOUT_MS = 3000

# Marks a read that went back to the primary once after failing there (see _without_primary).
PRIMARY_AGAIN = "primary, again"


def probe_engine(engine: Engine) -> Engine:
    """A small engine for LSN probes: autocommit and no pre-ping, so a probe is one round
    trip (through the request engine it was four: ping, BEGIN, query, ROLLBACK). A dead connection
    fails the probe, which takes the node out of rotation; SQLAlchemy drops that connection, and
    the next probe reconnects. A frozen node fails it too, after PROBE_READ_TIMEOUT_MS: its
    statement_timeout never fires, and without the client's bound a probe (and the read that
    refreshed) waited for as long as the node stayed frozen."""
    probes = create_engine(
        engine.url,
        isolation_level="AUTOCOMMIT",
        pool_size=1,
        max_overflow=4,
        connect_args={"connect_timeout": 2, "options": "-c statement_timeout=2000"},
    )
    bound_reads(probes, PROBE_READ_TIMEOUT_MS)
    return probes


@dataclass
class NodeState:
    """What one app process knows about a node. Every field only ever errs on the safe side."""

    name: str
    engine: Engine
    primary: bool = False
    replay: int = 0  # a lower bound of the LSN the node has replayed (written, on the primary)
    caught_up_at: float = float("-inf")  # monotonic time at which it had all the primary had
    down_until: float = 0.0
    pages: int = 0
    probe_engine: Engine | None = None  # see probe_engine()
    leading: bool = False  # a replica URL whose node was last seen out of recovery (see _probe)
    started_at: str | None = None  # its server's start time, as the last probe or page read it

    def up(self, now: float) -> bool:
        return now >= self.down_until

    def lag(self, now: float) -> float:
        """Seconds since this replica was last seen holding everything the primary had written.

        Measured as: read the primary's LSN at time T, then the replica's; if the replica has
        replayed at least that far, every commit acknowledged before T is on the replica. So a
        first page read there misses nothing committed more than `lag` before it. (Replay
        timestamps would report an idle, fully caught-up replica as lagging, and a replica that
        lost its connection to the primary as current.)
        """
        return now - self.caught_up_at

    def seen(self, lsn: int) -> None:
        self.replay = max(self.replay, lsn)

    def same_run(self, started_at: str | None) -> bool:
        """Is the server the one whose LSNs are known (not started again since)? If not,
        what was known is forgotten and this run's start is kept."""
        if started_at is None or started_at == self.started_at:
            return True
        known = self.started_at is not None
        self.started_at = started_at
        self.replay = 0
        self.caught_up_at = float("-inf")
        return not known

    def diverged(self) -> None:
        """Seen past the primary's LSN: on a timeline of its own (a former primary not yet
        rewound), holding none of what the primary wrote since the fork. No reads until it
        follows the primary again."""
        self.replay = 0
        self.caught_up_at = float("-inf")


@dataclass
class Route:
    node: NodeState
    # Why this node (Router.choose): "standby" (a replica had the LSN), "behind" (the
    # replicas up were all behind it: the primary), "no_standby" (none up: the primary),
    # "primary_down" (the primary down: the freshest replica, or a promoted primary).
    reason: str = "standby"
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
        """The node's LSN now, or None (and out of rotation for a while) if it fails."""
        try:
            with (node.probe_engine or node.engine).connect() as conn:
                if node.primary:
                    lsn, started_at = parse_lsn(conn.execute(text(PRIMARY_LSN_SQL)).scalar()), None
                else:
                    replayed, started_at = conn.execute(text(REPLICA_LSN_SQL)).one()
                    lsn = parse_lsn(replayed)
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
        node.same_run(started_at)
        node.seen(lsn)
        return lsn

    def refresh(self, *, force: bool = False) -> None:
        """Re-read every node's LSN (at most every REFRESH_SECONDS unless forced).

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
            # The primary first: a replica that has replayed this LSN afterwards holds every
            # commit acknowledged before `started`.
            primary_lsn = self._probe(self.primary) if self.primary.up(now) or force else None
            ahead = []
            for node in self.replicas:
                if not node.up(now) and not force:
                    continue
                lsn = self._probe(node)
                if lsn is not None and primary_lsn is not None and lsn >= primary_lsn:
                    node.caught_up_at = started
                    if lsn > primary_lsn:
                        ahead.append((node, lsn))
            if ahead:
                self._drop_diverged(ahead)
        finally:
            self._lock.release()

    def _drop_diverged(self, ahead: list[tuple[NodeState, int]]) -> None:
        """Replicas read past the primary's LSN: legitimate if the primary wrote meanwhile,
        so ask the primary again. A standby of this primary never replays past what the primary
        has written by a later moment; one still past it is on another timeline."""
        primary_lsn = self._probe(self.primary)
        if primary_lsn is None:
            return
        for node, lsn in ahead:
            if lsn > primary_lsn:
                node.diverged()
                why = f"past the primary's LSN ({format_lsn(lsn)}): another timeline"
                self.mark_down(node, None, why=why)

    def mark_down(self, node: NodeState, err: Exception | None, *, why: str | None = None) -> None:
        if node.up(time.monotonic()):
            why = why or (str(err).splitlines()[0][:200] if err else "not in the expected recovery state")
            log.warning("%s out of rotation for %.0f s: %s", node.name, RETRY_SECONDS, why)
        node.down_until = time.monotonic() + RETRY_SECONDS

    # --- choosing ------------------------------------------------------------------------

    def _ready(self, node: NodeState, need: int | None, first_page: bool, now: float) -> bool:
        if need is not None and node.replay < need:
            return False
        return not first_page or node.lag(now) <= self.max_lag

    def choose(self, need: int | None, *, first_page: bool, exclude: set[str]) -> Route:
        """The route for a read that must see LSN `need` (cursor or own write), or a first
        page: the node, and why it (Route.reason).

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
                return Route(node)
        # Cached LSNs may just be old (another app process read the last page): ask the
        # replicas that are behind `need` once, before the snapshot is taken.
        if need is not None:
            for node in candidates:
                if (
                    node.replay < need
                    and self._probe(node) is not None
                    and self._ready(node, need, first_page, now)
                ):
                    return Route(node)
        if self.replicas:
            self.rerouted += 1
        if self.primary.name not in exclude and self.primary.up(now):
            return Route(self.primary, "behind" if candidates else "no_standby")
        return Route(self._without_primary(need, exclude), "primary_down")

    def _without_primary(self, need: int | None, exclude: set[str]) -> NodeState:
        """The primary is down: nothing new can be committed, so the replica that has replayed the
        most is as fresh as any read can be. A cursor's LSN must still be reached: a clean
        primary shutdown sends its last WAL to the standbys, so wait for them briefly.

        A failover ends the wait at once: DATABASE_URL may name several hosts (libpq's
        `target_session_attrs=read-write`), so the primary answers again once a standby is
        promoted. It holds every acknowledged commit, so it reads any cursor's next page, also
        one stamped with the old primary's LSN, which the new timeline may not reach yet."""
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


def init_app(app: Flask) -> None:
    """With DATABASE_REPLICA_URLS on a PostgreSQL primary: the Router in app.extensions["router"]
    and sessions that read where a request's read was routed (orders/web/read_routing.py)."""
    urls = list(app.config["DATABASE_REPLICA_URLS"])
    if not urls:
        return
    if make_url(app.config["DATABASE_URL"]).get_backend_name() != "postgresql":
        # Only PostgreSQL's LSNs tell whether a replica has a cursor's rows.
        log.warning("DATABASE_REPLICA_URLS is ignored: replicas are used only with a PostgreSQL primary")
        return
    for url in urls:
        if make_url(url).get_backend_name() != "postgresql":
            raise RuntimeError("DATABASE_REPLICA_URLS must list PostgreSQL standbys of DATABASE_URL")
    timeout = app.config.get("STATEMENT_TIMEOUT_MS")
    router = Router(
        app.extensions["engine"],
        # No pre-ping: a read's first statement (the LSN) is the ping, and a failure there
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
