"""/healthz's checks: each dependency answers within HEALTHZ_TIMEOUT_MS, or the server is unhealthy.

A dependency that hangs (a frozen database or Redis) is as unhealthy as one that refuses, and is
reported within the same bound: the database through its own engine (orders/db.health_engine,
one fresh connection per check), Redis by a PING with socket timeouts of that bound. A load
balancer that checks /healthz takes the server out of rotation and puts it back when both answer.
"""

from __future__ import annotations

import logging

from flask import current_app
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from .errors import ApiError

log = logging.getLogger(__name__)


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
