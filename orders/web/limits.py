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

import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from flask import Flask, current_app, request
from flask.typing import ResponseReturnValue
from flask_limiter import ApplicationLimit, Limiter, RateLimitExceeded
from flask_limiter._limits import RuntimeLimit  # what ApplicationLimit yields: typing only
from flask_limiter._manager import LimitManager
from flask_limiter.util import get_remote_address
from limits.storage import MemoryStorage

from orders.core.errors import ApiError
from orders.core.settings import masked
from orders.web.errors import error_response
from orders.web.routes import is_unlimited

READ_METHODS = ("GET", "HEAD", "OPTIONS")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")

# The budgets, the storage and the key prefix are settings (orders/core/settings.py, RATELIMIT_*).
# A moving window: no burst of twice the limit across a window boundary.
STRATEGY = "moving-window"


def _reads() -> str:
    reads: str = current_app.config["RATELIMIT_READS"]
    return reads


def _writes() -> str:
    writes: str = current_app.config["RATELIMIT_WRITES"]
    return writes


def _exempt() -> bool:
    # Health routes say so at the route (orders/web/routes.py); static files are cheap and cached.
    return request.endpoint == "static" or is_unlimited(
        current_app.view_functions.get(request.endpoint or "")
    )


class _ParsedOnce(ApplicationLimit):
    """An application limit whose budget string is parsed once per value, not once per request.

    Flask-Limiter parses the string its callable returns on every request (`parse_many`), for
    every application limit, the writes' too on a read: a tenth of the limiter's time in a
    fragment's profile. Here the limits made from one string are kept (the setting may still
    change on a running app: a new string is parsed once), and a request of another method gets
    none (Flask-Limiter would make them and then skip them as `method_exempt`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._made: dict[str, list[RuntimeLimit]] = {}

    def __iter__(self) -> Iterator[RuntimeLimit]:
        if self.methods and request.method.lower() not in self.methods:
            return iter(())
        budget = self.limit_provider() if callable(self.limit_provider) else self.limit_provider
        made = self._made.get(budget)
        if made is None:
            made = self._made[budget] = list(super().__iter__())
        return iter(made)


class _KeptScopes(LimitManager):
    """Flask-Limiter's limit manager with what routes and blueprints declared read once.

    On every request Flask-Limiter worked out the route's exemption scope twice and its
    blueprint's limits once (the blueprint's and its ancestors' exemptions, sets and flag
    arithmetic each time: a fifth of the limiter's time in a fragment's profile), though they
    change only when a route or blueprint is declared exempt or limited. Here the scope is kept
    per (endpoint, blueprint) until such a declaration, and a blueprint's limits, when no
    blueprint declared any, are none without the walk. What a request is limited by is the same
    (the budgets themselves are still read per request, _ParsedOnce)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._scopes: dict[tuple[str | None, str | None], Any] = {}

    @classmethod
    def replacing(cls, made: LimitManager) -> _KeptScopes:
        """The same manager (its declarations, the same objects) as a _KeptScopes."""
        kept = cls(
            made._application_limits,
            made._default_limits,
            made._decorated_limits,
            made._blueprint_limits,
            made._route_exemptions,
            made._blueprint_exemptions,
        )
        kept._endpoint_hints = made._endpoint_hints
        return kept

    def exemption_scope(self, app: Flask, endpoint: str | None, blueprint: str | None) -> Any:
        key = (endpoint, blueprint)
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = super().exemption_scope(app, endpoint, blueprint)
        return scope

    def blueprint_limits(self, app: Flask, blueprint: str) -> list[RuntimeLimit]:
        if not self._blueprint_limits:  # no blueprint declared a limit: there are none to find
            return []
        return super().blueprint_limits(app, blueprint)

    def add_route_exemption(self, route: str, scope: Any) -> None:
        super().add_route_exemption(route, scope)
        self._scopes.clear()

    def add_blueprint_exemption(self, blueprint: str, scope: Any) -> None:
        super().add_blueprint_exemption(blueprint, scope)
        self._scopes.clear()


# Loudly, at import, if a new Flask-Limiter release changed what _KeptScopes builds on.
if not all(hasattr(LimitManager, n) for n in ("exemption_scope", "blueprint_limits", "add_route_exemption")):
    raise ImportError("flask_limiter's LimitManager changed: revisit orders/web/limits.py _KeptScopes")


def _storage_options(app: Flask) -> dict[str, Any]:
    """redis-py's socket timeouts, so a hung Redis (kill -STOP, a partition) is a refused one:
    without them a request waits on it without limit. Nothing for memory://."""
    if app.config["RATELIMIT_STORAGE_URI"].startswith("memory"):
        return {}
    seconds = app.config["RATELIMIT_STORAGE_TIMEOUT_MS"] / 1000
    return {"socket_timeout": seconds, "socket_connect_timeout": seconds}


# Flask-Limiter's own lines for the two switches: dropped (_WithoutSwitchLines), the app writes its
# own (_FallbackForEveryThread._storage_dead), once per switch, naming the storage (masked).
FALLBACK_MESSAGE = "Rate limit storage unreachable - falling back to in-memory storage"
RECOVERED_MESSAGE = "Rate limit storage recovered"
switch_log = logging.getLogger("orders.limits")


class _WithoutSwitchLines(logging.LoggerAdapter):  # type: ignore[type-arg]  # generic only in typeshed
    """Flask-Limiter's logger less its two switch lines, which it writes wherever it flips its
    flag (a failed check, a failed header, a backend check that answers), each behind a
    check-then-set that threads pass together: one switch was logged up to three times by one
    process, a recovery twice. Its other lines (a swallowed error) pass."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if msg not in (FALLBACK_MESSAGE, RECOVERED_MESSAGE):
            super().log(level, msg, *args, **kwargs)


class _FallbackForEveryThread(Limiter):
    """Flask-Limiter switches to memory in the thread whose Redis call failed first; threads that
    were already waiting on the same Redis failed after the switch and re-raised, a 500 each (5
    of 50 requests under 8 readers when Redis was frozen). Here such a thread counts in memory
    too.

    The switch itself is Flask-Limiter's flag `_storage_dead`, set wherever it notices (a failed
    check, a failed header) and cleared when its backend check answers: here a property whose
    setter writes the app's one line when, and only when, the value changes, under a lock. So
    each process says each switch once, in order, whichever thread and code path made it."""

    def __init__(self, *args: Any, storage: str, **kwargs: Any) -> None:
        self._switch_lock = threading.Lock()
        self._in_memory = False
        self._storage_shown = masked(storage)
        super().__init__(*args, **kwargs)
        self.logger = _WithoutSwitchLines(self.logger)  # type: ignore[assignment]  # same methods
        self.limit_manager = _KeptScopes.replacing(self.limit_manager)

    @property
    def _storage_dead(self) -> bool:
        return self._in_memory

    @_storage_dead.setter
    def _storage_dead(self, dead: bool) -> None:
        with self._switch_lock:
            if dead == self._in_memory:
                return
            self._in_memory = dead
            # Written under the lock: two switches in quick succession are logged in their order.
            fields = {"storage": self._storage_shown, "rate_limits": "memory" if dead else "shared"}
            if dead:
                switch_log.warning(
                    "rate-limit storage %s unreachable - falling back to in-memory storage: each "
                    "process counts alone until it answers",
                    self._storage_shown,
                    extra={"fields": fields},
                )
            else:
                switch_log.info(
                    "rate-limit storage %s recovered: limits are shared through it again",
                    self._storage_shown,
                    extra={"fields": fields},
                )

    def _check_request_limit(self, callable_name: str | None = None, in_middleware: bool = True) -> None:
        try:
            super()._check_request_limit(callable_name, in_middleware)
        except RateLimitExceeded:
            raise
        except Exception:
            if not (self._in_memory_fallback_enabled and self._storage_dead):
                raise
            # Another thread switched while this one waited: count this request in memory.
            self.context.seen_limits.clear()
            super()._check_request_limit(callable_name, in_middleware)


class InlineExpiryMemory(MemoryStorage):
    """memory:// without a thread per request. limits' MemoryStorage starts a threading.Timer
    (a new thread, 10 ms) whenever its previous one has run, so a busy worker started one for
    nearly every request: 0.8 ms of a fragment's 5 ms of CPU (bench/http_level.py's profile).
    Here the same expiry runs inline, at most once a second; counting is MemoryStorage's own."""

    STORAGE_SCHEME = ["orders+memory"]  # noqa: RUF012  # the base class declares it so
    _EXPIRE = "_MemoryStorage__expire_events"  # MemoryStorage's private names: checked below

    def __init__(self, uri: str | None = None, wrap_exceptions: bool = False, **options: str) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self._next_expiry = 0.0

    def _MemoryStorage__schedule_expiry(self) -> None:  # replaces the Timer (name-mangled)
        now = time.monotonic()
        if now >= self._next_expiry:
            self._next_expiry = now + 1.0
            getattr(self, self._EXPIRE)()


# Loudly, at import, if a new limits release renamed what InlineExpiryMemory replaces.
if not all(
    hasattr(MemoryStorage, n) for n in ("_MemoryStorage__schedule_expiry", InlineExpiryMemory._EXPIRE)
):
    raise ImportError("limits.storage.MemoryStorage changed: revisit orders/web/limits.py InlineExpiryMemory")


def _storage_uri(app: Flask) -> str:
    uri: str = app.config["RATELIMIT_STORAGE_URI"]
    return uri.replace("memory://", "orders+memory://", 1) if uri.startswith("memory://") else uri


def init_app(app: Flask) -> Limiter:
    # One Limiter per app (not a module-level one): its storage belongs to the app, so two apps
    # in one process (tests, or two configurations) never share counters by accident.
    limiter = _FallbackForEveryThread(
        get_remote_address,
        application_limits=[
            _ParsedOnce(_reads, scope="reads", methods=READ_METHODS, exempt_when=_exempt),
            _ParsedOnce(_writes, scope="writes", methods=WRITE_METHODS, exempt_when=_exempt),
        ],
        storage_uri=_storage_uri(app),
        storage=app.config["RATELIMIT_STORAGE_URI"],
        storage_options=_storage_options(app),
        strategy=STRATEGY,
        key_prefix=app.config["RATELIMIT_KEY_PREFIX"],
        # A Redis that refuses or stops answering must not take the app down with it: count in
        # memory meanwhile, per process, until Redis is back: Flask-Limiter asks Redis again after
        # 1, 2, 4, ... 32 s. Each process logs each switch once ("orders.limits": "rate-limit
        # storage redis://... unreachable - falling back to in-memory storage" and "... recovered"),
        # into gunicorn's error log (gunicorn.conf.py).
        in_memory_fallback_enabled=not app.config["RATELIMIT_STORAGE_URI"].startswith("memory"),
    )
    limiter.init_app(app)
    app.extensions["rate_limiter"] = limiter

    @app.errorhandler(RateLimitExceeded)
    def _rate_limited(err: RateLimitExceeded) -> ResponseReturnValue:
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
