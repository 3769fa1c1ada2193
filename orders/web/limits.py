"""Rate limits per client (the `limits` library): a generous budget for reads, a tight one for writes.

Each budget is shared by every route of its kind (an application limit), keyed by the client's
address: a client paging through the list and polling for new orders spends one read budget.
The limits are read from the app's configuration on every request (RATELIMIT_READS,
RATELIMIT_WRITES), so a test or an operator can change them on a running app. Counters live in
memory by default (each process counts alone) or, with RATELIMIT_STORAGE_URI=redis://..., in
Redis, shared by every process and app server that points at it. Over the limit: 429
`rate_limited` with Retry-After, in the same JSON or HTML error format as every other error.
Routes marked @unlimited (health) and static files spend nothing; neither does a URL no route
matches (a 404 costs the app less than counting it would).

One check a request, before the view (`RateLimits.check`): the budget's limits (parsed once per
string), the client's key, one `hit` of each limit by the moving-window strategy. This was
Flask-Limiter, whose per-request bookkeeping (its context, exemption scopes, limit managers,
deductions and header injection, none of which the app uses) was a tenth of a JSON page's CPU
and needed five overrides of its private parts; the counting was always `limits`'.

A Redis that refuses or stops answering must not take the app down with it: the process counts
in memory meanwhile and looks at Redis again after 1, 2, 4, ... 32 s (then 1 s again); each
process says each switch once, in order, in the log ("orders.limits"), and /metrics shows it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, cast

from flask import Flask, current_app, request
from flask.typing import ResponseReturnValue
from limits import RateLimitItem, parse_many
from limits.storage import MemoryStorage, Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from orders.core.errors import ApiError
from orders.core.settings import masked
from orders.web.errors import error_response
from orders.web.routes import is_unlimited

READ_METHODS = ("GET", "HEAD", "OPTIONS")
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")

# The budgets, the storage and the key prefix are settings (orders/core/settings.py, RATELIMIT_*).
# Looks at a lost storage: after 2**0, 2**1, ... 2**MAX_BACKOFF seconds, then from 1 s again.
MAX_BACKOFF = 5

switch_log = logging.getLogger("orders.limits")
# The client's address when the WSGI server gives none (a test client, a Unix socket).
NO_ADDRESS = "127.0.0.1"


class RateLimited(Exception):
    """Over a budget: the limit spent, the seconds until the window has room, reads or writes."""

    def __init__(self, limit: RateLimitItem, wait: int, kind: str) -> None:
        super().__init__(f"{kind}: {limit}")
        self.limit, self.wait, self.kind = limit, wait, kind


def _storage_options(app: Flask) -> dict[str, Any]:
    """redis-py's socket timeouts, so a hung Redis (kill -STOP, a partition) is a refused one:
    without them a request waits on it without limit. Nothing for memory://."""
    if app.config["RATELIMIT_STORAGE_URI"].startswith("memory"):
        return {}
    seconds = app.config["RATELIMIT_STORAGE_TIMEOUT_MS"] / 1000
    return {"socket_timeout": seconds, "socket_connect_timeout": seconds}


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


class RateLimits:
    """The app's rate limits: its storage, the memory it falls back to, and the one check."""

    def __init__(self, app: Flask) -> None:
        uri: str = app.config["RATELIMIT_STORAGE_URI"]
        self._prefix: str = app.config["RATELIMIT_KEY_PREFIX"]
        # Synchronous for a synchronous URI (limits' async storages have schemes of their own).
        self._storage = cast(Storage, storage_from_string(_storage_uri(app), **_storage_options(app)))
        # A moving window: no burst of twice the limit across a window boundary.
        self._limiter = MovingWindowRateLimiter(self._storage)
        # Only a storage that can be lost has a fallback: memory:// is one already.
        self.fallback_enabled = not uri.startswith("memory")
        self._fallback = MovingWindowRateLimiter(InlineExpiryMemory()) if self.fallback_enabled else None
        self._storage_shown = masked(uri)
        self._lock = threading.Lock()
        self._in_memory = False
        self._looks = 0  # looks at the lost storage since it was lost (the backoff's exponent)
        self._last_look = 0.0
        self._parsed: dict[str, list[RateLimitItem]] = {}

    @property
    def in_memory(self) -> bool:
        """Whether this process counts in memory because its storage was lost."""
        return self._in_memory

    def switch(self, in_memory: bool) -> None:
        """Count in memory (the storage lost) or in the storage again: one log line per change,
        whichever threads notice it at once, written under the lock so two switches in quick
        succession are logged in their order."""
        with self._lock:
            if in_memory == self._in_memory:
                return
            self._in_memory = in_memory
            self._looks, self._last_look = 0, time.monotonic()
            fields = {"storage": self._storage_shown, "rate_limits": "memory" if in_memory else "shared"}
            if in_memory:
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

    def check(self) -> None:
        """Before every view: spend one of the budget of the request's kind, or RateLimited."""
        method = request.method
        if method in READ_METHODS:
            budget, kind = current_app.config["RATELIMIT_READS"], "reads"
        elif method in WRITE_METHODS:
            budget, kind = current_app.config["RATELIMIT_WRITES"], "writes"
        else:
            return
        endpoint = request.endpoint
        if endpoint is None or endpoint == "static" or is_unlimited(current_app.view_functions.get(endpoint)):
            return
        limits = self._parsed.get(budget)
        if limits is None:  # a setting changed on a running app: its string parsed once
            limits = self._parsed[budget] = sorted(parse_many(budget))
        key = request.remote_addr or NO_ADDRESS
        identifiers = (self._prefix, key, kind) if self._prefix else (key, kind)
        if self._in_memory and self._storage_is_back():
            self.switch(False)
        if not self._in_memory:
            try:
                self._spend(self._limiter, limits, identifiers, kind)
                return
            except RateLimited:
                raise
            except Exception:  # the storage's client raised: Redis refused, timed out, went away
                if self._fallback is None:
                    raise
                self.switch(True)
        assert self._fallback is not None  # in memory only where there is a fallback
        self._spend(self._fallback, limits, identifiers, kind)

    @staticmethod
    def _spend(
        limiter: MovingWindowRateLimiter, limits: list[RateLimitItem], identifiers: tuple[str, ...], kind: str
    ) -> None:
        for limit in limits:
            if not limiter.hit(limit, *identifiers):
                reset_at = limiter.get_window_stats(limit, *identifiers).reset_time
                # Seconds until the window has room again: at least 1, as Retry-After is whole seconds.
                raise RateLimited(limit, max(1, math.ceil(reset_at - time.time())), kind)

    def _storage_is_back(self) -> bool:
        """Whether the lost storage answers, asked at most once per backoff step, by one thread."""
        now = time.monotonic()
        with self._lock:
            if self._looks > MAX_BACKOFF:
                self._looks = 0
            if now - self._last_look <= 2**self._looks:
                return False
            self._last_look, self._looks = now, self._looks + 1
        try:
            return bool(self._storage.check())
        except Exception:  # a client that raises instead of answering False: still lost
            return False


def init_app(app: Flask) -> RateLimits:
    # One per app (not a module-level one): its storage belongs to the app, so two apps in one
    # process (tests, or two configurations) never share counters by accident.
    limits = RateLimits(app)
    app.extensions["rate_limiter"] = limits
    app.before_request(limits.check)

    @app.errorhandler(RateLimited)
    def _rate_limited(err: RateLimited) -> ResponseReturnValue:
        return error_response(
            ApiError(
                "rate_limited",
                f"too many {err.kind} from this client (limit {err.limit}); retry in {err.wait} s",
                headers={"Retry-After": str(err.wait)},
            )
        )

    return limits
