"""The app's Prometheus metrics (prometheus-client), and /metrics that serves them.

Under gunicorn every worker is a process of its own: with PROMETHEUS_MULTIPROC_DIR set
(gunicorn.conf.py sets it from METRICS_DIR, or a fresh temporary directory) each worker writes its
values to files there and /metrics, answered by any worker, adds up every worker's
(prometheus-client's multiprocess mode: MultiProcessCollector). Without it (flask run, tests in one
process) the default registry serves the one process. gunicorn's child_exit marks a dead worker
(mark_process_dead), so its live gauges (pool in use, Redis fallback) leave with it.

/metrics is for the operator's Prometheus on the app server's own address: the public front
(deploy/haproxy.cfg) answers it 404. METRICS=off installs none of this (the benchmark's baseline).

The families (docs/operations.md, "What to watch", says what each alert reads):
  orders_http_request_duration_seconds{kind,result}  every request: page, fragment, api, export,
                                                     write, other; 2xx, 3xx, 4xx, 5xx, 503
  orders_page_duration_seconds{depth,sort}           list reads answered 2xx: first page or deep
  orders_export_rows_total                           rows written into CSV exports
  orders_rate_limited_total{scope}                   429s (reads, writes)
  orders_ratelimit_fallback                          1 while a worker counts in memory (Redis lost)
  orders_db_pool_in_use{engine}                      connections checked out: primary, replicaN
  orders_db_pool_waiting{engine}                     threads waiting for a pooled connection
  orders_db_pool_timeouts_total{engine}              waits that ended without a connection
  orders_replica_reads_total{node}                   where routed list reads went: replica, or
                                                     primary (no replica had the position)
  orders_statement_timeouts_total{engine}            statements the database cancelled
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from flask import Flask, Response, current_app, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import TimeoutError as PoolTimeout

from orders.finding.sorts import DEFAULT_SORT, SORTS
from orders.web import request_log
from orders.web.routes import unlimited

# Latency buckets in seconds: a fragment takes a few ms, a deep page on a loaded server tens,
# the read timeout 15 s; p99 alerts (deploy/prometheus/alerts.yml) read 0.25 and 0.5.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0)

REQUESTS = Histogram(
    "orders_http_request_duration_seconds",
    "Time to the response's head (an export's first batch), by kind of request and result",
    ["kind", "result"],
    buckets=BUCKETS,
)
PAGES = Histogram(
    "orders_page_duration_seconds",
    "List reads answered 2xx (pages, fragments, the API) by depth (first page or deep) and sort",
    ["depth", "sort"],
    buckets=BUCKETS,
)
EXPORT_ROWS = Counter("orders_export_rows", "Rows written into CSV exports")
RATE_LIMITED = Counter("orders_rate_limited", "Requests refused 429 by the rate limit", ["scope"])
FALLBACK = Gauge(
    "orders_ratelimit_fallback",
    "1 while a worker counts rate limits in memory because Redis does not answer",
    multiprocess_mode="livemax",
)
POOL_IN_USE = Gauge(
    "orders_db_pool_in_use", "Pooled connections checked out", ["engine"], multiprocess_mode="livesum"
)
POOL_WAITING = Gauge(
    "orders_db_pool_waiting",
    "Threads in a pool checkout (waiting for a connection when this stays above 0)",
    ["engine"],
    multiprocess_mode="livesum",
)
POOL_TIMEOUTS = Counter(
    "orders_db_pool_timeouts", "Checkouts that got no connection within DATABASE_POOL_TIMEOUT_S", ["engine"]
)
REPLICA_READS = Counter(
    "orders_replica_reads",
    "Routed list reads by where they ran (replica, primary) and why (orders/data/replicas/router.py "
    "Route.reason: standby, behind, no_standby, primary_down)",
    ["node", "reason"],
)
STATEMENT_TIMEOUTS = Counter(
    "orders_statement_timeouts", "Statements the database cancelled (STATEMENT_TIMEOUT_MS)", ["engine"]
)

_SORTS = frozenset(SORTS)
# Cancelled by statement_timeout: PostgreSQL's SQLSTATE, MariaDB's and MySQL's error numbers.
_PG_CANCELLED = "57014"
_MYSQL_TIMEOUTS = frozenset({1969, 3024})


def install(app: Flask) -> None:
    """After request_log.install (its clock starts before anything else runs: a 429 is timed
    too): each answer observed; the engines' pools and statement errors watched."""
    if app.config["METRICS"] != "on":
        return
    app.after_request(_observe)
    app.add_url_rule("/metrics", "metrics", unlimited(_metrics_view))
    watch_engine(app.extensions["engine"], "primary")
    router = app.extensions.get("router")
    for node in router.replicas if router is not None else ():
        watch_engine(node.engine, node.name)


def result_of(status: int) -> str:
    return "503" if status == 503 else f"{status // 100}xx"


# Each family's children by their label values, looked up here: prometheus-client's labels()
# checks the values and takes a lock on every call, a third of what a request's observations
# cost (bench/stages.py). The children are the same objects labels() returns (it keeps them too).
_CHILDREN: dict[tuple[Any, ...], Any] = {}


def _child(family: Any, *values: str) -> Any:
    key = (family, *values)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = family.labels(*values)
    return child


def _observe(response: Response) -> Response:
    seconds = request_log.elapsed()
    kind = request_log.request_kind()
    status = response.status_code
    _child(REQUESTS, kind, result_of(status)).observe(seconds)
    if kind in ("page", "fragment", "api") and 200 <= status < 300:
        sort = request.args.get("sort", DEFAULT_SORT)
        _child(PAGES, request_log.depth_of(), sort if sort in _SORTS else "other").observe(seconds)
    if status == 429:
        RATE_LIMITED.labels("writes" if kind == "write" else "reads").inc()
    route = g.get("read_route")
    if route is not None:
        REPLICA_READS.labels("primary" if route.node.primary else "replica", route.reason).inc()
    limiter = current_app.extensions.get("rate_limiter")
    if limiter is not None and limiter.fallback_enabled:
        # Set while Redis is lost (orders/web/limits.py RateLimits.switch).
        FALLBACK.set(1 if limiter.in_memory else 0)
    return response


def counted_rows(chunks: Iterable[Any]) -> Iterator[Any]:
    """An export's chunks (orders/exports/stream.py Chunk: .rows), its rows counted as they go."""
    for chunk in chunks:
        EXPORT_ROWS.inc(chunk.rows)
        yield chunk


def watch_engine(engine: Engine, name: str) -> None:
    """Pool use, waits and timeouts, and statements cancelled by their timeout, of `engine`."""
    in_use, waiting = POOL_IN_USE.labels(name), POOL_WAITING.labels(name)
    in_use.set(0)
    waiting.set(0)
    timeouts, cancelled = POOL_TIMEOUTS.labels(name), STATEMENT_TIMEOUTS.labels(name)

    @event.listens_for(engine, "checkout")
    def _checkout(*_args: Any) -> None:
        in_use.inc()

    @event.listens_for(engine, "checkin")
    def _checkin(*_args: Any) -> None:
        in_use.dec()

    @event.listens_for(engine, "handle_error")
    def _error(context: Any) -> None:
        orig = context.original_exception
        number = orig.args[0] if getattr(orig, "args", None) else None
        if getattr(orig, "sqlstate", None) == _PG_CANCELLED or number in _MYSQL_TIMEOUTS:
            cancelled.inc()

    _count_waits(engine.pool, waiting, timeouts)

    @event.listens_for(engine, "engine_disposed")
    def _disposed(*_args: Any) -> None:
        _count_waits(engine.pool, waiting, timeouts)  # dispose() made a new pool


def _count_waits(pool: Any, waiting: Any, timeouts: Any) -> None:
    """The pool has no event for a wait: its _do_get (the method every Pool subclass implements to
    hand out a connection, blocking while none is free) is wrapped to count the threads in it."""
    do_get = pool._do_get

    def _counted_get() -> Any:
        waiting.inc()
        try:
            return do_get()
        except PoolTimeout:
            timeouts.inc()
            raise
        finally:
            waiting.dec()

    pool._do_get = _counted_get


def registry() -> CollectorRegistry:
    """Every worker's values (multiprocess mode), or this process's."""
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        return REGISTRY
    collected = CollectorRegistry()
    _WrittenFiles(collected)  # type: ignore[no-untyped-call]  # prometheus-client's constructor
    return collected


class _WrittenFiles(MultiProcessCollector):
    """prometheus-client's collector, without the files of 0 bytes. A worker creates each of its
    files and sizes it a moment later (prometheus-client's MmapedDict, issue #1199 there): a scrape
    in between read the empty file, failed whole, and /metrics answered 500 under load (a full
    test run saw it). A worker killed in that moment leaves the empty file for good. An empty
    file holds no value yet: the other workers' values are served."""

    def collect(self) -> Iterable[Any]:
        files = [str(path) for path in Path(self._path).glob("*.db") if _written(path)]
        return self.merge(files, accumulate=True)  # type: ignore[no-untyped-call,no-any-return]  # untyped there


def _written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:  # a live gauge's file, removed as its worker died (child_exit)
        return False


def _metrics_view() -> Response:
    return Response(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
