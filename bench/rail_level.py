"""Rail level: the time to build one sort's rail as GET /api/orders/rail builds it
(orders/finding/rail.py `build` on a connection: one read of rail_counts, the layout, a cursor
per bucket) and its answer's size, per engine, sort and status; against the same buckets counted
at read time (`COUNT(*) ... GROUP BY` the bucket over orders, the read the kept counts replace),
in the same run.

Twice: with the counts striped as writers leave them (up to STRIPES rows per bucket and status)
and as `flask fold-rail` leaves them (one), with the rows of rail_counts each read. Interleaved
rounds (bench/common.py `interleaved`), medians and p99 in ms; the ratio is the read-time
count's median over the folded rail's median.

    python -m bench.rail_level [--rows 300000] [--engines sqlite,postgresql,mysql]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select, text

from orders.data.db import make_engine
from orders.data.models import RAIL_COUNTS, STRIPES, add_counts
from orders.data.rail_fold import FOLDED, fold, vacuum
from orders.finding import rail
from orders.finding.request import ListRequest
from pagination import CursorCodec

from .common import Target, interleaved, markdown_table, summary
from .databases import seeded

# One sort per family (newest and oldest read the same counts), with and without a status.
CASES = [("newest", None), ("newest", "paid"), ("amount", None), ("customer", None)]
_MIGRATION = Path(__file__).resolve().parent.parent / "migrations" / "versions" / "0008_rail_counts.py"


def _bucket_sql() -> dict[str, dict[str, str]]:
    """The migration's bucket expressions (its one home), for the read-time count."""
    spec = importlib.util.spec_from_file_location("rail_counts_migration", _MIGRATION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: dict[str, dict[str, str]] = module.BUCKETS
    return found


def measure(target: Target, *, rounds: int, budget_s: float, codec: CursorCodec) -> list[dict[str, Any]]:
    """Each case's rail built from the counts as the writers leave them (STRIPES rows per bucket
    and status: `_striped`) and as a fold leaves them (one), then counted at read time."""
    engine = make_engine(target.url)
    buckets = _bucket_sql()[engine.dialect.name]
    try:
        listings = {
            f"{sort}{' · ' + status if status else ''}": ListRequest(sort, status, codec=codec)
            for sort, status in CASES
        }
        _striped(engine)
        striped, striped_rows = _timed(engine, listings, "striped", rounds, budget_s)
        fold(engine)
        folded, folded_rows = _timed(engine, listings, "folded", rounds, budget_s, buckets)
        read = {"striped": striped_rows, "folded": folded_rows}
        results = []
        with engine.connect() as conn:
            for (case, method), values in {**striped, **folded}.items():
                ordered = sorted(values)
                p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] if ordered else None
                built = rail.build(listings[case], conn)
                body = json.dumps(built.as_json(), separators=(",", ":")).encode()
                results.append(
                    {
                        "engine": target.label,
                        "case": case,
                        "method": method,
                        **summary(values),
                        "p99": p99,
                        "buckets": len(built.buckets),
                        "bytes": len(body),
                        "gzip": len(gzip.compress(body)),
                        "family rows": read.get(method, {}).get(case),
                    }
                )
        return results
    finally:
        engine.dispose()


def _timed(
    engine: Engine,
    listings: dict[str, ListRequest],
    state: str,
    rounds: int,
    budget_s: float,
    buckets: dict[str, str] | None = None,
) -> tuple[dict[tuple[str, str], list[float]], dict[str, int]]:
    """Interleaved rounds of each case's rail in the counts' present `state` (and, given the
    migration's `buckets`, of the same buckets counted at read time); and the rows of
    rail_counts each case's rail read."""
    with engine.connect() as conn:
        methods: dict[tuple[str, str], Any] = {}
        for case, listing in listings.items():
            methods[(case, state)] = functools.partial(_build, conn, listing)
            if buckets is not None:
                family = rail.FAMILY[listing.choice.goto]
                counted = text(
                    f"SELECT status, {buckets[family].format(r='orders')} AS bucket, count(*) "
                    "FROM orders GROUP BY 1, 2"
                )
                methods[(case, "COUNT(*) at read time")] = functools.partial(_count, conn, counted)
        timed = interleaved(methods, rounds=rounds, budget_s=budget_s)
        rows = {
            case: _family_rows(conn, rail.FAMILY[listing.choice.goto]) for case, listing in listings.items()
        }
        return timed, rows


def _family_rows(conn: Connection, family: str) -> int:
    conn.rollback()
    return int(conn.execute(select(func.count()).where(RAIL_COUNTS.c.family == family)).scalar_one())


def _striped(engine: Engine) -> None:
    """Every folded count spread over the STRIPES writer stripes, as the seed's writes left them
    before the fold (n split as evenly as `id % STRIPES` splits consecutive ids): the rail's
    rows between folds at their most. The sums per bucket stay as they were."""
    c = RAIL_COUNTS.c
    with engine.begin() as conn:
        folded = conn.execute(select(c.family, c.status, c.bucket, c.n).where(c.stripe == FOLDED)).all()
        conn.execute(delete(RAIL_COUNTS).where(c.stripe == FOLDED))
        spread = [
            {"family": family, "status": status, "bucket": bucket, "stripe": stripe, "n": share}
            for family, status, bucket, n in folded
            for stripe in range(STRIPES)
            if (share := n // STRIPES + (1 if stripe < n % STRIPES else 0))
        ]
        for low in range(0, len(spread), 5000):
            add_counts(conn, RAIL_COUNTS, spread[low : low + 5000])
    vacuum(engine)  # as autovacuum leaves a table between writes: measured as fold() leaves it


def _build(conn: Connection, listing: ListRequest) -> rail.Rail:
    conn.rollback()  # a fresh snapshot each time, as a request reads
    return rail.build(listing, conn)


def _count(conn: Connection, counted: Any) -> None:
    conn.rollback()
    conn.execute(counted).all()


def report(results: list[dict[str, Any]]) -> str:
    """One table: engine and case, the rows the rail read and its p50 / p99 ms with the counts
    striped and folded, the answer's size, and the read-time count's p50 with its ratio to the
    folded rail's."""
    cell = {(r["engine"], r["case"], r["method"]): r for r in results}
    rows = []
    for engine, case in dict.fromkeys((r["engine"], r["case"]) for r in results):
        striped, folded = cell[(engine, case, "striped")], cell[(engine, case, "folded")]
        counted = cell[(engine, case, "COUNT(*) at read time")]
        rows.append(
            [
                engine,
                case,
                str(folded["buckets"]),
                f"{folded['bytes']:,} ({folded['gzip']:,})",
                f"{striped['family rows']:,}",
                f"{striped['median']:.2f} / {striped['p99']:.2f}",
                f"{folded['family rows']:,}",
                f"{folded['median']:.2f} / {folded['p99']:.2f}",
                f"{counted['median']:.1f}",
                f"{counted['median'] / folded['median']:.0f}x",
            ]
        )
    header = [
        "engine",
        "rail",
        "buckets",
        "bytes (gzip)",
        "rows striped",
        "striped p50 / p99",
        "rows folded",
        "folded p50 / p99",
        "COUNT(*) p50",
        "ratio",
    ]
    return markdown_table(
        "rail level: one rail built (ms, p50 / p99) from the counts striped and folded, its answer, "
        "against COUNT(*) at read time",
        header,
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rail_level", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--engines", default="sqlite,postgresql,mysql")
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    codec = CursorCodec("bench-rail-secret-bench-rail-secret-0123")
    results: list[dict[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-rail-"))
    for kind, url in seeded(args.engines, "rail", args.rows, tmp):
        target = Target(kind, kind, url, args.rows, [])
        results += measure(target, rounds=args.rounds, budget_s=30.0, codec=codec)
    print(report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
