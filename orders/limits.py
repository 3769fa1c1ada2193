"""Rate limits per client (Flask-Limiter): a generous budget for reads, a tight one for writes.

Each budget is shared by every route of its kind (an application limit), keyed by the client's
address: a client paging through the list and polling for new orders spends one read budget.
The limits are read from the app's configuration on every request (RATELIMIT_READS,
RATELIMIT_WRITES), so a test or an operator can change them on a running app. Counters live in
memory by default (each process counts alone) or, with RATELIMIT_STORAGE_URI=redis://..., in
Redis, shared by every process and app server that points at it. Over the limit: 429
`rate_limited` with Retry-After, in the same JSON or HTML error format as every other error.
"""

from __future__ import annotations

import math
import time
from typing import Any

from flask import Flask, current_app, request
from flask_limiter import ApplicationLimit, Limiter, RateLimitExceeded
from flask_limiter.util import get_remote_address

from .errors import ApiError, error_response
from .routes import is_unlimited

READ_METHODS = ("GET", "HEAD", "OPTIONS")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")

# The budgets, the storage and the key prefix are settings (orders/settings.py, RATELIMIT_*).
# A moving window: no burst of twice the limit across a window boundary.
STRATEGY = "moving-window"


def _reads() -> str:
    reads: str = current_app.config["RATELIMIT_READS"]
    return reads


def _writes() -> str:
    writes: str = current_app.config["RATELIMIT_WRITES"]
    return writes


def _exempt() -> bool:
    # Health routes say so at the route (orders/routes.py); static files are cheap and cached.
    return request.endpoint == "static" or is_unlimited(
        current_app.view_functions.get(request.endpoint or "")
    )


def _storage_options(app: Flask) -> dict[str, Any]:
    """redis-py's socket timeouts, so a hung Redis (kill -STOP, a partition) is a refused one:
    without them a request waits on it without limit. Nothing for memory://."""
    if app.config["RATELIMIT_STORAGE_URI"].startswith("memory"):
        return {}
    seconds = app.config["RATELIMIT_STORAGE_TIMEOUT_MS"] / 1000
    return {"socket_timeout": seconds, "socket_connect_timeout": seconds}


def init_app(app: Flask) -> Limiter:
    # One Limiter per app (not a module-level one): its storage belongs to the app, so two apps
    # in one process (tests, or two configurations) never share counters by accident.
    limiter = Limiter(
        get_remote_address,
        application_limits=[
            ApplicationLimit(_reads, scope="reads", methods=READ_METHODS, exempt_when=_exempt),
            ApplicationLimit(_writes, scope="writes", methods=WRITE_METHODS, exempt_when=_exempt),
        ],
        storage_uri=app.config["RATELIMIT_STORAGE_URI"],
        storage_options=_storage_options(app),
        strategy=STRATEGY,
        key_prefix=app.config["RATELIMIT_KEY_PREFIX"],
        # A Redis that refuses or stops answering must not take the app down with it: count in
        # memory meanwhile, per process, until Redis is back. Flask-Limiter logs the switch once
        # ("Rate limit storage unreachable - falling back to in-memory storage"), then asks Redis
        # again after 1, 2, 4, ... 32 s and logs "Rate limit storage recovered" when it answers.
        in_memory_fallback_enabled=not app.config["RATELIMIT_STORAGE_URI"].startswith("memory"),
    )
    limiter.init_app(app)
    app.extensions["rate_limiter"] = limiter

    @app.errorhandler(RateLimitExceeded)
    def _rate_limited(err: RateLimitExceeded):  # type: ignore[no-untyped-def]
        current = limiter.current_limit
        # Seconds until the window has room again: at least 1, as Retry-After is whole seconds.
        wait = max(1, math.ceil(current.reset_at - time.time())) if current else 1
        kind = "writes" if request.method in WRITE_METHODS else "reads"
        return error_response(
            ApiError(
                "rate_limited",
                f"too many {kind} from this client (limit {err.description}); retry in {wait} s",
                headers={"Retry-After": str(wait)},
            )
        )

    return limiter
