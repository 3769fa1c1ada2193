"""What the app's metrics cost per request: the deep rows fragment under gunicorn with METRICS=on
and METRICS=off, in one run, interleaved.

    python -m bench.metrics_level [--rows 100000] [--rounds 24] [--seconds 2]

(`make bench` runs it on its PostgreSQL table as the "metrics cost" phase.) Two gunicorns of the
same command (gunicorn.conf.py, 2 workers of one thread, as the HTTP level) serve one seeded
PostgreSQL database, one with METRICS=on (prometheus-client's multiprocess mode: every request
observed into files shared by the workers), one with METRICS=off (nothing installed). Both are up
for the whole run; each is idle while the other is loaded.

A single long run each (the first attempt: one wrk run per side) measured "on" faster than "off":
on a 2-core machine shared with other work, the load of the moment decides more than a few
percent. So: `rounds` rounds, each a pass of `seconds` on each side back to back, the order
alternating (on-off, off-on, ...) so neither side always runs first; per round the ratio of the
two passes (both met the same machine), and the median over the rounds, with the spread (lowest,
quartiles, highest), and the ratio of each side's best pass (other work only slows a pass down).
Besides requests per second, each pass's CPU time of the server's processes (master and workers,
user + system, from psutil) per request: other work on the machine slows a pass down but adds
little to our processes' CPU time, so this ratio is the steadier one. Last, the metrics' own code
timed in a loop (own_work: the after-request hook and a watched pool checkout), as a share of a
fragment's CPU: the floor the two ratios above measure with their noise.
Every request has `Connection: close` (bench/http_level.py says why); only 2xx answers count.

Measured on a shared 2-core machine, the req/s ratio still moved by more than the cost (a burst
of other work in one pass of a round): its median was 0.92 in one run and 1.06 in another. Read
the CPU ratio and the loop.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psutil

from devtools.gunicorn import ROOT, gunicorn
from pagination import CursorCodec

from .common import SECRET, Target, log
from .http_level import CLOSE, HX, UNREACHED_READ_LIMIT, WRK_SCRIPT, _get, _python_load, _wrk, endpoints

SIDES = ("on", "off")


def _cpu_seconds(master: psutil.Process) -> tuple[float, frozenset[int]]:
    """User + system CPU of gunicorn's master and workers, and the workers' ids (a worker that
    restarted takes its CPU time with it: such a pass is flagged)."""
    processes = [master, *master.children(recursive=True)]
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total, frozenset(p.pid for p in processes)


def _answers(url: str) -> int:
    try:
        return _get(url)[0]
    except urllib.error.HTTPError as err:
        return err.code


def _quartiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    q1, median, q3 = (
        statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else (ordered[0],) * 3
    )
    return {"min": ordered[0], "q1": q1, "median": median, "q3": q3, "max": ordered[-1]}


def own_work(tmp_dir: Path, iterations: int = 20_000) -> dict[str, float]:
    """What the metrics' own code costs a fragment, timed in a loop on the real objects: the
    after-request hook (orders/web/metrics.py _observe: the request's kind, its histograms) and a
    pool checkout and checkin on an engine it watches against one it does not. In a subprocess:
    prometheus-client picks its multiprocess value class (files shared by the workers, as under
    gunicorn) when it is imported, from PROMETHEUS_MULTIPROC_DIR."""
    files = tmp_dir / "own-work-metrics"
    files.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "bench.metrics_level", "--own-work", str(iterations), "--tmp", str(tmp_dir)],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(files)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"own work: {done.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def _own_work_here(iterations: int, tmp_dir: Path) -> dict[str, float]:
    from flask import Response, g
    from sqlalchemy import create_engine

    from orders.app import create_app
    from orders.web import metrics, request_log

    url = f"sqlite:///{tmp_dir / 'own-work.db'}"
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": SECRET, "METRICS": "on"})
    plain, watched = create_engine(url), create_engine(url)
    metrics.watch_engine(watched, "bench")
    answer = Response("", 200)
    hook, pool = [], {"plain": [], "watched": []}
    with app.test_request_context("/orders?after=x&sort=newest", headers=HX):
        assert request_log.request_kind() == "fragment"
        for _ in range(7):  # rounds, interleaved; the median
            g.request_started = time.perf_counter()
            started = time.process_time()
            for _ in range(iterations):
                metrics._observe(answer)
            hook.append((time.process_time() - started) / iterations * 1e6)
            for name, engine in (("plain", plain), ("watched", watched)):
                started = time.process_time()
                for _ in range(iterations):
                    engine.pool.connect().close()
                pool[name].append((time.process_time() - started) / iterations * 1e6)
    hook_us = statistics.median(hook)
    pool_us = statistics.median(w - p for w, p in zip(pool["watched"], pool["plain"], strict=True))
    return {"hook_us": hook_us, "pool_us": pool_us, "own_us": hook_us + pool_us}


def measure(
    target: Target,
    codec: CursorCodec,
    *,
    rounds: int,
    seconds: float,
    warmup_s: float,
    connections: int,
    tmp_dir: Path,
) -> dict[str, Any]:
    """The deep fragment's req/s and CPU per request with metrics on and off, `rounds` interleaved
    rounds of `seconds` per side; the per-round ratios' medians and spread."""
    points, expected = endpoints(target, codec)
    deep = points[1]
    tool = "wrk" if shutil.which("wrk") else "python threads (wrk not installed)"
    script = tmp_dir / "metrics-report.lua"
    script.write_text(WRK_SCRIPT)
    pass_seconds = max(1, round(seconds))
    base_env = {"SECRET_KEY": SECRET, "PAGE_SIZE": "20", "RATELIMIT_READS": UNREACHED_READ_LIMIT}

    def load(url: str, duration: float) -> dict[str, Any]:
        if tool == "wrk":
            return _wrk(url, duration, {**HX, **CLOSE}, connections, script)
        return _python_load(url, duration, HX, connections)

    load_before = os.getloadavg()
    with ExitStack() as stack:
        servers: dict[str, tuple[str, psutil.Process]] = {}
        for side in SIDES:
            env = {**base_env, "METRICS": side}
            if side == "on":
                env["METRICS_DIR"] = str(tmp_dir / "metrics-dir")
                (tmp_dir / "metrics-dir").mkdir(exist_ok=True)
            servers[side] = stack.enter_context(
                gunicorn(target.url, log_path=tmp_dir / f"gunicorn-metrics-{side}.log", workers=2, env=env)
            )
        for side, (base, _master) in servers.items():
            status, body = _get(base + deep["path"], HX)
            if status != 200 or f'data-id="{expected["expected_first_id"]}"' not in body.split("</tr>")[0]:
                raise RuntimeError(f"METRICS={side}: the deep fragment is not the page after its cursor")
            load(base + deep["path"], warmup_s)
        if not (
            _answers(servers["on"][0] + "/metrics") == 200 and _answers(servers["off"][0] + "/metrics") == 404
        ):
            raise RuntimeError("METRICS=on must serve /metrics and METRICS=off must not")
        passes: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
        for number in range(rounds):
            order = SIDES if number % 2 == 0 else SIDES[::-1]
            busy = psutil.cpu_percent(interval=0.5)
            for side in order:
                base, master = servers[side]
                cpu_before, pids_before = _cpu_seconds(master)
                result = load(base + deep["path"], pass_seconds)
                cpu_after, pids_after = _cpu_seconds(master)
                answered = result["requests"] - result["non_2xx_3xx"]
                passes[side].append(
                    {
                        **result,
                        "round": number,
                        "cpu_busy_before": busy,
                        "cpu_ms_per_request": (cpu_after - cpu_before) / max(answered, 1) * 1000,
                        "workers_restarted": pids_before != pids_after,
                    }
                )
            on, off = passes["on"][-1], passes["off"][-1]
            log(
                f"  metrics round {number + 1:>2}/{rounds}: on {on['rps']:7.1f} req/s "
                f"{on['cpu_ms_per_request']:5.2f} ms CPU, off {off['rps']:7.1f} req/s "
                f"{off['cpu_ms_per_request']:5.2f} ms CPU ({busy:.0f}% busy before)"
            )
        # One scrape's own cost, after the load: every series of both workers added up.
        scrape_ms = []
        for _ in range(20):
            started = time.perf_counter()
            _get(servers["on"][0] + "/metrics")
            scrape_ms.append((time.perf_counter() - started) * 1000)
    load_after = os.getloadavg()
    usable = [
        (on, off)
        for on, off in zip(passes["on"], passes["off"], strict=True)
        if not on["workers_restarted"] and not off["workers_restarted"]
    ]
    rps_ratio = [on["rps"] / off["rps"] for on, off in usable]
    cpu_ratio = [on["cpu_ms_per_request"] / off["cpu_ms_per_request"] for on, off in usable]
    errors = sum(p["errors"] + p["non_2xx_3xx"] for side in SIDES for p in passes[side])
    result = {
        "database": target.label,
        "rows": target.rows,
        "endpoint": deep["name"],
        "workers": 2,
        "connections": connections,
        "load_generator": tool,
        "rounds": rounds,
        "seconds_per_pass": pass_seconds,
        "rounds_used": len(usable),
        "errors": errors,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "rps_on_median": statistics.median(p["rps"] for p in passes["on"]),
        "rps_off_median": statistics.median(p["rps"] for p in passes["off"]),
        "cpu_ms_on_median": statistics.median(p["cpu_ms_per_request"] for p in passes["on"]),
        "cpu_ms_off_median": statistics.median(p["cpu_ms_per_request"] for p in passes["off"]),
        # on / off per round: below 1 for req/s and above 1 for CPU is what metrics cost.
        "rps_ratio": _quartiles(rps_ratio),
        "cpu_ratio": _quartiles(cpu_ratio),
        "rps_cost": 1 - statistics.median(rps_ratio),
        # Other work only ever slows a pass down: each side's best pass is its least disturbed.
        "rps_best_ratio": max(p["rps"] for p in passes["on"]) / max(p["rps"] for p in passes["off"]),
        "cpu_cost": statistics.median(cpu_ratio) - 1,
        "scrape_ms_median": statistics.median(scrape_ms),
        "passes": passes,
    }
    result["own_work"] = own_work(tmp_dir)
    # One checkout per fragment (one transaction); its share of the server's CPU per request.
    result["own_work"]["share_of_cpu"] = result["own_work"]["own_us"] / 1000 / result["cpu_ms_off_median"]
    log(report(result))
    return result


def report(r: dict[str, Any]) -> str:
    rps, cpu, own = r["rps_ratio"], r["cpu_ratio"], r["own_work"]
    return "\n".join(
        [
            f"  metrics cost, {r['endpoint']} on {r['database']} ({r['rows']:,} rows), "
            f"{r['rounds_used']} of {r['rounds']} rounds of {r['seconds_per_pass']} s a side, "
            f"{r['load_generator']}, {r['errors']} errors; load average "
            f"{r['load_average_before'][0]:.1f} before, {r['load_average_after'][0]:.1f} after:",
            f"    req/s   on {r['rps_on_median']:7.1f}  off {r['rps_off_median']:7.1f}  "
            f"on/off per round: median {rps['median']:.3f} (quartiles {rps['q1']:.3f}-{rps['q3']:.3f}, "
            f"range {rps['min']:.3f}-{rps['max']:.3f}): cost {r['rps_cost']:+.1%}; best passes "
            f"on/off {r['rps_best_ratio']:.3f}",
            f"    CPU/req on {r['cpu_ms_on_median']:5.2f} ms off {r['cpu_ms_off_median']:5.2f} ms  "
            f"on/off per round: median {cpu['median']:.3f} (quartiles {cpu['q1']:.3f}-{cpu['q3']:.3f}, "
            f"range {cpu['min']:.3f}-{cpu['max']:.3f}): cost {r['cpu_cost']:+.1%}",
            f"    one /metrics scrape after the load: {r['scrape_ms_median']:.1f} ms (median of 20)",
            f"    the metrics' own code, timed in a loop: {own['own_us']:.1f} us a fragment (the hook "
            f"{own['hook_us']:.1f} us, a pool checkout and checkin {own['pool_us']:.1f} us), "
            f"{own['share_of_cpu']:.1%} of the CPU a fragment takes without metrics",
        ]
    )


def main() -> None:
    from . import databases

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=None, help="the deep fragment's row (default: 80%%)")
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=2.0, help="each pass, per side")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--own-work", type=int, default=0, help=argparse.SUPPRESS)  # own_work()'s
    parser.add_argument("--tmp", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.own_work:
        print(json.dumps(_own_work_here(args.own_work, args.tmp)))
        return
    reason = databases.server_available("postgresql")
    if reason:
        raise SystemExit(f"no PostgreSQL: {reason}")
    depth = args.depth if args.depth is not None else args.rows * 4 // 5
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp, ExitStack() as stack:
        tmp_dir = Path(tmp)
        url = stack.enter_context(databases.throwaway("postgresql", "metrics", tmp_dir))
        info = databases.seed(url, args.rows)
        log(f"  seeded {args.rows:,} rows in {info['seed_seconds']:.1f} s")
        target = Target("postgresql", "postgresql", url, args.rows, [0, depth], info)
        codec = CursorCodec(SECRET)
        measure(
            target,
            codec,
            rounds=args.rounds,
            seconds=args.seconds,
            warmup_s=1.0,
            connections=args.connections,
            tmp_dir=tmp_dir,
        )


if __name__ == "__main__":
    main()
