"""What live streams of new orders cost at 500 open: ``python -m bench.stream_cost [--engines
postgresql,sqlite,mysql] [--streams 500]``. docs/scroll.md, "New orders, pushed", quotes it.

Per engine, on a throwaway database seeded with 30,000 orders: the list's gunicorn (gunicorn.conf.py,
gthread, 1 worker, 4 threads) and the stream server (deploy/gunicorn-streams.conf.py, gevent, 1
worker), as deploy/haproxy.cfg routes them. It then

1. reads the list (GET /orders, an htmx fragment) 200 times one after another, with no stream open;
2. opens `--streams` live streams, each its own connection, and checks one more is refused (503);
3. measures the stream worker's memory (RSS, USS) and CPU over 10 s with all of them open and
   nothing happening (heartbeats, the once-a-second checks), and reads the list 200 times again;
4. POSTs an order through the list's server 5 times, 2 s apart, and times each stream's event
   from the POST's answer (p50, p95, max over all streams and rounds);
5. lets every stream ask /orders/new at once after one of those events, as the pages do (32
   client threads, the list's 4 server threads), and times how long the last answer took.

Numbers go to stdout and bench/results/stream_cost.json. A benchmark, not a test: nothing is
asserted; it exits non-zero only when a step crashed.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import selectors
import socket
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from devtools.gunicorn import gunicorn

from .databases import seed, server_available, throwaway

RESULTS = Path(__file__).resolve().parent / "results" / "stream_cost.json"
ROWS = 30_000
READS = 200
ROUNDS = 5


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


def _post_order(base: str) -> None:
    body = json.dumps({"customer": "Stream Cost", "amount": "1.00"}).encode()
    request = urllib.request.Request(
        base + "/api/orders", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201


def _list_latency(base: str) -> dict[str, float]:
    took = []
    for _ in range(READS):
        start = time.perf_counter()
        status, _ = _get(base + "/orders", {"HX-Request": "true"})
        took.append((time.perf_counter() - start) * 1000)
        assert status == 200, status
    took.sort()
    return {"p50_ms": round(statistics.median(took), 2), "p95_ms": round(took[int(len(took) * 0.95)], 2)}


def _worker(master: psutil.Process) -> psutil.Process:
    return master.children()[0]


def _memory_mb(process: psutil.Process) -> dict[str, float]:
    info = process.memory_full_info()
    return {"rss_mb": round(info.rss / 2**20, 1), "uss_mb": round(info.uss / 2**20, 1)}


class Streams:
    """`count` streams on raw sockets, read by one selector: the client side costs little."""

    def __init__(self, base: str, count: int):
        host, port = base.removeprefix("http://").split(":")
        self.selector = selectors.DefaultSelector()
        self.socks: list[socket.socket] = []
        request = f"GET /orders/stream HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
        for _ in range(count):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(request)
            self.socks.append(sock)
        # Each answers 200 and its first event (the orders as they are now) before going on.
        for sock in self.socks:
            seen = b""
            while b"event: orders" not in seen:
                chunk = sock.recv(4096)
                if not chunk:
                    raise RuntimeError(f"a stream closed before its first event: {seen[:200]!r}")
                seen += chunk
            if not seen.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"a stream was refused: {seen[:200]!r}")
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ)

    def drain(self) -> None:
        while self.selector.select(0):
            for key, _ in self.selector.select(0):
                key.fileobj.recv(65536)  # type: ignore[union-attr]  # a socket

    def time_event(self, since: float, timeout: float = 10) -> list[float]:
        """Seconds from `since` to each stream's next `orders` event."""
        got: dict[int, float] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(self.socks) and time.monotonic() < deadline:
            for key, _ in self.selector.select(0.5):
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]  # a socket
                if b"event: orders" in data and key.fd not in got:
                    got[key.fd] = time.monotonic() - since
        if len(got) < len(self.socks):
            raise RuntimeError(f"{len(self.socks) - len(got)} streams heard no event within {timeout} s")
        return sorted(got.values())

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.selector.close()


def measure(kind: str, count: int, tmp: Path) -> dict[str, Any]:
    with throwaway(kind, "streams", tmp) as url:
        seed(url, ROWS)
        # The read budget out of the way: this measures streams, not the rate limiter.
        env = {"STREAMS_PER_PROCESS": str(count), "RATELIMIT_READS": "100000 per minute"}
        with (
            gunicorn(url, log_path=tmp / f"{kind}-list.log", workers=1, threads=4, env=env) as (app, _),
            gunicorn(
                url,
                log_path=tmp / f"{kind}-streams.log",
                workers=1,
                env=env,
                config="deploy/gunicorn-streams.conf.py",
            ) as (server, master),
        ):
            worker = _worker(master)
            result: dict[str, Any] = {"engine": kind, "streams": count, "rows": ROWS}
            result["list_server_refuses_streams"] = _get(app + "/orders/stream")[0]
            result["list_without_streams"] = _list_latency(app)
            result["worker_idle"] = _memory_mb(worker)
            print(f"{kind}: list without streams {result['list_without_streams']}", flush=True)

            opened = time.monotonic()
            streams = Streams(server, count)
            result["open_seconds"] = round(time.monotonic() - opened, 2)
            try:
                result["one_more"] = _get(server + "/orders/stream")[0]
                result["worker_open"] = _memory_mb(worker)
                per_stream_kb = (
                    (result["worker_open"]["uss_mb"] - result["worker_idle"]["uss_mb"]) * 1024 / count
                )
                result["uss_kb_per_stream"] = round(per_stream_kb, 1)
                cpu_before, wall = worker.cpu_times(), time.monotonic()
                time.sleep(10)
                cpu_after = worker.cpu_times()
                busy = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
                result["worker_cpu_percent_idle"] = round(100 * busy / (time.monotonic() - wall), 2)
                result["worker_threads"] = worker.num_threads()
                streams.drain()
                result["list_with_streams"] = _list_latency(app)
                print(f"{kind}: {count} streams open: {result}", flush=True)

                delays: list[float] = []
                for _ in range(ROUNDS):
                    streams.drain()
                    time.sleep(2)
                    _post_order(app)
                    delays += streams.time_event(time.monotonic())
                delays.sort()
                result["event_after_post_s"] = {
                    "p50": round(statistics.median(delays), 3),
                    "p95": round(delays[int(len(delays) * 0.95)], 3),
                    "max": round(delays[-1], 3),
                }
                # Every page asks /orders/new at once after an event: the list's side of a push.
                page = _get(app + "/orders")[1].decode()
                found = re.search(r'id="new-orders"[^>]*hx-get="([^"]+)"', page)
                assert found, "the list page has no new-orders pill"
                new_url = app + html.unescape(found.group(1))
                with ThreadPoolExecutor(32) as pool:
                    start = time.monotonic()
                    statuses = list(pool.map(lambda _: _get(new_url)[0], range(count)))
                    result["herd"] = {
                        "requests": count,
                        "seconds_to_last_answer": round(time.monotonic() - start, 2),
                        "statuses": sorted(set(statuses)),
                    }
            finally:
                streams.close()
            print(f"{kind}: {result}", flush=True)
            return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="postgresql,sqlite,mysql")
    parser.add_argument("--streams", type=int, default=500)
    args = parser.parse_args()
    results, failed = [], False
    with tempfile.TemporaryDirectory(prefix="stream-cost-") as tmp:
        for kind in args.engines.split(","):
            why = server_available(kind)
            if why:
                print(f"{kind}: skipped ({why})")
                continue
            try:
                results.append(measure(kind, args.streams, Path(tmp)))
            except Exception as err:  # one engine's failure is reported; the others still run
                failed = True
                print(f"{kind}: FAILED {type(err).__name__}: {err}", file=sys.stderr)
    machine = {"cpus": psutil.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}
    RESULTS.write_text(json.dumps({"machine": machine, "results": results}, indent=1) + "\n")
    print(f"wrote {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
