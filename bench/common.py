"""What every level shares: the sort under test, positions and cursors, SQL capture, timing.

A "position n" is the page that starts at row n of the `newest` order (created_at desc, id desc):
``OFFSET n LIMIT 20`` reads it by counting, the keyset methods read it from the keys of row n-1.
All three methods must return the same 20 rows; each level checks that before timing anything.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session

from orders.data.models import Order
from orders.finding.sorts import SORTS
from pagination import AFTER, CursorCodec, Position, filters_fingerprint

LIMIT = 20
NEWEST = SORTS["newest"].sort
# The app's list with no status filter: ListRequest.filters is {"status": None}.
FILTERS: dict[str, Any] = {"status": None}
SECRET = "bench-secret-key-long-enough-for-production-use-0123456789"
K = TypeVar("K")


def ordered() -> Any:
    """The plain ORM select in `newest` order: what OFFSET and sqlakeyset page through."""
    return select(Order).order_by(Order.created_at.desc(), Order.id.desc())


@dataclass
class Target:
    """One seeded database that the levels measure."""

    label: str  # "sqlite", "postgresql", "mysql", "postgresql-3M"
    kind: str  # "sqlite", "postgresql" or "mysql": which server and which plan reader
    url: str
    rows: int
    depths: list[int]
    info: dict[str, Any] = field(default_factory=dict)  # version, seeding seconds, ...


def keys_before(session: Session, depth: int) -> tuple[Any, ...] | None:
    """Key values of row depth-1, the last row of the page before position `depth` (None at 0)."""
    if depth == 0:
        return None
    row = session.execute(
        select(Order.created_at, Order.id)
        .order_by(Order.created_at.desc(), Order.id.desc())
        .offset(depth - 1)
        .limit(1)
    ).one()
    return tuple(row)


def cursor_for(codec: CursorCodec, keys: tuple[Any, ...] | None) -> str | None:
    """The `after` cursor the app would have put in the "next" link of the page ending at `keys`."""
    if keys is None:
        return None
    return codec.encode(Position(NEWEST.name, AFTER, filters_fingerprint(FILTERS), keys))


@dataclass
class Captured:
    statement: str
    parameters: Any


class SqlCapture:
    """Records the SQL and DBAPI parameters an engine really sends (before_cursor_execute)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.statements: list[Captured] = []

    def _listen(
        self, _conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, _many: bool
    ) -> None:
        self.statements.append(Captured(statement, parameters))

    def __enter__(self) -> SqlCapture:
        event.listen(self.engine, "before_cursor_execute", self._listen)
        return self

    def __exit__(self, *_exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._listen)


def interleaved(
    methods: dict[K, Callable[[], Any]],
    *,
    rounds: int,
    budget_s: float,
    min_rounds: int = 3,
    before_each: Callable[[], Any] | None = None,
) -> dict[K, list[float]]:
    """Time each method once per round, in a shuffled order, and return milliseconds per method.

    Interleaving spreads slow drifts (cache warm-up, a neighbour's burst of CPU) over all
    methods alike; the levels pass every (depth, method) pair at once, so that a burst of
    other work cannot make one depth look slower than another either.
    Every timed call directly follows an untimed call of the same method: a query right
    after another method's slow one runs measurably slower (measured on MariaDB:
    0.45 ms alone, 0.82 ms right after the 90 ms OFFSET filesort, 0.50 ms on the second call),
    and without the warm call the fast methods would be charged for the slow ones' wake.
    The order is shuffled, not rotated, so no method always runs behind the same neighbour.
    Stops after `rounds`, or earlier once `budget_s` is spent and `min_rounds` are done, so
    that a 250 ms OFFSET at depth 2.5M does not run 50 times.
    `before_each` runs untimed before every call (e.g. a fresh session).
    """
    names = list(methods)
    samples: dict[K, list[float]] = {name: [] for name in names}
    rng = random.Random(4)  # seeded: the same orders in every run
    started = time.perf_counter()
    for r in range(rounds):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            for timed in (False, True):
                if before_each is not None:
                    before_each()
                t0 = time.perf_counter_ns()
                methods[name]()
                if timed:
                    samples[name].append((time.perf_counter_ns() - t0) / 1e6)
        if r + 1 >= min_rounds and time.perf_counter() - started > budget_s:
            break
    return samples


def summary(values: list[float]) -> dict[str, float | int | None]:
    """Median, p95, min and count of a list of timings (ms)."""
    if not values:
        return {"median": None, "p95": None, "min": None, "n": 0}
    ordered_values = sorted(values)
    p95 = ordered_values[min(len(ordered_values) - 1, round(0.95 * (len(ordered_values) - 1)))]
    return {"median": statistics.median(values), "p95": p95, "min": ordered_values[0], "n": len(values)}


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """``with stopwatch() as t: ...`` then ``t["seconds"]``."""
    box: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box["seconds"] = time.perf_counter() - t0


def log(message: str) -> None:
    """Progress on stdout, flushed, so a piped run shows where it is."""
    print(message, flush=True)


def markdown_table(title: str, header: list[str], rows: list[list[str]]) -> str:
    """A report's table as the docs show it: a title line, then a Markdown table."""
    lines = [f"\n{title}", f"| {' | '.join(header)} |", "|" + "---|" * len(header)]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return "\n".join(lines)


def wait_for_quiet(
    limit_s: float, *, threshold: float = 10.0, interval: float = 1.0, verbose: bool = True
) -> float:
    """CPU busy % of the whole machine, sampled until it drops under `threshold` or `limit_s`
    has passed. The load fills both cores, so anything else running on the machine (a test suite
    next door) shows in the numbers; the server is idle while this samples, so the reading is
    other people's work (the HTTP level waits so, and the in-process request cost, bench/stages.py)."""
    deadline = time.monotonic() + limit_s
    busy = psutil.cpu_percent(interval=interval)
    while busy >= threshold and time.monotonic() < deadline:
        if verbose:
            log(f"  waiting for the machine to go quiet ({busy:.0f}% CPU busy)")
        busy = psutil.cpu_percent(interval=interval)
    return busy
