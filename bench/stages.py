"""Where a request's time goes, stage by stage: ``python -m bench.stages [--engines ...]``.

In-process (Flask's test client, no server, no network to the client), warm, a deep page of the
`oldest` sort (90% down the list): the deep fragment (htmx) and the JSON page. For each, the
CPU and wall time per request without a profiler, then cProfile on the CPU clock over the same
requests: each stage's share of the profiled CPU, in milliseconds of the unprofiled CPU. Stages
nest (the statement inside paginate, the cursor seals inside the page): the table names what
each row holds, and rows are not meant to add up. Counts per request (statements, round trips,
Python calls) are devtools/request_cost.py's, the same the budget test reads.

docs/performance.md, "Where a request's time goes", is written from this output.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from devtools.request_cost import CostMeter
from orders.data.models import Order

from . import databases, floor_app
from .common import SECRET, keys_before, wait_for_quiet
from .http_level import UNREACHED_READ_LIMIT

# (stage, what it holds, [(path suffix, function name), ...]): a stage's time is the largest
# cumulative time among its functions (one of them wraps the others where several are named).
STAGES: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("routing", "werkzeug's URL match", [("werkzeug/routing/map.py", "match")]),
    ("rate limit", "the limits' check", [("orders/web/limits.py", "check")]),
    ("list request", "query args parsed, cursor opened", [("orders/finding/request.py", "list_request")]),
    ("checkout", "pool checkout (and its ping)", [("sqlalchemy/pool/base.py", "_checkout")]),
    ("ping", "the checkout listener (list reads skip the ping)", [("orders/data/db.py", "_ping")]),
    (
        "session + BEGIN",
        "session's connection and transaction",
        [("sqlalchemy/orm/session.py", "connection")],
    ),
    ("paginate", "the library's whole read", [("pagination/paging.py", "paginate")]),
    ("plan", "seek statement built", [("pagination/paging.py", "_plan")]),
    ("statement", "execute: cache, driver, server", [("sqlalchemy/engine/base.py", "execute")]),
    ("rows", "rows fetched into Row objects", [("sqlalchemy/engine/result.py", "_allrows")]),
    ("cursor seals", "cursors encoded (HMAC)", [("pagination/cursor.py", "encode")]),
    ("page links", "which links, their cursors", [("orders/finding/request.py", "links")]),
    ("page URLs", "the links as URLs", [("orders/views/list_page.py", "_urls")]),
    ("template", "_rows.html rendered", [("flask/templating.py", "render_template")]),
    (
        "JSON",
        "rows to dicts, jsonify",
        [("orders/views/api.py", "order_json"), ("flask/json/__init__.py", "jsonify")],
    ),
    ("response hooks", "after_request hooks", [("flask/app.py", "process_response")]),
    ("log line", "the request's log line", [("orders/web/request_log.py", "_finish")]),
    ("metrics", "Prometheus observations", [("orders/web/metrics.py", "_observe")]),
    ("teardown", "session closed (ROLLBACK)", [("orders/data/db.py", "close_session")]),
]


def _cumulative(stats: pstats.Stats, names: list[tuple[str, str]]) -> tuple[float, int]:
    """The largest cumulative time among `names`' functions, and their calls."""
    best, calls = 0.0, 0
    for (path, _line, function), (_cc, nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]  # pstats.Stats.stats is set, not declared
        for suffix, name in names:
            if function == name and path.endswith(suffix):
                if ct > best:
                    best = ct
                calls += nc
    return best, calls


def measure(
    url: str, label: str, *, requests: int, depth: int, quiet_wait_s: float = 0.0
) -> list[dict[str, Any]]:
    """The deep fragment's and the JSON page's CPU and wall per request at `depth` (of the
    `oldest` sort), their counts and their stages. Each round first waits up to `quiet_wait_s`
    for the machine to go quiet: CPU time per request is not wall time, but it still grows by a
    quarter to a third when other work shares the two cores (their caches, their hyperthreads:
    a fragment 1.05 against 0.77 ms of CPU beside a test suite)."""
    from orders.app import create_app

    app = create_app(
        {"DATABASE_URL": url, "SECRET_KEY": SECRET, "PAGE_SIZE": 20, "RATELIMIT_READS": UNREACHED_READ_LIMIT}
    )
    meter = CostMeter(app)
    client = app.test_client()
    floor_engine = None
    try:
        after = _deep_cursor(client, depth)
        sends: dict[str, Callable[[], Any]] = {
            "fragment": lambda: (
                client.get(
                    "/orders",
                    query_string={"sort": "oldest", "after": after, "page": 3},
                    headers={"HX-Request": "true"},
                ).data
            ),
            "json": lambda: client.get("/api/orders", query_string={"sort": "oldest", "after": after}).data,
        }
        # The floors beside it (bench/floor_app.py): a bare Flask route, and the stack's own page
        # of the same 20 rows (one Core statement, one Jinja template), on the same database.
        floor_made = floor_app.create(url)
        floor_engine = floor_made.extensions["engine"]
        floor = floor_made.test_client()
        floor_keys = _floor_keys(floor_engine, depth)
        floors: dict[str, Callable[[], Any]] = {
            "hello": lambda: floor.get(floor_app.FLOOR_PATH).data,
            "page": lambda: floor.get(floor_app.page_path(floor_keys)).data,
        }
        # The same requests as a server hands them over: the WSGI call alone, its environ built
        # once (the test client builds one per request, parses the URL and keeps a cookie jar:
        # a tenth to a sixth of each figure above, and not the app's work).
        served: dict[str, Callable[[], Any]] = {
            "served " + name: _served(target, environ)
            for name, target, environ in (
                ("fragment", app, _environ(client, sends["fragment"])),
                ("json", app, _environ(client, sends["json"])),
                ("hello", floor_made, _environ(floor, floors["hello"])),
                ("page", floor_made, _environ(floor, floors["page"])),
            )
        }
        # Readiness, as a balancer asks for it (orders/views/health.py: checked at most once a second).
        ready = {"healthz": lambda: client.get("/healthz").data}
        served["served healthz"] = _served(app, _environ(client, ready["healthz"]))
        every = {**sends, **floors, **ready, **served}
        for send in every.values():
            for _ in range(50):
                send()
        # CPU per request, the lowest of ROUNDS rounds taken in turn: each kind and floor met
        # the same machine, so their ratios hold where the machine's speed does not.
        cpu: dict[str, float] = {name: float("inf") for name in every}
        busy: list[float] = []
        for _ in range(ROUNDS):
            busy.append(wait_for_quiet(quiet_wait_s, threshold=QUIET_PERCENT, interval=0.5, verbose=False))
            for name, send in every.items():
                cpu0 = time.process_time()
                for _ in range(requests):
                    send()
                cpu[name] = min(cpu[name], (time.process_time() - cpu0) * 1000 / requests)
        results = []
        for kind, send in sends.items():
            cost = meter.measure(send)
            cpu_ms = cpu[kind]
            wall0 = time.perf_counter()
            for _ in range(requests):
                send()
            wall_ms = (time.perf_counter() - wall0) * 1000 / requests
            profile = meter.profile(
                lambda send=send: [send() for _ in range(requests)],
                cProfile.Profile(time.process_time),
            )
            stats = pstats.Stats(profile)
            whole = max(ct for (_p, _l, f), (*_x, ct, _c) in stats.stats.items() if f == "wsgi_app")  # type: ignore[attr-defined]  # pstats.Stats.stats is set, not declared
            stages = {}
            for stage, _what, names in STAGES:
                seconds, calls = _cumulative(stats, names)
                if calls:
                    stages[stage] = {"ms": cpu_ms * seconds / whole, "share": seconds / whole}
            results.append(
                {
                    "engine": label,
                    "kind": kind,
                    "cpu_ms": cpu_ms,
                    "wall_ms": wall_ms,
                    "statements": cost.statements,
                    "round_trips": cost.round_trips,
                    "calls": cost.calls,
                    "stages": stages,
                    "floor_hello_ms": cpu["hello"],
                    "floor_page_ms": cpu["page"],
                    "served_ms": cpu["served " + kind],
                    "served_hello_ms": cpu["served hello"],
                    "served_page_ms": cpu["served page"],
                    "healthz_ms": cpu["healthz"],
                    "served_healthz_ms": cpu["served healthz"],
                    "cpu_busy_before": busy,
                }
            )
        return results
    finally:
        meter.close()
        app.extensions["engine"].dispose()
        if floor_engine is not None:
            floor_engine.dispose()


def _environ(client: Any, send: Callable[[], Any]) -> dict[str, Any]:
    """The WSGI environ of what `send` asks `client` for, as the app received it."""
    seen: list[dict[str, Any]] = []
    app = client.application
    inner = app.wsgi_app

    def keep(environ: dict[str, Any], start_response: Any) -> Any:
        seen.append(dict(environ))
        return inner(environ, start_response)

    app.wsgi_app = keep
    try:
        send()
    finally:
        app.wsgi_app = inner
    return seen[0]


def _served(app: Any, environ: dict[str, Any]) -> Callable[[], bytes]:
    """A request given to `app` as a server gives it (a fresh copy of `environ`), read whole."""

    def start_response(status: str, _headers: Any, _exc_info: Any = None) -> None:
        if not status.startswith("200"):
            raise RuntimeError(f"the measured request answered {status}")

    def send() -> bytes:
        body = app(dict(environ), start_response)
        try:
            return b"".join(body)
        finally:
            getattr(body, "close", lambda: None)()

    return send


def _floor_keys(engine: Engine, depth: int) -> tuple[Any, ...] | None:
    """The keys of the row before the `depth`th of the newest sort, for the stack's page; the
    oldest sort's row at `depth` is the newest sort's at rows - depth, the same depth's index
    range read the other way."""
    with Session(engine) as session:
        total = session.scalar(select(func.count()).select_from(Order))
        return keys_before(session, max(0, (total or 0) - depth))


def _deep_cursor(client: Any, depth: int) -> str:
    cursor = None
    for _ in range(depth // 100):
        query: dict[str, Any] = {"sort": "oldest", "limit": 100, **({"after": cursor} if cursor else {})}
        cursor = client.get("/api/orders", query_string=query).json["next_cursor"]
    return str(cursor)


def goals(results: list[dict[str, Any]], http: dict[str, Any] | None) -> str:
    """One line: the in-process CPU per request against issue 59's goals (a fragment at most
    1.0 ms, the JSON page 0.7 ms) and the deep fragment's share of the bare Flask app's requests
    per second under the same gunicorn (goal 0.35), from the same run; beside them the stack's own
    page (bench/floor_app.py), in-process and under gunicorn: what the stack allows at least."""
    cells = [
        f"{r['engine']} {r['kind']} {r['cpu_ms']:.2f} ms CPU, {r['served_ms']:.2f} the WSGI call alone "
        f"(goal {GOAL_CPU_MS[r['kind']]:.1f})"
        for r in results
    ]
    cells += [
        f"{r['engine']} the stack's page {r['floor_page_ms']:.2f} ms ({r['served_page_ms']:.2f}), "
        f"bare {r['floor_hello_ms']:.2f} ms ({r['served_hello_ms']:.2f})"
        for r in results
        if r["kind"] == "fragment" and "floor_page_ms" in r
    ]
    cells += [
        f"{r['engine']} /healthz {r['healthz_ms']:.2f} ms ({r['served_healthz_ms']:.2f}; goal 0.2)"
        for r in results
        if r["kind"] == "fragment" and "healthz_ms" in r
    ]
    quiet = [min(r["cpu_busy_before"]) for r in results if r.get("cpu_busy_before")]
    if quiet and max(quiet) >= QUIET_PERCENT:
        # Each figure is its lowest round's, so one quiet round is enough; none was.
        cells.append(f"the machine busy with other work in every round ({max(quiet):.0f}% CPU): pessimistic")
    if http:
        points = http.get("endpoints", [])
        deep = next((p for p in points if p["name"].startswith("fragment") and p.get("depth")), None)
        if deep is not None:
            cells.append(
                f"{deep['name']} {deep['share_of_trivial']:.3f} of the bare route under gunicorn (goal 0.35)"
            )
        stack = next((p for p in points if p["name"] == floor_app.STACK_PAGE), None)
        if deep is not None and stack is not None:
            # What the stack itself allows (bench/floor_app.py): its own page of the same rows.
            cells.append(
                f"the stack's page {stack['share_of_trivial']:.3f} of the bare route; "
                f"{deep['name']} {deep['rps'] / stack['rps']:.2f} of the stack's page"
            )
    return "cost: " + "; ".join(cells)


GOAL_CPU_MS = {"fragment": 1.0, "json": 0.7}
ROUNDS = 3
QUIET_PERCENT = 10.0  # wait_for_quiet's threshold: under it, nothing else is running


def table(results: list[dict[str, Any]]) -> str:
    """The stages as a Markdown table: one column per (engine, kind), ms of CPU per request."""
    heads = [f"{r['engine']} {r['kind']}" for r in results]
    lines = ["| stage | what it holds | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    totals = (
        ("cpu_ms", "CPU ms / request, unprofiled", "through Flask's test client"),
        ("served_ms", "CPU ms / request, the WSGI call", "as a server hands it over"),
        ("wall_ms", "wall ms / request", "through the test client"),
    )
    for key, label, what in totals:
        lines.append(f"| **{label}** | {what} | " + " | ".join(f"**{r[key]:.2f}**" for r in results) + " |")
    floors = (
        ("floor_hello_ms", "bare Flask route, CPU ms", "test client"),
        ("floor_page_ms", "the stack's page, CPU ms", "test client"),
        ("served_hello_ms", "bare Flask route, CPU ms", "WSGI call"),
        ("served_page_ms", "the stack's page, CPU ms", "WSGI call"),
        ("healthz_ms", "/healthz, CPU ms", "test client"),
        ("served_healthz_ms", "/healthz, CPU ms", "WSGI call"),
    )
    for key, label, how in floors:
        figures = " | ".join(f"{r[key]:.2f}" for r in results)
        where = "orders/views/health.py" if key.endswith("healthz_ms") else "bench/floor_app.py"
        lines.append(f"| {label} | {where}, same run, {how} | {figures} |")
    for mine, floor, how in (
        ("cpu_ms", "floor_page_ms", "test client"),
        ("served_ms", "served_page_ms", "WSGI call"),
    ):
        ratios = " | ".join(f"{r[mine] / r[floor]:.2f}x" for r in results)
        lines.append(f"| over the stack's page | the app's own work on top of its stack, {how} | {ratios} |")
    busy = " | ".join(" / ".join(f"{b:.0f}" for b in r.get("cpu_busy_before", [])) for r in results)
    lines.append(f"| machine busy before each round, % CPU | other work; the lowest round counts | {busy} |")
    for key in ("statements", "round_trips", "calls"):
        cells = " | ".join("-" if r[key] is None else f"{r[key]:,}" for r in results)
        lines.append(f"| {key.replace('_', ' ')} | counted | {cells} |")
    for stage, what, _names in STAGES:
        cells = [r["stages"].get(stage) for r in results]
        if any(cells):
            shown = " | ".join("-" if c is None else f"{c['ms']:.3f} ({c['share']:.0%})" for c in cells)
            lines.append(f"| {stage} | {what} | {shown} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stages", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--engines", default="sqlite,postgresql")
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-stages-") as tmp:
        for kind, url in databases.seeded(args.engines, "stages", args.rows, Path(tmp)):
            depth = args.rows * 9 // 10
            results += measure(url, kind, requests=args.requests, depth=depth, quiet_wait_s=30.0)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
