"""Health for load balancers and operators: /healthz checks each dependency, /healthz/nodes shows
this process's view of the database nodes, /healthz/settings the list's settings a tester reads.

/healthz: each dependency answers within HEALTHZ_TIMEOUT_MS, or the server is unhealthy.

A dependency that hangs (a frozen database or Redis) is as unhealthy as one that refuses, and is
reported within the same bound: the database through its own engine (orders/data/db.py health_engine,
one fresh connection per check), Redis by a PING with socket timeouts of that bound. A load
balancer that checks /healthz takes the server out of rotation and puts it back when both answer.
"""

from __future__ import annotations

import logging
import time

from flask import Blueprint, current_app, jsonify
from flask.typing import ResponseReturnValue
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from orders.core.errors import ApiError
from orders.data.replicas.lsn import format_lsn
from orders.data.replicas.router import Router
from orders.web.routes import unlimited

log = logging.getLogger(__name__)
bp = Blueprint("health", __name__)


@bp.get("/healthz")
@unlimited
def healthz() -> ResponseReturnValue:
    # Each dependency within HEALTHZ_TIMEOUT_MS, hung or refused: 503 `unavailable` otherwise.
    check()
    return jsonify(status="ok")


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
    client = redis.Redis.from_url(uri, socket_timeout=seconds, socket_connect_timeout=seconds)
    try:
        client.ping()
    except redis.RedisError as err:
        return f"{type(err).__name__}: {err}"[:200]
    finally:
        client.close()
    return None


def check() -> None:
    """Nothing when every dependency answered; else ApiError 503 `unavailable` naming each
    one that did not (why goes to the log)."""
    problems = {"database": _database(), "rate_limit_storage": _redis()}
    failed = {name: why for name, why in problems.items() if why}
    if failed:
        # The driver's words (hosts, ports) go to the log only, as for every other error.
        log.warning("unhealthy: %s", failed)
        bound = current_app.config["HEALTHZ_TIMEOUT_MS"]
        raise ApiError(
            "unavailable",
            f"unhealthy: {', '.join(failed)} not answering within {bound} ms",
        )


# The settings that shape what a reader's browser sees, read-only: a browser test aimed at a
# deployment (BASE_URL, tests/live.py) reads them instead of setting them. Nothing secret and
# nothing about the servers behind: only how the list pages, loads and polls.
READER_SETTINGS = ("PAGE_SIZE", "AUTO_PAGES", "MAX_ROWS_IN_PAGE", "NEW_ORDERS_POLL_SECONDS")


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
