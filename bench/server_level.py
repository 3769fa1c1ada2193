"""Server level: gunicorn (gthread, the production start) against granian (WSGI, blocking threads)
serving the same app on the same PostgreSQL database, in interleaved rounds.

Each round loads, on each server in turn: the deep rows fragment and the deep JSON page (wrk, 8
connections, a connection per request as http_level does), the whole CSV export (curl, read to
its end), and the deep fragment again while 16 slow clients each hold a connection by sending a
request's head one byte every 0.5 s (what the front, deploy/haproxy.cfg, absorbs in production;
measured here without it, to see what each server does on its own). Both run 2 workers of 8
threads (WEB_THREADS' default); granian's Python threads are its "blocking threads".

The app's production checks run in serve.py, which only gunicorn goes through: granian starts
the same factory (`app:create_app`) with the same settings. This measures; the app keeps
gunicorn unless granian is faster on every line and every doors test holds under it
(docs/performance.md says what was found).

python -m bench.server_level [--rows 20000] [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from devtools.gunicorn import ROOT, free_port, gunicorn, stop_process, wait_until_answering
from orders.data.db import make_engine
from pagination import CursorCodec

from .common import SECRET, cursor_for, keys_before, log, markdown_table
from .databases import seeded
from .http_level import CLOSE, HX, UNREACHED_READ_LIMIT, WRK_SCRIPT, _wrk

WORKERS = 2
THREADS = 8
SLOW_CLIENTS = 16
ENV = {"SECRET_KEY": SECRET, "PAGE_SIZE": "20", "RATELIMIT_READS": UNREACHED_READ_LIMIT}


@contextmanager
def granian(database_url: str, *, log_path: Path) -> Iterator[str]:
    """The app under granian's WSGI interface on a free loopback port; yields its base URL once
    /healthz answers."""
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if k != "APP_ENV"}, "DATABASE_URL": database_url, **ENV}
    command = [
        sys.executable, "-m", "granian", "--interface", "wsgi", "--factory",
        "--workers", str(WORKERS), "--blocking-threads", str(THREADS),
        "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "app:create_app",
    ]  # fmt: skip
    with log_path.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(process, base, "/healthz", log_path, "granian")
        yield base
    finally:
        stop_process(process)


def _export_seconds(base: str) -> float:
    """The whole CSV export, read to its end by curl: wall seconds."""
    started = time.perf_counter()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", f"{base}/orders/export.csv"], check=True, timeout=300)
    return time.perf_counter() - started


@contextmanager
def slow_clients(base: str, count: int) -> Iterator[None]:
    """`count` connections that each send a request's head one byte every 0.5 s until released."""
    host, port = base.split("//")[1].split(":")
    stop = threading.Event()
    head = b"GET /orders HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000

    def trickle() -> None:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                for byte in head:
                    if stop.wait(0.5):
                        return
                    sock.sendall(bytes([byte]))
        except OSError:
            return  # the server closed it: it holds nothing of the server then

    threads = [threading.Thread(target=trickle, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # every connection open and sending
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)


def measure(url: str, rows: int, *, rounds: int, seconds: float, tmp: Path) -> list[dict[str, Any]]:
    """Per server and load: req/s and p99 of each round, export seconds."""
    engine = make_engine(url)
    with Session(engine) as session:
        cursor = cursor_for(CursorCodec(SECRET), keys_before(session, int(rows * 0.9)))
    engine.dispose()
    deep = f"/orders?after={cursor}&page=2"
    script = tmp / "report.lua"
    script.write_text(WRK_SCRIPT)
    loads = [("fragment, 90% deep", deep, HX), ("JSON page, 90% deep", f"/api/orders?after={cursor}", {})]
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    servers = {
        "gunicorn gthread": gunicorn(
            url, log_path=tmp / "gunicorn.log", workers=WORKERS, threads=THREADS, env=ENV
        ),
        "granian wsgi": granian(url, log_path=tmp / "granian.log"),
    }
    with servers["gunicorn gthread"] as (gunicorn_base, _master), servers["granian wsgi"] as granian_base:
        bases = {"gunicorn gthread": gunicorn_base, "granian wsgi": granian_base}
        for base in bases.values():  # warm pools and caches
            for _name, path, headers in loads:
                _wrk(base + path, 2, {**headers, **CLOSE}, 8, script)
        for number in range(rounds):
            log(f"  round {number + 1} of {rounds}")
            for server, base in bases.items():
                for name, path, headers in loads:
                    found.setdefault((server, name), []).append(
                        _wrk(base + path, seconds, {**headers, **CLOSE}, 8, script)
                    )
                found.setdefault((server, "export"), []).append({"seconds": _export_seconds(base)})
                with slow_clients(base, SLOW_CLIENTS):
                    result = _wrk(base + deep, seconds, {**HX, **CLOSE}, 8, script)
                found.setdefault((server, f"fragment beside {SLOW_CLIENTS} slow clients"), []).append(result)
    results = []
    for (server, name), passes in found.items():
        if name == "export":
            results.append(
                {"server": server, "load": name, "seconds": statistics.median(p["seconds"] for p in passes)}
            )
            continue
        results.append(
            {
                "server": server,
                "load": name,
                "rps": statistics.median(p["rps"] for p in passes),
                "p99_ms": statistics.median(p["p99_ms"] for p in passes),
                "errors": sum(p["errors"] + p["non_2xx_3xx"] for p in passes),
            }
        )
    return results


def report(results: list[dict[str, Any]], rows: int) -> str:
    cell = {(r["server"], r["load"]): r for r in results}
    rows_out = []
    for load in dict.fromkeys(r["load"] for r in results):
        g, n = cell[("gunicorn gthread", load)], cell[("granian wsgi", load)]
        if load == "export":
            rows_out.append([f"export of {rows:,} rows (s)", f"{g['seconds']:.2f}", f"{n['seconds']:.2f}",
                             f"{g['seconds'] / n['seconds']:.2f}x"])  # fmt: skip
            continue
        rows_out.append(
            [
                f"{load} (req/s, p99 ms, errors)",
                f"{g['rps']:.0f}, {g['p99_ms']:.1f}, {g['errors']}",
                f"{n['rps']:.0f}, {n['p99_ms']:.1f}, {n['errors']}",
                f"{n['rps'] / g['rps']:.2f}x" if g["rps"] else "-",
            ]
        )
    title = (f"server level: PostgreSQL, {rows:,} orders, {WORKERS} workers x {THREADS} threads each, "
             "median of the rounds")  # fmt: skip
    return markdown_table(title, ["load", "gunicorn gthread", "granian wsgi", "granian / gunicorn"], rows_out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.server_level", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args(argv)
    if not shutil.which("wrk") or not shutil.which("curl"):
        log("!! the server level needs wrk and curl (Debian packages)")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-servers-"))
    results: list[dict[str, Any]] = []
    for _kind, url in seeded("postgresql", "servers", args.rows, tmp):
        results = measure(url, args.rows, rounds=args.rounds, seconds=args.seconds, tmp=tmp)
    print(report(results, args.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
