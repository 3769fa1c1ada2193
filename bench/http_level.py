"""HTTP level: the app under gunicorn, loaded with wrk, and an in-process profile of the fragment.

One gunicorn (2 workers of gunicorn.conf.py's gthread class, one thread each: a small
production box) serves the 300k-row PostgreSQL database. In the same run, each endpoint gets a
warm-up and then a fixed-duration load, in several short passes over all the endpoints:

- the rows fragment at depth 0 (``GET /orders`` with ``HX-Request: true``, no cursor);
- the rows fragment deep in the list (``GET /orders?after=<cursor>&page=2``), cursor built with
  the app's codec exactly as the "next" link of the previous page would carry it;
- ``/healthz`` (Flask + readiness: a fresh connection of its own engine at most once a second per
  process, the cached answer otherwise);
- ``/static/app.css`` (Flask's static file view, no database);
- ``/hello`` of a bare Flask app (``bench.floor_app``: one route returning "hello", no hooks, no
  database) under a second gunicorn started by the same command: what Flask and gunicorn cost at
  least. (The floor used to be a trivial route inside this app: it paid every hook a fragment
  pays, host check, limiter, headers, session, and so hid their cost.)

wrk (Debian package) reports p50/p95/p99 through a small Lua ``done()`` hook; without wrk a
threaded Python client stands in (and says so in the results, since it competes for the CPU).
Every request asks for ``Connection: close``: gunicorn.conf.py's gthread workers keep a
connection alive, and wrk's few connections, opened in one burst, were often all accepted by one
worker for a whole pass (the trivial route measured 699-1,331 req/s in passes of one run with
keep-alive, 873-1,168 without), so a pass measured one worker or two by chance.

The fragments' share of the bare app is taken per round (a fragment's pass over the bare app's
pass of the same round, the median over the rounds): both met the same machine, which a
best-of-all-passes on each side does not promise. Only 2xx answers count: a pass with any
other answer is reported as errors, and the rate limits are lifted so that none is a 429.

The profile runs the deep fragment through Flask's test client under pyinstrument and sorts
the self time into areas (driver and database wait, SQLAlchemy, Jinja2, cursor signing, ...).
"""

from __future__ import annotations

import http.client
import json
import shutil
import statistics
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import event
from sqlalchemy.orm import Session

from devtools.gunicorn import gunicorn
from orders.data.db import make_engine
from pagination import CursorCodec

from .common import SECRET, Target, cursor_for, keys_before, log, wait_for_quiet
from .floor_app import FLOOR_NAMES, FLOOR_PATH, STACK_PAGE, page_path

HX = {"HX-Request": "true"}
# Each request on a connection of its own: the free worker takes it (see the module docstring).
CLOSE = {"Connection": "close"}
TRIVIAL = FLOOR_NAMES[0]
# The read budget of the load and of the profile: no benchmark reaches it, so every answer is a
# page (the profile once measured mostly 429s: a few thousand requests exceed the default budget).
UNREACHED_READ_LIMIT = "100000000 per minute"  # the floor; results keep their "share_of_trivial" keys
WRK_SCRIPT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "bytes": %d, "errors": %d, "non_2xx_3xx": %d, '
    .. '"p50_us": %d, "p95_us": %d, "p99_us": %d, "mean_us": %.1f, "max_us": %d}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect + e.read + e.write + e.timeout,
    e.status, latency:percentile(50), latency:percentile(95), latency:percentile(99),
    latency.mean, latency.max))
end
"""


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read().decode()


def _wrk(url: str, seconds: float, headers: dict[str, str], connections: int, script: Path) -> dict[str, Any]:
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    command += ["-s", str(script)]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True, timeout=seconds + 60)
    line = [line for line in out.stdout.splitlines() if line.startswith("{")][-1]
    raw = json.loads(line)
    return {
        "requests": raw["requests"],
        "seconds": raw["duration_us"] / 1e6,
        # Only answers with a 2xx status count (wrk's "status" errors are the others).
        "rps": (raw["requests"] - raw["non_2xx_3xx"]) / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1000,
        "p95_ms": raw["p95_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "mean_ms": raw["mean_us"] / 1000,
        "max_ms": raw["max_us"] / 1000,
        "errors": raw["errors"],
        "non_2xx_3xx": raw["non_2xx_3xx"],
    }


def _python_load(url: str, seconds: float, headers: dict[str, str], connections: int) -> dict[str, Any]:
    """A stand-in for wrk: `connections` threads, one request at a time each, new connection each
    (gunicorn's sync workers close the connection after every response anyway)."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    path = "/" + url.split("//")[1].split("/", 1)[1]
    latencies: list[float] = []
    errors = [0]
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
                conn.close()
                if not 200 <= response.status < 300:
                    errors[0] += 1
            except OSError:
                errors[0] += 1
            latencies.append((time.perf_counter() - t0) * 1000)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    return {
        "requests": len(latencies),
        "seconds": elapsed,
        "rps": (len(latencies) - errors[0]) / elapsed,  # only 2xx answers count
        "p50_ms": pct(50),
        "p95_ms": pct(95),
        "p99_ms": pct(99),
        "mean_ms": statistics.fmean(latencies),
        "max_ms": ordered[-1],
        "errors": errors[0],
        "non_2xx_3xx": errors[0],
    }


def endpoints(target: Target, codec: CursorCodec) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The URLs under load, and what the deep fragment must show first (for a sanity check)."""
    depth = target.depths[-1]
    engine = make_engine(target.url)
    try:
        with Session(engine) as session:
            keys = keys_before(session, depth)
            next_keys = keys_before(session, depth + 1)
    finally:
        engine.dispose()
    cursor = cursor_for(codec, keys)
    expected_first_id = next_keys[1] if next_keys else None
    points = [
        {"name": "fragment depth 0", "path": "/orders", "headers": HX, "depth": 0},
        {
            "name": f"fragment depth {depth:,}",
            "path": f"/orders?after={cursor}&page=2",
            "headers": HX,
            "depth": depth,
        },
        {"name": "/healthz", "path": "/healthz", "headers": {}, "depth": None},
        {"name": "/static/app.css", "path": "/static/app.css", "headers": {}, "depth": None},
        {"name": TRIVIAL, "path": FLOOR_PATH, "headers": {}, "depth": None, "floor": True},
        # The stack's own page of the deep fragment's rows (bench/floor_app.py): what the app's
        # own work adds to its stack is the deep fragment's share of it.
        {"name": STACK_PAGE, "path": page_path(keys), "headers": {}, "depth": None, "floor": True},
    ]
    return points, {"depth": depth, "expected_first_id": expected_first_id}


def measure(
    target: Target,
    codec: CursorCodec,
    *,
    seconds: float,
    passes: int,
    warmup_s: float,
    connections: int,
    tmp_dir: Path,
    quiet_wait_s: float = 0.0,
) -> dict[str, Any]:
    """Load each endpoint for `seconds` in all, split into `passes` rounds over all endpoints.

    Short interleaved passes rather than one long run per endpoint: a burst of other work on the
    machine then spoils a pass of each endpoint, not the whole measurement of one of them.
    """
    points, expected = endpoints(target, codec)
    tool = "wrk" if shutil.which("wrk") else "python threads (wrk not installed)"
    script = tmp_dir / "report.lua"
    script.write_text(WRK_SCRIPT)
    pass_seconds = max(1, round(seconds / passes))  # wrk takes whole seconds
    busy_before = wait_for_quiet(quiet_wait_s)

    def load(url: str, duration: float, headers: dict[str, str]) -> dict[str, Any]:
        if tool == "wrk":
            return _wrk(url, duration, {**headers, **CLOSE}, connections, script)
        return _python_load(url, duration, headers, connections)  # a new connection each already

    # The rate limiter stays on (its cost is part of every request measured) with a budget no
    # benchmark reaches: wrk sends thousands of requests a second from one address.
    env = {"SECRET_KEY": SECRET, "PAGE_SIZE": "20", "RATELIMIT_READS": UNREACHED_READ_LIMIT}
    server = gunicorn(target.url, log_path=tmp_dir / "gunicorn.log", workers=2, env=env)
    # The floor: the same command (gunicorn.conf.py, 2 workers), another app.
    floor = gunicorn(
        target.url,
        log_path=tmp_dir / "gunicorn-floor.log",
        workers=2,
        env=env,
        app="bench.floor_app:create()",
        ready_path=FLOOR_PATH,
    )
    with server as (app_base, _master), floor as (floor_base, _floor_master):
        for point in points:
            point["base"] = floor_base if point.get("floor") else app_base
        base = app_base
        # Sanity: the deep fragment answers 200 and starts at the row after the cursor's row.
        status, body = _get(base + points[1]["path"], HX)
        verified = status == 200 and f'data-id="{expected["expected_first_id"]}"' in body.split("</tr>")[0]
        if not verified:
            log(f"  WARNING: the deep fragment did not start at order {expected['expected_first_id']}")
        for point in points:
            load(point["base"] + point["path"], warmup_s, point["headers"])  # warm pools and caches
            point["passes"] = []
        for _ in range(passes):
            # A short look before each round too: a round does not start in someone else's burst.
            busy = wait_for_quiet(min(quiet_wait_s / 4, 15.0), interval=0.5, verbose=False)
            for point in points:
                result = load(point["base"] + point["path"], pass_seconds, point["headers"])
                point["passes"].append({**result, "cpu_busy_before": busy})
    busy_after = psutil.cpu_percent(interval=1.0)
    if max(busy_before, busy_after) > 15:
        log(f"  WARNING: the machine was busy with other work ({busy_before:.0f}% / {busy_after:.0f}% CPU)")
    trivial = next(p for p in points if p["name"] == TRIVIAL)
    for point in points:
        point.update(_combine(point["passes"]))
        point.update(share_of(point, trivial))
        point["headers"] = dict(point["headers"])
        point.pop("base", None)
        point["path"] = point["path"] if len(point["path"]) < 60 else point["path"][:60] + "..."
        log(
            f"  http {point['name']:>22}: {point['rps']:8.1f} req/s  p50 {point['p50_ms']:7.2f} ms  "
            f"p95 {point['p95_ms']:7.2f} ms  errors {point['errors'] + point['non_2xx_3xx']}  "
            f"{point['share_of_trivial']:6.1%} of the bare Flask app (per round: "
            + " ".join(f"{r:.0%}" for r in point["share_of_trivial_rounds"])
            + ")"
        )
    return {
        "database": target.label,
        "rows": target.rows,
        "workers": 2,
        "connections": connections,
        "seconds_per_endpoint": pass_seconds * passes,
        "passes": passes,
        "load_generator": tool,
        "deep_fragment_verified": verified,
        "cpu_busy_percent_before": busy_before,
        "cpu_busy_percent_after": busy_after,
        "endpoints": points,
    }


def share_of(point: dict[str, Any], trivial: dict[str, Any]) -> dict[str, Any]:
    """The point's req/s over the trivial route's, per round (passes of one round ran back to
    back), and their median: the share the targets and the report quote."""
    rounds = [p["rps"] / t["rps"] for p, t in zip(point["passes"], trivial["passes"], strict=True)]
    return {"share_of_trivial": statistics.median(rounds), "share_of_trivial_rounds": rounds}


def _combine(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """The endpoint's figures from its best pass (highest req/s), plus the spread of all passes.

    Other work on the machine only ever slows a pass down, and it comes and goes (a browser test
    next door fills a core for a few seconds), so the best pass is the one least disturbed.
    The medians over all passes are kept beside it for comparison.
    """
    best = max(passes, key=lambda p: p["rps"])
    requests = sum(p["requests"] for p in passes)
    return {
        **{k: best[k] for k in ("rps", "p50_ms", "p95_ms", "p99_ms", "mean_ms", "max_ms")},
        "requests": requests,
        "seconds": sum(p["seconds"] for p in passes),
        "rps_all_passes": requests / sum(p["seconds"] for p in passes),
        "p50_ms_median_of_passes": statistics.median(p["p50_ms"] for p in passes),
        "p95_ms_median_of_passes": statistics.median(p["p95_ms"] for p in passes),
        "errors": sum(p["errors"] for p in passes),
        "non_2xx_3xx": sum(p["non_2xx_3xx"] for p in passes),
    }


# --- the in-process profile --------------------------------------------------------------

# First match wins; frames from elsewhere (stdlib) inherit the area of their caller.
AREAS = [
    ("psycopg", "psycopg driver, incl. waiting for PostgreSQL"),
    ("/sqlalchemy/sql/", "SQLAlchemy Core: building and compiling statements"),
    ("/sqlalchemy/orm/", "SQLAlchemy ORM: session, execute"),
    ("/sqlalchemy/engine/", "SQLAlchemy engine: execute, results, pool"),
    ("/sqlalchemy/pool/", "SQLAlchemy engine: execute, results, pool"),
    ("/sqlalchemy/", "SQLAlchemy (other)"),
    ("/markupsafe/", "markupsafe: escaping (autoescape)"),
    ("/jinja2/", "Jinja2 rendering"),
    ("/templates/", "Jinja2 rendering"),
    ("/cryptography/", "cursor sealing and opening (AES-GCM-SIV)"),
    ("/pagination/cursor.py", "cursor sealing and opening (AES-GCM-SIV)"),
    ("/itsdangerous/", "Flask: dispatch, app/request context, url_for"),
    ("/pagination/", "pagination library (seek predicate, page assembly)"),
    ("/orders/views/list_page.py", "orders app views and filters"),
    ("/orders/", "orders app views and filters"),
    ("/werkzeug/", "Werkzeug: request, routing, url_for, test client"),
    ("/flask/", "Flask: dispatch, app/request context, url_for"),
]


def _area(path: str | None, inherited: str) -> str:
    if path:
        for marker, name in AREAS:
            if marker in path:
                return name
    return inherited


def _areas(root: Any) -> dict[str, float]:
    totals: dict[str, float] = {}
    stack = [(root, "other (stdlib, interpreter)")]
    while stack:
        frame, inherited = stack.pop()
        if frame.is_synthetic:
            continue  # counted in its parent's total_self_time
        area = _area(frame.file_path, inherited)
        totals[area] = totals.get(area, 0.0) + frame.total_self_time
        stack.extend((child, area) for child in frame.children)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def _top_functions(root: Any, ms_per_profiled_second: float, count: int) -> str:
    """Functions by self time, summed over every place they are called from, in ms per request
    scaled to the unprofiled run like the areas. (pyinstrument's own flat view lumps unrelated
    "[self]" time under one file name.)"""
    totals: dict[str, float] = {}
    stack = [root]
    while stack:
        frame = stack.pop()
        stack.extend(frame.children)
        if frame.is_synthetic:
            continue
        where = frame.file_path_short or frame.file_path or "?"
        key = f"{frame.function}  {where}:{frame.line_no}"
        totals[key] = totals.get(key, 0.0) + frame.total_self_time
    top = sorted(totals.items(), key=lambda kv: -kv[1])[:count]
    return "\n".join(f"{secs * ms_per_profiled_second:6.3f} ms  {key}" for key, secs in top)


def _without_banner(text: str) -> str:
    """pyinstrument's output after its ASCII-art header."""
    lines = text.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("Profile at")), 0)
    return "\n".join(line for line in lines[start:]).strip("\n")


def profile(target: Target, codec: CursorCodec, *, requests: int) -> dict[str, Any]:
    """Where a fragment request spends its time, in-process (no network to the client).

    The deep fragment is the one the targets are about; the first page is profiled the same way
    so that the difference between the two shows what a cursor page costs extra.
    """
    points, _expected = endpoints(target, codec)
    return {
        "deep": _profile_path(target, points[1], requests),
        "first": _profile_path(target, points[0], requests),
    }


def _profile_path(target: Target, point: dict[str, Any], requests: int) -> dict[str, Any]:
    from pyinstrument import Profiler

    from orders.app import create_app

    path = point["path"]
    config = {"DATABASE_URL": target.url, "SECRET_KEY": SECRET, "PAGE_SIZE": 20}
    app = create_app({**config, "RATELIMIT_READS": UNREACHED_READ_LIMIT})
    client = app.test_client()
    engine = app.extensions["engine"]
    statements = [0]
    sql_seconds = [0.0]
    started_at: dict[int, float] = {}

    def before(_c: Any, cursor: Any, *_args: Any) -> None:
        started_at[id(cursor)] = time.perf_counter()

    def after(_c: Any, cursor: Any, *_args: Any) -> None:
        statements[0] += 1
        sql_seconds[0] += time.perf_counter() - started_at.pop(id(cursor), time.perf_counter())

    try:
        for _ in range(20):  # warm-up: templates compiled, statement cache filled, pool open
            response = client.get(path, headers=HX)
            if response.status_code != 200:
                raise RuntimeError(f"{path} answered {response.status_code}")
        # First unprofiled, for the real time per request and the SQL it sends...
        event.listen(engine, "before_cursor_execute", before)
        event.listen(engine, "after_cursor_execute", after)
        t0 = time.perf_counter()
        statuses = {client.get(path, headers=HX).status_code for _ in range(requests)}
        plain_seconds = time.perf_counter() - t0
        if statuses != {200}:
            raise RuntimeError(f"{path} answered {sorted(statuses)}: the profile would not be of pages")
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
        # ...then under the profiler, for the shares.
        profiler = Profiler(interval=0.001)
        profiler.start()
        for _ in range(requests):
            client.get(path, headers=HX)
        profiler.stop()
    finally:
        engine.dispose()
    session = profiler.last_session
    areas = _areas(session.root_frame())
    total = sum(areas.values()) or 1.0
    tree = _without_banner(profiler.output_text(unicode=False, color=False, show_all=False))
    per_request_ms = plain_seconds / requests * 1000
    return {
        "name": point["name"],
        "path": path if len(path) < 60 else path[:60] + "...",
        "depth": point["depth"],
        "requests": requests,
        "ms_per_request_unprofiled": per_request_ms,
        "statements_per_request": statements[0] / requests,
        "sql_ms_per_request": sql_seconds[0] / requests * 1000,
        "profiled_seconds": session.duration,
        # The profiler slows everything down; shares hold, so ms = share x the unprofiled time.
        "areas": [
            {
                "area": name,
                "seconds": secs,
                "share": secs / total,
                "ms_per_request": secs / total * per_request_ms,
            }
            for name, secs in areas.items()
        ],
        "tree_top": "\n".join(tree.splitlines()[:70]),
        "flat_top": _top_functions(session.root_frame(), per_request_ms / total, 30),
    }
