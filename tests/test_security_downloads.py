"""Exports hold nothing: the production recipe (gunicorn.conf.py) under slow clients, on PostgreSQL.

The app runs under gunicorn with the repository's gunicorn.conf.py (gthread workers) and a
worker timeout of 3 s, far shorter than the downloads. Then:

- 40 HEAD /orders/export.csv and 20 downloads abandoned after their first bytes leave no
  connection "idle in transaction" (pg_stat_activity), as they did when the first batch's
  transaction stayed open for a body that was never sent.
- SLOW_CLIENTS clients download the whole export at a few hundred KB/s, each for longer than the
  worker timeout, while /healthz and the list are asked for again and again: every download is
  complete and byte-identical to a fast one, every other request is answered, no worker is
  killed, and pg_stat_activity never shows the export idle in a transaction between batches.
- Chunked request bodies through gunicorn's own reader: malformed 400, over 16 KiB 413.

Timings are printed (pytest -s), never asserted: the only time compared is the download's own
duration against the worker timeout, which says whether the test tested anything.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from devtools.gunicorn import free_port, stop_process
from orders.data.db import make_engine, migrate

from .databases import throwaway_database
from .fixtures import API_TOKEN, CHUNKED_POST, chunked_bodies
from .helpers import seed_orders_only
from .logs import whole_lines

# About 17 MB of CSV: far more than the kernel buffers between server and client hold (4 MB
# send buffer at most here), so the server's thread really waits for the slow reader.
ROWS = 250_000
ROOT = Path(__file__).resolve().parent.parent
WORKERS, THREADS = 2, 4
# Seconds. A sync worker whose request runs longer is killed. A gthread worker closes each finished
# connection on its main loop, waiting up to 2 s for the client to read the response's end, so
# the timeout must exceed 2 s per thread that can finish at once (gunicorn.conf.py says so).
WORKER_TIMEOUT = 2 * THREADS + 1
SLOW_CLIENTS = 3  # leaves threads free for everyone else
RATE = 1024 * 1024  # bytes a second per slow client: each download takes about 17 s
# A transaction idle this long is held, not used: a request's own is idle while its page renders
# (milliseconds); an export holding one across batches leaves it idle while the client reads
# (seconds a batch at RATE).
HELD = "1 second"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, psutil.Process]]:
    with throwaway_database("postgresql", tmp_path_factory.mktemp("downloads"), "downloads") as url:
        engine = make_engine(url)
        migrate(engine)
        seed_orders_only(engine, ROWS)  # downloaded, never searched: without the words
        engine.dispose()
        log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
        with recipe_server(url, log) as (base, master):
            yield base, url, master
        print("\n".join(whole_lines(log))[-3000:])


@contextmanager
def recipe_server(url: str, log: Path) -> Iterator[tuple[str, psutil.Process]]:
    """gunicorn started as the README says (serve.py), so gunicorn.conf.py decides the worker model; sized
    and bound through the variables it reads. Stops exactly the processes it started."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SECRET_KEY": "downloads-" + "k3J9x2Qm7Lp4Vz8Rt1Wc6Yb5Nd0Hf" * 2,
        "API_TOKENS": API_TOKEN,
        "RATELIMIT_READS": "100000 per minute",
        "BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(WORKERS),
        "WEB_THREADS": str(THREADS),
        "GUNICORN_CMD_ARGS": f"--timeout {WORKER_TIMEOUT}",  # shorter than every slow download
    }
    env.pop("APP_ENV", None)
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "serve.py"], cwd=ROOT, env=env, stdout=out, stderr=out)
    master = psutil.Process(process.pid)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while len(master.children()) < WORKERS or not _answers(base):
            assert process.poll() is None, "\n".join(whole_lines(log))[-2000:]
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.1)
        yield base, master
    finally:
        stop_process(process)


def _answers(base: str) -> bool:
    with suppress(requests.RequestException):
        return requests.get(f"{base}/healthz", timeout=2).status_code == 200
    return False


def activity(url: str, sql: str, **params: str) -> list[Any]:
    """The rows of `sql` over pg_stat_activity, read on a connection of its own to the database
    at `url` (named :db in `sql`)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text(sql), {"db": make_url(url).database, **params}).all())
    finally:
        engine.dispose()


def sessions_by_state(url: str) -> dict[str, int]:
    """The app's connections to this database by state (this query's own excluded)."""
    sql = (
        "SELECT coalesce(state, '?'), count(*) FROM pg_stat_activity "
        "WHERE datname = :db AND pid <> pg_backend_pid() GROUP BY 1"
    )
    return {state: n for state, n in activity(url, sql)}


def idle_in_transaction(url: str) -> int:
    """Connections idle inside a transaction right now (a request rendering its page, or a leak)."""
    return sum(n for state, n in sessions_by_state(url).items() if state.startswith("idle in transaction"))


def held_in_transactions(url: str, held: str) -> list[Any]:
    """Connections idle inside a transaction for over `held`: nothing runs on them, and their
    snapshot and locks stay (pid, state, seconds idle, seconds open, the last statement's start).
    A statement running long (a batch read on a loaded machine) is in use, not held: counting
    transactions by their age alone once failed a run, at a load of 18, that leaked nothing."""
    sql = (
        "SELECT pid, state, extract(epoch FROM now() - state_change), "
        "extract(epoch FROM now() - xact_start), left(query, 60) FROM pg_stat_activity "
        "WHERE datname = :db AND pid <> pg_backend_pid() "
        "AND state LIKE 'idle in transaction%' AND state_change < now() - CAST(:held AS interval)"
    )
    return activity(url, sql, held=held)


def test_heads_and_abandoned_downloads_hold_no_transaction(served) -> None:
    base, url, _ = served
    for _ in range(40):
        response = requests.head(f"{base}/orders/export.csv", timeout=30)
        assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/csv")
    for _ in range(20):
        with requests.get(f"{base}/orders/export.csv", stream=True, timeout=30) as response:
            assert next(response.iter_content(1024))  # the first bytes, then hang up
    # The server notices a hang-up when it next writes: the reads under way then (the export's
    # read-ahead) end first, each in its own short transaction. Within a bound, every connection
    # is idle again, none held in a transaction (a fixed 0.5 s once met one of those short ones).
    deadline = time.monotonic() + 10
    while set(states := sessions_by_state(url)) - {"idle"} and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"\nafter 40 HEADs and 20 abandoned downloads: {states}")
    assert set(states) <= {"idle"} and idle_in_transaction(url) == 0, states


def slow_download(base: str, results: dict[int, tuple[bytes, float]], index: int) -> None:
    """GET the export over a socket with a small receive buffer, read at RATE bytes a second."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # the server cannot run ahead
    sock.settimeout(30)
    sock.connect((host, int(port)))
    started = time.monotonic()
    sock.sendall(b"GET /orders/export.csv HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = bytearray()
    while chunk := sock.recv(8192):
        data += chunk
        ahead = len(data) / RATE - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    sock.close()
    results[index] = (bytes(data), time.monotonic() - started)


def dechunk(response: bytes) -> bytes:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = bytearray()
    while True:
        size_line, _, body = body.partition(b"\r\n")
        assert size_line, f"the download was cut off after {len(out):,} bytes"
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += body[:size]
        body = body[size + 2 :]


def test_slow_downloads_complete_while_the_app_stays_available(served) -> None:
    base, url, master = served
    workers_before = {p.pid for p in master.children()}
    fast = requests.get(f"{base}/orders/export.csv", timeout=60).content
    assert fast.count(b"\n") == ROWS + 1
    print(f"\nexport: {len(fast) / 1e6:.1f} MB")

    results: dict[int, tuple[bytes, float]] = {}
    clients = [threading.Thread(target=slow_download, args=(base, results, i)) for i in range(SLOW_CLIENTS)]
    for client in clients:
        client.start()
    latencies: dict[str, list[float]] = {"/healthz": [], "/orders (fragment)": []}
    failures: list[str] = []
    held: list[Any] = []
    momentary: list[int] = []
    while any(client.is_alive() for client in clients):
        for name, path, headers in (
            ("/healthz", "/healthz", {}),
            ("/orders (fragment)", "/orders", {"HX-Request": "true"}),
        ):
            started = time.monotonic()
            try:
                response = requests.get(f"{base}{path}", headers=headers, timeout=10)
                if response.status_code != 200:
                    failures.append(f"{name}: {response.status_code}")
            except requests.RequestException as err:
                failures.append(f"{name}: {type(err).__name__}")
            latencies[name].append(time.monotonic() - started)
        held.extend(held_in_transactions(url, HELD))
        momentary.append(idle_in_transaction(url))
        time.sleep(0.2)
    for client in clients:
        client.join()

    durations = [results[i][1] for i in range(SLOW_CLIENTS)]
    print(
        f"\n{SLOW_CLIENTS} slow downloads at {RATE // 1024} KB/s each: "
        f"{', '.join(f'{d:.1f}' for d in durations)} s (worker timeout {WORKER_TIMEOUT} s)"
    )
    for name, values in latencies.items():
        print(
            f"{name} during them: {len(values)} requests, p50 {statistics.median(values) * 1000:.1f} ms, "
            f"max {max(values) * 1000:.1f} ms"
        )
    print(
        f"connections idle in transaction, sampled {len(momentary)} times: at most {max(momentary)} at any "
        f"moment (requests rendering); idle in a transaction for over {HELD}: {len(held)}"
    )
    assert min(durations) > WORKER_TIMEOUT, "the downloads were too fast to test anything"
    for i in range(SLOW_CLIENTS):
        assert dechunk(results[i][0]) == fast, f"slow download {i} is not the whole file"
    assert not failures, failures
    assert not held, f"an export held a transaction open between batches ({len(held)} seen): {held[:5]}"
    assert {p.pid for p in master.children()} == workers_before, "a worker was killed"


@pytest.mark.parametrize("case", list(chunked_bodies()))
def test_chunked_bodies_through_gunicorn(served, case: str) -> None:
    base, _, _ = served
    body, status = chunked_bodies()[case]
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(CHUNKED_POST + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:300]
