"""Soak the app: ``python -m soak.run [--seconds 60] [--database-url URL]``.

The app runs under gunicorn (3 workers x 2 threads) on a free loopback port, on a throwaway
PostgreSQL database seeded with orders (three a minute, so timestamps tie). For the whole run:

- writer threads insert orders through POST /api/orders (newer than every row, older than
  every row, and inside the range being read) and delete orders through DELETE, at a steady
  few hundred operations a second, recording when each write started and finished;
- reader threads walk the whole list through GET /api/orders?limit=50, again and again, in
  several sorts and with a status filter.

Each walk must hold: no order twice; no gap (every order that existed for the whole walk, that
is inserted before the walk began and not deleted before it ended, appears); the order never
goes backwards; no 5xx, no request without an answer within its timeout. At the end every
gunicorn worker that served the run must still be alive (none crashed and was replaced).

It prints a report (operations per second, walks, latency percentiles, violations) and exits
non-zero when an invariant was broken. Every request loop is bounded in time and count, and
traffic only goes to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil
import requests
from sqlalchemy import select
from sqlalchemy.orm import Session

from devtools.chromium import chromium_executable
from devtools.databases import create_database, drop_database
from devtools.gunicorn import gunicorn
from orders.data.db import make_engine, migrate
from orders.data.models import STATUSES, Order
from orders.data.seed import seed_orders

ROOT = Path(__file__).resolve().parent.parent
SEED_NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PAGE = 50
REQUEST_TIMEOUT = (5, 15)  # connect, read: a request that hangs longer is a failure, not a wait
# What each reader walks, in turn: (sort, status filter).
WALKS = [("newest", None), ("oldest", None), ("amount", None), ("newest", "paid")]


@dataclass
class Config:
    seconds: float = 60.0
    seed_rows: int = 3000
    readers: int = 4
    writers: int = 4
    write_rate: float = 300.0  # operations per second, all writers together
    workers: int = 3
    threads: int = 2
    browser: bool = True  # one Chromium also scrolls the HTML list (newest) by mouse wheel


@dataclass
class Row:
    """What the soak knows about one order: enough to decide whether a walk had to show it."""

    status: str
    inserted_at: float  # monotonic time its insert was acknowledged (0 for seeded rows)
    delete_started: float | None = None  # monotonic time the first DELETE for it was sent


@dataclass
class Walk:
    sort: str
    status: str | None
    started: float
    ended: float = 0.0
    ids: list[int] = field(default_factory=list)
    keys: list[tuple[Any, ...]] = field(default_factory=list)
    complete: bool = False
    requests: int = 0


@dataclass
class Stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    rows: dict[int, Row] = field(default_factory=dict)
    alive: list[int] = field(default_factory=list)  # ids no DELETE was sent for yet
    deleted: list[int] = field(default_factory=list)
    deletions: Counter[int] = field(default_factory=Counter)  # 204s per id: more than one is a lie
    walks: list[Walk] = field(default_factory=list)
    read_latency: list[float] = field(default_factory=list)
    write_latency: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # 5xx, timeouts, unexpected statuses

    def fail(self, message: str) -> None:
        with self.lock:
            if len(self.failures) < 1000:
                self.failures.append(message)


# --- The server ---------------------------------------------------------------------------------


def alive_workers(master: psutil.Process) -> set[int]:
    return {
        child.pid
        for child in master.children()
        if child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    }


# --- Writers and readers ------------------------------------------------------------------------


def writer(
    base: str,
    stats: Stats,
    stop: threading.Event,
    interval: float,
    seed: int,
    span: dt.timedelta,
    token: str,
) -> None:
    """Insert (newer than all, older than all, inside the range) and delete, at a steady pace."""
    rng = random.Random(seed)
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"  # writes need one of API_TOKENS
    n = 0
    next_at = time.monotonic()
    while not stop.is_set():
        n += 1
        kind = rng.choice(["newer", "older", "inside", "inside", "delete", "delete", "delete"])
        started = time.monotonic()
        try:
            if kind == "delete":
                response = delete_one(base, session, stats, rng, started)
            else:
                response = insert_one(base, session, stats, rng, kind, n, span)
        except requests.RequestException as err:
            stats.fail(f"{kind}: no answer: {type(err).__name__}: {err}")
        else:
            if response is not None:
                method = "DELETE" if kind == "delete" else "POST"
                with stats.lock:
                    stats.write_latency.append(time.monotonic() - started)
                    stats.statuses[f"{method} {response.status_code}"] += 1
                if response.status_code not in ((204, 404) if kind == "delete" else (201,)):
                    stats.fail(f"{method} {kind}: {response.status_code} {response.text[:200]}")
        next_at += interval
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        else:
            next_at = time.monotonic()  # behind schedule: do not burst to catch up


def insert_one(
    base: str,
    session: requests.Session,
    stats: Stats,
    rng: random.Random,
    kind: str,
    n: int,
    span: dt.timedelta,
) -> requests.Response:
    if kind == "newer":  # above every row a reader has seen
        created = SEED_NOW + dt.timedelta(seconds=n, microseconds=rng.randrange(10**6))
    elif kind == "older":  # below every row: the tail a reader reaches last
        created = SEED_NOW - span - dt.timedelta(minutes=n, microseconds=rng.randrange(10**6))
    else:  # inside the range being read, on an existing minute: ties with seeded rows
        created = SEED_NOW - dt.timedelta(minutes=rng.randrange(int(span.total_seconds() // 60)))
    status = rng.choice(STATUSES)
    body = {
        "customer": f"Soak {rng.randrange(50)}",
        "amount": str(Decimal(rng.randrange(100_000)) / 100),
        "status": status,
        "created_at": created.isoformat(),
    }
    response = session.post(f"{base}/api/orders", json=body, timeout=REQUEST_TIMEOUT)
    if response.status_code == 201:
        with stats.lock:
            order_id = int(response.json()["id"])
            stats.rows[order_id] = Row(status, time.monotonic())
            stats.alive.append(order_id)
    return response


def delete_one(
    base: str, session: requests.Session, stats: Stats, rng: random.Random, started: float
) -> requests.Response | None:
    with stats.lock:
        if stats.deleted and (not stats.alive or rng.random() < 0.1):
            # Now and then an order another writer's DELETE is taking (or just took): exactly one
            # of the two may answer 204, the other 404.
            victim = rng.choice(stats.deleted[-4:])
        elif stats.alive:
            index = rng.randrange(len(stats.alive))
            stats.alive[index], stats.alive[-1] = stats.alive[-1], stats.alive[index]
            victim = stats.alive.pop()
            stats.rows[victim].delete_started = started  # before the request: it may act at once
            stats.deleted.append(victim)
        else:
            return None
    response = session.delete(f"{base}/api/orders/{victim}", timeout=REQUEST_TIMEOUT)
    if response.status_code == 204:
        with stats.lock:
            stats.deletions[victim] += 1
    return response


def sort_key(sort: str, item: dict[str, Any]) -> tuple[Any, ...]:
    """The walk's order as a tuple that must strictly decrease (or increase) page after page."""
    if sort in ("newest", "oldest"):
        return (item["created_at"], int(item["id"]))  # fixed-width UTC text sorts as time
    return (Decimal(item["amount"]), int(item["id"]))


def reader(base: str, stats: Stats, stop: threading.Event, seed: int) -> None:
    """Walk the whole list, again and again, in the sorts of WALKS."""
    session = requests.Session()
    turn = seed
    while not stop.is_set():
        sort, status = WALKS[turn % len(WALKS)]
        turn += 1
        walk = Walk(sort, status, time.monotonic())
        params: dict[str, Any] = {"limit": PAGE, "sort": sort, **({"status": status} if status else {})}
        # A walk begun before `stop` is finished (bounded), so even a short soak on a busy machine
        # completes a walk in every sort instead of abandoning the slow ones.
        deadline = walk.started + API_WALK_SECONDS
        while not stop.is_set() or time.monotonic() < deadline:
            started = time.monotonic()
            try:
                response = session.get(f"{base}/api/orders", params=params, timeout=REQUEST_TIMEOUT)
            except requests.RequestException as err:
                stats.fail(f"read: no answer: {type(err).__name__}: {err}")
                break
            took = time.monotonic() - started
            walk.requests += 1
            with stats.lock:
                stats.read_latency.append(took)
                stats.statuses[f"GET {response.status_code}"] += 1
            if response.status_code != 200:
                stats.fail(f"read: {response.status_code} {response.text[:200]}")
                break
            body = response.json()
            for item in body["items"]:
                walk.ids.append(int(item["id"]))
                walk.keys.append(sort_key(sort, item))
            if not body["has_more"]:
                walk.complete = True
                break
            params["after"] = body["next_cursor"]
        walk.ended = time.monotonic()
        if walk.complete:
            with stats.lock:
                stats.walks.append(walk)


BROWSER_WALK_SECONDS = 90
API_WALK_SECONDS = 90


def browser_reader(base: str, stats: Stats, stop: threading.Event) -> None:
    """Scroll the newest-first HTML list by mouse wheel in Chromium, walk after walk; a walk
    that started before `stop` is finished (bounded), so even a short soak checks one."""
    from playwright.sync_api import sync_playwright

    launch: dict[str, Any] = {"args": ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]}
    chromium = chromium_executable()
    if chromium:
        launch["executable_path"] = chromium
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(**launch)
            page = browser.new_page()
            while not stop.is_set():
                walk = Walk("newest", None, time.monotonic())
                page.goto(f"{base}/orders")
                deadline = time.monotonic() + BROWSER_WALK_SECONDS
                while not page.locator("#end-of-list").count() and time.monotonic() < deadline:
                    page.mouse.wheel(0, 4000)
                    page.wait_for_timeout(20)
                walk.ended = time.monotonic()
                if page.locator("#end-of-list").count():
                    rows = page.eval_on_selector_all(
                        "#rows > tr[data-id]",
                        "rows => rows.map(r => [r.dataset.id, r.querySelector('time').dateTime])",
                    )
                    walk.ids = [int(row_id) for row_id, _ in rows]
                    walk.keys = [sort_key("newest", {"id": i, "created_at": t}) for i, t in rows]
                    walk.complete = True
                    walk.sort = "newest (browser)"
                    with stats.lock:
                        stats.walks.append(walk)
                else:
                    stats.fail(f"browser: no end of list after {BROWSER_WALK_SECONDS} s")
            browser.close()
    except Exception as err:  # a broken browser is a failed soak, reported as such
        stats.fail(f"browser: {type(err).__name__}: {err}")


# --- The invariants -----------------------------------------------------------------------------


def check_walk(walk: Walk, rows: dict[int, Row]) -> list[str]:
    problems = []
    if len(walk.ids) != len(set(walk.ids)):
        twice = [i for i, n in Counter(walk.ids).items() if n > 1]
        problems.append(f"{walk.sort}/{walk.status}: {len(twice)} orders twice, e.g. {twice[:5]}")
    pairs = zip(walk.keys, walk.keys[1:], strict=False)
    if walk.sort.startswith("oldest"):
        backwards = sum(1 for a, b in pairs if not a < b)
    else:
        backwards = sum(1 for a, b in pairs if not a > b)
    if backwards:
        problems.append(f"{walk.sort}/{walk.status}: the order went backwards {backwards} times")
    seen = set(walk.ids)
    missing = [
        order_id
        for order_id, row in rows.items()
        if row.inserted_at < walk.started
        and (row.delete_started is None or row.delete_started > walk.ended)
        and (walk.status is None or row.status == walk.status)
        and order_id not in seen
    ]
    if missing:
        problems.append(
            f"{walk.sort}/{walk.status}: {len(missing)} orders that existed throughout are missing"
        )
    return problems


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- The run ------------------------------------------------------------------------------------


def soak_limits(config: Config) -> dict[str, str]:
    """Rate limits for the soak: four times the load it plans, per minute. Each gunicorn worker
    counts in its own memory, so one worker alone must never see more than that."""
    writes = int(config.write_rate * 60 * 4)
    # Readers page as fast as they can: a few hundred pages a second at most on this machine.
    reads = 1000 * 60 * 4
    return {"RATELIMIT_WRITES": f"{writes} per minute", "RATELIMIT_READS": f"{reads} per minute"}


def soak(database_url: str, config: Config) -> dict[str, Any]:
    """Seed, serve, write and read for config.seconds; return the report (see main)."""
    engine = make_engine(database_url)
    migrate(engine)
    with Session(engine) as session:
        seed_orders(session, config.seed_rows, now=SEED_NOW)
        seeded = session.execute(select(Order.id, Order.status)).all()
    engine.dispose()
    stats = Stats(rows={order_id: Row(status, 0.0) for order_id, status in seeded})
    stats.alive = list(stats.rows)
    span = dt.timedelta(minutes=config.seed_rows // 3)
    token = secrets.token_urlsafe(32)

    with (
        tempfile.TemporaryDirectory(prefix="soak-") as tmp,
        gunicorn(
            database_url,
            log_path=Path(tmp) / "gunicorn.log",
            workers=config.workers,
            threads=config.threads,
            # The browser scrolls without "Load more" clicks, 100 rows a fragment. Writes need the
            # token; the rate limits stay on, sized for this load (every client here is
            # 127.0.0.1), so any 429 is a failure the report shows.
            env={
                "SECRET_KEY": secrets.token_urlsafe(48),
                "AUTO_PAGES": "100000",
                "PAGE_SIZE": "100",
                "API_TOKENS": token,
                **soak_limits(config),
                # The soak reads every row off the page at the end: keep them all in the document.
                "MAX_ROWS_IN_PAGE": "0",
            },
        ) as (base, master),
    ):
        workers_before = alive_workers(master)
        stop = threading.Event()
        interval = config.writers / config.write_rate
        threads = [
            threading.Thread(
                target=writer, args=(base, stats, stop, interval, 100 + i, span, token), name=f"writer-{i}"
            )
            for i in range(config.writers)
        ] + [
            threading.Thread(target=reader, args=(base, stats, stop, i), name=f"reader-{i}")
            for i in range(config.readers)
        ]
        browser_thread = threading.Thread(target=browser_reader, args=(base, stats, stop), name="browser")
        if config.browser:
            threads.append(browser_thread)
        started = time.monotonic()
        for thread in threads:
            thread.start()
        stop.wait(config.seconds)
        stop.set()
        for thread in threads:
            extra = BROWSER_WALK_SECONDS if thread is browser_thread else API_WALK_SECONDS
            thread.join(timeout=max(REQUEST_TIMEOUT) + 5 + extra)
        elapsed = time.monotonic() - started
        stuck = [thread.name for thread in threads if thread.is_alive()]
        workers_after = alive_workers(master)
        log_tail = (Path(tmp) / "gunicorn.log").read_text()[-3000:]

    violations: list[str] = []
    with stats.lock:
        for walk in stats.walks:
            violations += check_walk(walk, stats.rows)
        failures = list(stats.failures)
        writes = len(stats.write_latency)
        reads = len(stats.read_latency)
        read_latency, write_latency = list(stats.read_latency), list(stats.write_latency)
        walks = list(stats.walks)
        statuses = dict(sorted(stats.statuses.items()))
    server_errors = sum(n for key, n in statuses.items() if key.split()[1].startswith("5"))
    twice = [order_id for order_id, n in stats.deletions.items() if n > 1]
    if twice:
        violations.append(
            f"{len(twice)} orders deleted twice (two DELETEs both answered 204), e.g. {twice[:5]}"
        )
    if stuck:
        violations.append(f"threads still waiting after the run (deadlock?): {stuck}")
    if workers_after != workers_before:
        violations.append(f"gunicorn workers changed: {sorted(workers_before)} -> {sorted(workers_after)}")
    violations += failures
    return {
        "seconds": round(elapsed, 1),
        "config": config.__dict__,
        "writes": writes,
        "writes_per_second": round(writes / elapsed, 1),
        "reads": reads,
        "reads_per_second": round(reads / elapsed, 1),
        "walks": len(walks),
        "walks_by_sort": dict(Counter(f"{w.sort}{'/' + w.status if w.status else ''}" for w in walks)),
        "rows_per_walk": round(sum(len(w.ids) for w in walks) / len(walks)) if walks else 0,
        "read_p50_ms": round(percentile(read_latency, 0.50) * 1000, 1),
        "read_p95_ms": round(percentile(read_latency, 0.95) * 1000, 1),
        "read_p99_ms": round(percentile(read_latency, 0.99) * 1000, 1),
        "write_p95_ms": round(percentile(write_latency, 0.95) * 1000, 1),
        "statuses": statuses,
        "server_errors": server_errors,
        "workers": sorted(workers_before),
        "workers_alive_at_end": sorted(workers_after),
        "violations": violations,
        "gunicorn_log_tail": log_tail if violations else "",
    }


def print_report(report: dict[str, Any]) -> None:
    print(f"soak: {report['seconds']} s, gunicorn {report['config']['workers']} workers x "
          f"{report['config']['threads']} threads, {report['config']['readers']} readers, "
          f"{report['config']['writers']} writers")  # fmt: skip
    print(f"  writes: {report['writes']} ({report['writes_per_second']}/s), p95 {report['write_p95_ms']} ms")
    print(f"  reads:  {report['reads']} pages ({report['reads_per_second']}/s), "
          f"p50 {report['read_p50_ms']} ms, p95 {report['read_p95_ms']} ms, "
          f"p99 {report['read_p99_ms']} ms")  # fmt: skip
    print(f"  walks:  {report['walks']} complete, {report['rows_per_walk']} orders each on average, "
          f"{report['walks_by_sort']}")  # fmt: skip
    print(f"  statuses: {report['statuses']}")
    print(f"  workers: {report['workers']} alive at the end: {report['workers_alive_at_end']}")
    if report["violations"]:
        print(f"  VIOLATIONS ({len(report['violations'])}):")
        for violation in report["violations"][:30]:
            print(f"    - {violation}")
        print(report["gunicorn_log_tail"])
    else:
        print("  invariants held: no duplicates, no gaps, never backwards, no 5xx, no hung request,")
        print("  no order deleted twice, no worker lost")


@contextmanager
def throwaway_postgresql() -> Iterator[str]:
    """A new database on the PostgreSQL server of SOAK_POSTGRES_URL (default: 127.0.0.1:5432)."""
    server = os.environ.get("SOAK_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    name = f"soak_{os.getpid()}_{secrets.token_hex(4)}"
    url = create_database(server, name)
    try:
        yield url
    finally:
        drop_database(server, name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long writers and readers run")
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: a throwaway one)")
    parser.add_argument("--seed-rows", type=int, default=Config.seed_rows)
    parser.add_argument("--write-rate", type=float, default=Config.write_rate, help="writes per second")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    config = Config(seconds=args.seconds, seed_rows=args.seed_rows, write_rate=args.write_rate)
    if args.database_url:
        report = soak(args.database_url, config)
    else:
        with throwaway_postgresql() as url:
            report = soak(url, config)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 1 if report["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
