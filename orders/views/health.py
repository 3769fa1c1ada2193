"""Health for load balancers, orchestrators and operators.

/healthz/live  liveness: this process serves requests. It touches nothing (no database, no Redis,
               no cache): an orchestrator that restarts a process failing it restarts only a
               process that is stuck, never one whose database is away (a restart cures nothing).
/healthz       readiness: the database answers within HEALTHZ_TIMEOUT_MS (hung or refused: 503
               `unavailable` naming it). Redis (the rate-limit counters) not answering is
               "degraded", still 200: reads and writes go on with limits counted per process
               (orders/web/limits.py), so a balancer must not take every server out of rotation
               during a Redis outage users never notice.
/healthz/nodes this process's view of the database nodes; /healthz/settings what a tester reads.

Readiness is checked one check at a time per process, and a ready answer is given again for a
second (READY_FOR_S): a balancer polling every server every second, or a storm of probes, opens at
most one database connection and one Redis connection per process and second. A failed check is
given only to the probes that waited for it: the first probe after it checks again, so a database
back up is seen at once, and a frozen one still costs one connection attempt at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from flask import Blueprint, Flask, current_app, jsonify
from flask.typing import ResponseReturnValue
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from orders.core.errors import ApiError
from orders.data.replicas.lsn import format_lsn
from orders.data.replicas.router import Router
from orders.web.routes import unlimited

log = logging.getLogger(__name__)
bp = Blueprint("health", __name__)

# How long one readiness answer is given again (seconds): a load balancer's check interval is
# a second at the shortest, and a cached answer costs no connection.
READY_FOR_S = 1.0


@bp.get("/healthz/live")
@unlimited
def live() -> ResponseReturnValue:
    # Answered: the process serves. Nothing else is asked.
    return jsonify(status="ok")


@bp.get("/healthz")
@unlimited
def healthz() -> ResponseReturnValue:
    readiness = _checked(current_app._get_current_object())  # type: ignore[attr-defined]  # Flask's proxy
    if readiness.database is not None:
        bound = current_app.config["HEALTHZ_TIMEOUT_MS"]
        raise ApiError("unavailable", f"not ready: the database is not answering within {bound} ms")
    if readiness.redis is not None:
        return jsonify(status="degraded", degraded=["rate_limit_storage"])
    return jsonify(status="ok")


@dataclass
class Readiness:
    """One check's findings: why each dependency failed (None: it answered), and when."""

    database: str | None = None
    redis: str | None = None
    at: float = float("-inf")


@dataclass
class _Cache:
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: Readiness = field(default_factory=Readiness)


def _checked(app: Flask) -> Readiness:
    """The readiness of `app`: the last check's if it ended after this request arrived (it waited
    for it, bounded by the checks' own timeouts) or found the database ready less than
    READY_FOR_S ago; else checked now. Checks run one at a time."""
    cache: _Cache = app.extensions.setdefault("readiness", _Cache())
    arrived = time.monotonic()
    with cache.lock:
        last = cache.last
        if last.at >= arrived or (last.database is None and arrived - last.at < READY_FOR_S):
            return last
        found = Readiness(database=_database(), redis=_redis())
        found.at = time.monotonic()
        failed = {name: why for name, why in (("database", found.database), ("redis", found.redis)) if why}
        if failed:
            # The driver's words (hosts, ports) go to the log only, as for every other error.
            log.warning("%s: %s", "not ready" if found.database else "degraded", failed)
        cache.last = found
        return found


def _database() -> str | None:
    try:
        with current_app.extensions["health_engine"].connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as err:
        return str(getattr(err, "orig", None) or err).strip().splitlines()[0][:200] or type(err).__name__
    return None


def _redis() -> str | None:
    uri: str = current_app.config["RATELIMIT_STORAGE_URI"]
    if uri.startswith("memory"):
        return None
    import redis

    seconds = current_app.config["HEALTHZ_TIMEOUT_MS"] / 1000
    # redis+unix:// is the limits library's name for a socket (orders/core/settings.py StorageUri
    # takes it); redis-py calls it unix://, as limits itself tells redis-py. Given as it was, it
    # raised ValueError here: every /healthz a 500 while the limits worked.
    if uri.startswith("redis+unix://"):
        uri = "unix://" + uri.removeprefix("redis+unix://")
    client = redis.Redis.from_url(uri, socket_timeout=seconds, socket_connect_timeout=seconds)
    try:
        client.ping()
    except redis.RedisError as err:
        return f"{type(err).__name__}: {err}"[:200]
    finally:
        client.close()
    return None


# The settings that shape what a reader's browser sees, read-only: a browser test aimed at a
# deployment (BASE_URL, tests/live.py) reads them instead of setting them. Nothing secret and
# nothing about the servers behind: only how the list pages, loads and polls.
READER_SETTINGS = (
    "PAGE_SIZE",
    "AUTO_PAGES",
    "MAX_ROWS_IN_PAGE",
    "NEW_ORDERS_POLL_SECONDS",
    "STREAMS_PER_PROCESS",
)


@bp.get("/healthz/settings")
@unlimited
def settings() -> ResponseReturnValue:
    return jsonify({name: current_app.config[name] for name in READER_SETTINGS})


@bp.get("/healthz/nodes")
@unlimited
def nodes() -> ResponseReturnValue:
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
