"""Scale-out measurements through haproxy (`make bench-cluster`): writes bench/results/cluster.json.

On one PostgreSQL primary with two streaming standbys (devtools/cluster.py), seeded once:

- pages/s and p50/p95 of cursor pages of /api/orders through haproxy, for 1 and 2 app servers,
  reading from the replicas and (DATABASE_REPLICA_URLS unset) from the primary alone;
- what choosing a node costs per page: the app's `Server-Timing: route;dur=` (probe when needed,
  REPEATABLE READ begin and the WAL-position read), and which node read each page;
- under a writer: how long a commit takes to reach the standbys, and the pages a paused standby
  did not serve (rerouted to the other standby or the primary);
- failover (Patroni, synchronous mode): with two API writers and two API readers going through
  haproxy, the leader's PostgreSQL killed (kill -9) several times, and once the whole leader node
  (Patroni too: the leader key must expire first): the time from the kill to the first write that
  succeeds, the writes refused meanwhile, the errors readers saw; and a planned switchover;
- write latency with synchronous replication against without (Patroni's synchronous_mode
  switched off and on again, interleaved rounds): POST /api/orders through haproxy, one client.

Everything shares this machine's cores (2 here) with the load generator, a Python client: the
numbers show the routing's overhead and behaviour, not how far more machines would scale.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import text

from devtools.cluster import Databases, databases, haproxy, seed
from devtools.failover import Readers, Writers
from devtools.gunicorn import ROOT, gunicorn
from devtools.patroni import TTL

RESULTS = ROOT / "bench" / "results" / "cluster.json"
_TIMING = re.compile(r'db;desc="(\w+)[^"]*", route;dur=([0-9.]+)')
SECRET = "bench-cluster-secret-0123456789-abcdefghijklmnop"
UNLIMITED = "100000000 per minute"  # the rate limiter stays on, with a budget no benchmark reaches


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Load:
    """`clients` threads, each walking the newest-first list by cursor through `base`, for `seconds`."""

    def __init__(self, base: str, clients: int, seconds: float, warmup: float = 1.0):
        self.base, self.clients, self.seconds, self.warmup = base, clients, seconds, warmup
        self.latencies: list[float] = []
        self.route_ms: list[float] = []
        self.nodes: Counter[str] = Counter()
        self.errors = 0
        self._lock = threading.Lock()

    def _client(self, start: float, end: float) -> None:
        http = requests.Session()
        cursor = None
        while (now := time.perf_counter()) < end:
            params = {"limit": 20, **({"after": cursor} if cursor else {})}
            response = http.get(f"{self.base}/api/orders", params=params, timeout=30)
            took = time.perf_counter() - now
            if response.status_code != 200:
                with self._lock:
                    self.errors += 1
                continue
            cursor = response.json()["next_cursor"]
            if now < start:
                continue
            match = _TIMING.search(response.headers.get("Server-Timing", ""))
            with self._lock:
                self.latencies.append(took)
                if match:
                    self.nodes[match[1]] += 1
                    self.route_ms.append(float(match[2]))

    def run(self) -> dict[str, Any]:
        start = time.perf_counter() + self.warmup
        end = start + self.seconds
        threads = [threading.Thread(target=self._client, args=(start, end)) for _ in range(self.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return {
            "pages_per_s": round(len(self.latencies) / self.seconds, 1),
            "p50_ms": round(_percentile(self.latencies, 0.5) * 1000, 2),
            "p95_ms": round(_percentile(self.latencies, 0.95) * 1000, 2),
            "pages": len(self.latencies),
            "errors": self.errors,
            "nodes": dict(self.nodes),
            "route_p50_ms": round(_percentile(self.route_ms, 0.5), 3) if self.route_ms else None,
            "route_p95_ms": round(_percentile(self.route_ms, 0.95), 3) if self.route_ms else None,
        }


class Writer(threading.Thread):
    """Inserts one order every `interval` seconds on the primary until stopped."""

    def __init__(self, dbs: Databases, interval: float = 0.01):
        super().__init__(daemon=True)
        self.dbs, self.interval = dbs, interval
        self.stop = threading.Event()
        self.commits = 0

    def run(self) -> None:
        from orders.data.db import make_engine

        engine = make_engine(self.dbs.primary_url)
        try:
            with engine.connect() as conn:
                while not self.stop.is_set():
                    conn.execute(
                        text(
                            "INSERT INTO orders (created_at, customer, customer_key, amount, status) "
                            "VALUES (now() - random() * interval '30 days', 'Bench', 'bench', 1.00, 'paid')"
                        )
                    )
                    conn.commit()
                    self.commits += 1
                    time.sleep(self.interval)
        finally:
            engine.dispose()


def replication_delay(dbs: Databases, samples: int = 60) -> dict[str, Any]:
    """With a writer running: time from reading the primary's position to each standby having
    replayed it (polled every millisecond), in ms."""
    from orders.data.db import make_engine

    engines = [make_engine(node.url()) for node in (dbs.primary, *dbs.standbys)]
    delays: list[float] = []
    try:
        with ExitStack() as stack:
            primary, *standbys = [stack.enter_context(e.connect()) for e in engines]
            for _ in range(samples):
                lsn = primary.execute(text("SELECT pg_current_wal_lsn()")).scalar()
                primary.commit()
                started = time.perf_counter()
                for conn in standbys:
                    while not conn.execute(text(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'")).scalar():
                        conn.commit()
                        time.sleep(0.001)
                    conn.commit()
                delays.append((time.perf_counter() - started) * 1000)
                time.sleep(0.02)
    finally:
        for engine in engines:
            engine.dispose()
    return {
        "p50_ms": round(_percentile(delays, 0.5), 2),
        "p95_ms": round(_percentile(delays, 0.95), 2),
        "max_ms": round(max(delays), 2),
    }


def routing_cost(dbs: Databases, pages: int = 300, rounds: int = 5) -> dict[str, Any]:
    """Per cursor page, in process (Flask test client, one thread): the app reading standby1
    through the router (the WAL-position check, the REPEATABLE READ snapshot, the stamp) against
    the app with standby1 as its only database. Same node, same pages, interleaved rounds."""
    from orders.app import create_app

    routed = create_app(
        {
            "DATABASE_URL": dbs.primary_url,
            "DATABASE_REPLICA_URLS": dbs.standbys[0].url(),
            "REPLICA_MAX_LAG_MS": 600_000,
            "SECRET_KEY": SECRET,
            "RATELIMIT_READS": UNLIMITED,
        }
    )
    direct = create_app(
        {"DATABASE_URL": dbs.standbys[0].url(), "SECRET_KEY": SECRET, "RATELIMIT_READS": UNLIMITED}
    )
    times: dict[str, list[float]] = {"routed": [], "direct": []}
    # CPU seconds of this process (app and test client; the client's share is the same for both):
    # unlike wall time, barely moved by the other work on a shared machine.
    cpu: dict[str, float] = {"routed": 0.0, "direct": 0.0}
    cursors: dict[str, str | None] = {"routed": None, "direct": None}
    try:
        for _ in range(rounds):
            for name, app in (("direct", direct), ("routed", routed)):
                client = app.test_client()
                cpu_started = time.process_time()
                for _ in range(pages):
                    cursor = cursors[name]
                    started = time.perf_counter()
                    response = client.get("/api/orders", query_string={"after": cursor} if cursor else {})
                    times[name].append(time.perf_counter() - started)
                    assert response.status_code == 200, response.get_data(as_text=True)
                    cursors[name] = response.get_json()["next_cursor"]
                cpu[name] += time.process_time() - cpu_started
    finally:
        for app in (routed, direct):
            app.extensions["engine"].dispose()
        routed.extensions["router"].dispose()
    routed_ms = _percentile(times["routed"], 0.5) * 1000
    direct_ms = _percentile(times["direct"], 0.5) * 1000
    return {
        "direct_p50_ms": round(direct_ms, 3),
        "routed_p50_ms": round(routed_ms, 3),
        "check_ms": round(routed_ms - direct_ms, 3),
        "direct_cpu_ms": round(cpu["direct"] / (pages * rounds) * 1000, 3),
        "routed_cpu_ms": round(cpu["routed"] / (pages * rounds) * 1000, 3),
        "pages": pages * rounds,
    }


def app_servers(stack: ExitStack, dbs: Databases, count: int, replicas: bool, logs: Path) -> str:
    # The rate limiter stays on with a budget no benchmark reaches (all load comes from haproxy).
    env = {
        "SECRET_KEY": SECRET,
        "RATELIMIT_READS": UNLIMITED,
        "RATELIMIT_WRITES": UNLIMITED,
    }
    if replicas:
        env["DATABASE_REPLICA_URLS"] = dbs.replica_urls
    bases = [
        stack.enter_context(
            gunicorn(dbs.primary_url, log_path=logs / f"app{i}.log", workers=2, threads=2, env=env)
        )[0]
        for i in range(count)
    ]
    return stack.enter_context(haproxy(bases, logs / "haproxy.log"))


def failover_run(dbs: Databases, base: str, how: str) -> dict[str, Any]:
    """Writers and readers through haproxy; the leader killed (`how`: "postgres" kills its
    PostgreSQL, "node" Patroni and PostgreSQL) or switched over ("switchover")."""
    readers, writers = Readers(base), Writers(base)
    readers.start()
    writers.start()
    try:
        time.sleep(1.5)
        old = dbs.primary
        started = time.monotonic()
        if how == "postgres":
            old.kill_postmaster()
        elif how == "node":
            old.kill()
        else:
            dbs.switchover()
        recovered = writers.wait_for_success_after(started, timeout=120)
        time.sleep(1.0)
    finally:
        writers.stop()
        readers.stop()
    if how == "node":
        old.start()
    dbs.wait_healthy(timeout=180)
    refused = writers.statuses(started, recovered)
    reads = readers.statuses()
    # A switchover's old primary takes writes until it stops: its outage is the span of refused
    # writes (first refused sent to last refused answered), for every kind of run.
    failed = [a for a in writers.answers if a.sent >= started and not 200 <= a.status < 300]
    outage = max(a.at for a in failed) - min(a.sent for a in failed) if failed else 0.0
    refused = writers.statuses(started, max(recovered, max((a.sent for a in failed), default=0.0)))
    return {
        "first_write_s": round(recovered - started, 2),
        "writes_refused_span_s": round(outage, 2),
        "writes_refused": sum(n for status, n in refused.items() if not 200 <= status < 300),
        "refused_by_status": {str(k): v for k, v in refused.items() if not 200 <= k < 300},
        "writes_acknowledged": len(writers.created),
        "reader_errors": sum(n for status, n in reads.items() if status != 200),
        "reader_pages": reads[200],
    }


def failover(dbs: Databases, runs: int, logs: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with ExitStack() as stack:
        base = app_servers(stack, dbs, 2, True, logs)
        for how, count in (("postgres", runs), ("switchover", 1), ("node", 1)):
            label = {
                "postgres": "leader's PostgreSQL killed",
                "switchover": "patronictl switchover",
                "node": f"whole leader node killed (leader key TTL {TTL} s)",
            }[how]
            rounds = [failover_run(dbs, base, how) for _ in range(count)]
            for r in rounds:
                print(f"  {label:46} {r}")
            times = [r["first_write_s"] for r in rounds]
            results[label] = {
                "first_write_s_min": min(times),
                "first_write_s_median": sorted(times)[len(times) // 2],
                "first_write_s_max": max(times),
                "reader_errors": sum(r["reader_errors"] for r in rounds),
                "runs": rounds,
            }
    return results


def post_latency(base: str, posts: int) -> list[float]:
    http = requests.Session()
    times = []
    for _ in range(posts):
        started = time.perf_counter()
        response = http.post(f"{base}/api/orders", json={"customer": "Bench", "amount": "1.00"}, timeout=30)
        assert response.status_code == 201, response.text
        times.append(time.perf_counter() - started)
    return times


def set_synchronous(dbs: Databases, on: bool) -> None:
    """Patroni's synchronous_mode on or off (PATCH /config), waiting until the leader runs so."""
    import urllib.request

    leader = dbs.primary
    body = json.dumps({"synchronous_mode": on}).encode()
    request = urllib.request.Request(
        f"{leader.rest}/config", data=body, method="PATCH", headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(request, timeout=5).close()
    deadline = time.monotonic() + 60
    while bool(leader.sql("SHOW synchronous_standby_names")) != on:
        if time.monotonic() > deadline:
            raise RuntimeError(f"synchronous_standby_names did not follow synchronous_mode={on}")
        time.sleep(0.2)


def sync_vs_async(dbs: Databases, logs: Path, posts: int = 300, rounds: int = 3) -> dict[str, Any]:
    times: dict[str, list[float]] = {"synchronous": [], "asynchronous": []}
    with ExitStack() as stack:
        base = app_servers(stack, dbs, 1, True, logs)
        try:
            for _ in range(rounds):
                for mode in ("synchronous", "asynchronous"):
                    set_synchronous(dbs, mode == "synchronous")
                    times[mode] += post_latency(base, posts)
        finally:
            set_synchronous(dbs, True)
    return {
        mode: {
            "p50_ms": round(_percentile(values, 0.5) * 1000, 2),
            "p95_ms": round(_percentile(values, 0.95) * 1000, 2),
            "posts": len(values),
        }
        for mode, values in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--failovers", type=int, default=5, help="leader kills to time")
    parser.add_argument("--only-failover", action="store_true", help="skip the read throughput parts")
    args = parser.parse_args()
    results: dict[str, Any] = {"rows": args.rows, "seconds": args.seconds, "clients": args.clients}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, databases() as dbs:
        logs = Path(tmp)
        seed(dbs, args.rows)
        version = dbs.primary.sql("SHOW server_version")
        results["postgresql"] = version
        print(f"PostgreSQL {version}: primary + 2 standbys, {args.rows:,} orders, {args.clients} clients")
        if args.only_failover:
            _failover_parts(dbs, logs, args.failovers, results)
            RESULTS.with_name("cluster-failover.json").write_text(json.dumps(results, indent=2) + "\n")
            print(f"wrote {RESULTS.with_name('cluster-failover.json').relative_to(ROOT)}")
            return
        cost = results["routing cost per cursor page"] = routing_cost(dbs)
        print(f"  routing cost per cursor page (in process, standby1 routed vs direct): {cost}")
        # The machine is shared: each configuration runs `rounds` times, interleaved, and the
        # round with the most pages/s is kept (the least disturbed one); all rounds are saved.
        configs = [(1, False), (1, True), (2, False), (2, True)]
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(args.rounds):
            for count, replicas in configs:
                servers = f"{count} app server{'s' if count > 1 else ''}"
                label = f"{servers}, reads on {'replicas' if replicas else 'primary'}"
                with ExitStack() as stack:
                    base = app_servers(stack, dbs, count, replicas, logs)
                    runs.setdefault(label, []).append(Load(base, args.clients, args.seconds).run())
                print(f"  {label:42} {_line(runs[label][-1])}")
        for label, rounds in runs.items():
            results[label] = {**max(rounds, key=lambda r: r["pages_per_s"]), "rounds": rounds}

        with ExitStack() as stack:
            base = app_servers(stack, dbs, 2, True, logs)
            writer = Writer(dbs)
            writer.start()
            try:
                delay = results["replication delay under a writer"] = replication_delay(dbs)
                print(f"  replication delay under a writer (100 commits/s): {delay}")
                label = "2 app servers, replicas, writer 100/s"
                results[label] = Load(base, args.clients, args.seconds).run()
                print(f"  {label:42} {_line(results[label])}")
                dbs.standbys[1].pause_replay()
                label = f"same, {dbs.router_name(dbs.standbys[1])} paused"
                results[label] = Load(base, args.clients, args.seconds).run()
                print(f"  {label:42} {_line(results[label])}")
                dbs.standbys[1].resume_replay()
            finally:
                writer.stop.set()
                writer.join()
        _failover_parts(dbs, logs, args.failovers, results)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


def _failover_parts(dbs: Databases, logs: Path, failovers: int, results: dict[str, Any]) -> None:
    latency = results["POST latency, synchronous vs asynchronous replication"] = sync_vs_async(dbs, logs)
    print(f"  POST /api/orders through haproxy, one client: {latency}")
    results["failover"] = failover(dbs, failovers, logs)


def _line(r: dict[str, Any]) -> str:
    route = f", route p50 {r['route_p50_ms']} ms" if r["route_p50_ms"] is not None else ""
    return (
        f"{r['pages_per_s']:7.1f} pages/s  p50 {r['p50_ms']:6.2f} ms  p95 {r['p95_ms']:6.2f} ms"
        f"{route}  nodes {r['nodes']}  errors {r['errors']}"
    )


if __name__ == "__main__":
    main()
