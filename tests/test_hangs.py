"""Dependencies that hang instead of refusing, for real on loopback: every wait ends in a 503.

- A listener that accepts connections and never answers stands in for the database
  (PostgreSQL and MariaDB URLs): connect_timeout ends every request, /healthz included, with
  503 `unavailable` and Retry-After (it was a 500: psycopg raises ConnectionTimeout, a subclass
  of OperationalError).
- A throwaway PostgreSQL cluster of the test's own is frozen (SIGSTOP on the postmaster and
  every backend) while the app holds pooled connections: the client read timeout ends the
  requests, /healthz says so within its own bound, and after SIGCONT the same app answers 200.
- The same cluster restarted behind the pool's back: no request fails on a dead pooled
  connection (list reads read again on a fresh one, every other checkout is pinged first).
- A Redis of the test's own holding the rate-limit counters is frozen: requests are answered
  (counted in memory, logged once), /healthz is 200 "degraded" naming it (still ready), and once
  Redis answers again the counters go back to it.

Never the machine's own PostgreSQL or Redis: only servers these tests started, by their ids.
Times are printed; the only bound asserted is SAFETY, far beyond every timeout, which a wait
without limit would cross.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
import requests
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from devtools.gunicorn import gunicorn
from devtools.pgserver import Server
from devtools.throwaway import frozen, postgres_processes
from orders.data.db import make_engine, migrate
from orders.data.models import STATUSES, Order
from orders.exports.stream import INTERRUPTED
from orders.views.health import READY_FOR_S

from . import recipe
from .databases import own_postgresql
from .fixtures import SECRET, make_app, migrated
from .helpers import BASE, add_orders, seed_orders_only
from .live import LiveServer
from .logs import whole_lines

POOL_TIMEOUT_S = 1
SAFETY = 40  # seconds: every bound below is a few seconds; a hang would wait forever
BOUNDS = {
    "DATABASE_CONNECT_TIMEOUT_S": 2,
    "DATABASE_READ_TIMEOUT_MS": 1500,
    "STATEMENT_TIMEOUT_MS": 1000,
    "HEALTHZ_TIMEOUT_MS": 1000,
}


def bounded_get(client: Any, path: str, **kwargs: Any) -> tuple[Any, float]:
    """GET in a thread of its own; fail (not hang) the test if it has not answered by SAFETY."""
    result: dict[str, Any] = {}

    def run() -> None:
        started = time.perf_counter()
        response = client.get(path, **kwargs)
        response.get_data()
        result["answer"] = (response, time.perf_counter() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SAFETY)
    assert "answer" in result, f"GET {path} still waiting after {SAFETY} s"
    answer: tuple[Any, float] = result["answer"]
    return answer


def assert_unavailable(response: Any) -> None:
    assert response.status_code == 503, response.get_data()[:300]
    assert int(response.headers["Retry-After"]) > 0
    assert response.json["error"]["code"] == "unavailable"


# --- A listener that accepts and never answers ---------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listener accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


SILENT_URLS = {
    "postgresql": "postgresql+psycopg://postgres@127.0.0.1:{port}/orders",
    "mysql": "mysql+pymysql://root@127.0.0.1:{port}/orders",
}


@pytest.mark.parametrize("kind", list(SILENT_URLS))
def test_a_database_that_accepts_and_never_answers_is_a_503(silent_port: int, kind: str) -> None:
    app = make_app(SILENT_URLS[kind].format(port=silent_port), **BOUNDS)
    client = app.test_client()
    for path in ("/api/orders", "/orders", "/orders/export.csv", "/healthz"):
        response, elapsed = bounded_get(client, path)
        print(f"\n{kind} {path}: {response.status_code} after {elapsed:.2f} s")
        if path.startswith("/api") or path == "/healthz":
            assert_unavailable(response)
        else:
            assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0
    app.extensions["engine"].dispose()


# --- A frozen PostgreSQL ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Server]:
    server, _ = own_postgresql("hangs-pg-")
    with server:
        engine = make_engine(server.url)
        migrate(engine)
        add_orders(
            engine,
            [(BASE - dt.timedelta(minutes=i), f"c{i}", Decimal(i), STATUSES[i % 4]) for i in range(50)],
        )
        engine.dispose()
        yield server


def test_a_frozen_postgres_ends_requests_on_pooled_connections_with_503(cluster: Server) -> None:
    app = make_app(cluster.url, **BOUNDS)
    client = app.test_client()
    # Warm: pooled connections exist, idle, open to the server about to freeze.
    for _ in range(3):
        assert client.get("/api/orders").status_code == 200
    assert client.get("/healthz").status_code == 200
    with frozen(postgres_processes(cluster)):
        for path in ("/api/orders", "/healthz", "/api/orders?limit=5"):
            response, elapsed = bounded_get(client, path)
            print(f"\nfrozen postgres {path}: {response.status_code} after {elapsed:.2f} s")
            assert_unavailable(response)
        response, elapsed = bounded_get(client, "/orders/export.csv")
        assert response.status_code == 503 and int(response.headers["Retry-After"]) > 0
    # Thawed: the very same app and pool answer again, no connection leaked.
    deadline = time.monotonic() + SAFETY
    while client.get("/api/orders").status_code != 200:
        assert time.monotonic() < deadline, "the app never recovered after SIGCONT"
        time.sleep(0.2)
    assert client.get("/healthz").status_code == 200
    assert app.extensions["engine"].pool.checkedout() == 0
    app.extensions["engine"].dispose()


# --- A restart behind the pool's back ------------------------------------------------------------------

# One request of each kind a reader sends; after a restart each must find its pooled connection
# dead and still answer. `retried`: a list read (checked out without a ping, read again on a fresh
# connection); the others are pinged on checkout and reconnect before their first statement.
AFTER_RESTART = [
    ("/orders?page=2", {"HX-Request": "true"}, True),  # a fragment, filled in below with a cursor
    ("/orders", {}, True),
    ("/api/orders?limit=5", {}, True),
    ("/orders/new", {}, True),
    ("/orders/1", {}, False),
    ("/orders/export.csv", {}, False),
]


def test_a_restarted_database_fails_no_request_on_a_dead_pooled_connection(
    cluster: Server, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(cluster.url, **BOUNDS)
    client = app.test_client()
    engine = app.extensions["engine"]
    cursor = client.get("/api/orders?limit=5").json["next_cursor"]
    requests_ = [(f"/orders?after={cursor}&page=2", h, r) if h else (p, h, r) for p, h, r in AFTER_RESTART]
    before = {path: client.get(path, headers=headers).get_data() for path, headers, _ in requests_}
    caplog.set_level(logging.INFO, logger="orders.web.read_routing")
    for path, headers, retried in requests_:
        # Several idle pooled connections, all opened before the restart.
        held = [engine.connect() for _ in range(3)]
        for conn in held:
            conn.close()
        cluster.stop()
        cluster.start()
        caplog.clear()
        response = client.get(path, headers=headers)
        assert response.status_code == 200, (path, response.status_code, response.get_data()[:300])
        if not path.startswith("/orders/new"):  # the count of new orders is 0 either way
            assert response.get_data() == before[path], path
        read_again = [r for r in caplog.records if "read again on a fresh one" in r.getMessage()]
        assert len(read_again) == (1 if retried else 0), (path, [r.getMessage() for r in caplog.records])
    assert engine.pool.checkedout() == 0
    engine.dispose()


# --- A download cut by an outage ---------------------------------------------------------------------

EXPORT_ROWS = 100_000  # about 7 MB: more than the kernel's buffers hold, so the server waits for us


def read_chunked(sock: socket.socket) -> tuple[bytes, bool]:
    """The body of a chunked response read to EOF, and whether it had its terminating chunk."""
    raw = bytearray()
    while chunk := sock.recv(65536):
        raw += chunk
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower(), head[:300]
    out = bytearray()
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            return bytes(out), True
        if len(body) < size:
            return bytes(out + body[:size]), False
        out += body[:size]
        body = body[size + 2 :]
    return bytes(out), False


def test_an_export_cut_by_an_outage_is_visibly_broken_and_resumes(cluster: Server) -> None:
    engine = make_engine(cluster.url)
    seed_orders_only(engine, EXPORT_ROWS)  # exported, never searched: without the words
    engine.dispose()
    app = make_app(cluster.url, RATELIMIT_READS="1000 per minute")
    with LiveServer(app) as server:
        whole = requests.get(f"{server.url}/orders/export.csv", timeout=SAFETY).content
        body, complete = download_through_an_outage(server.url, cluster)
        assert not complete, "an interrupted download ended like a complete one"
        lines = body.decode().splitlines(keepends=True)
        marker = lines[-1]
        print(f"\ninterrupted after {len(lines) - 2:,} of {EXPORT_ROWS + 50:,} rows: {marker.strip()[:90]}")
        assert marker.startswith(INTERRUPTED) and marker.endswith("\n")
        cursor = marker.removeprefix(INTERRUPTED).strip()
        assert cursor, "the marker carries the cursor to resume with"
        rest = requests.get(f"{server.url}/orders/export.csv", params={"after": cursor}, timeout=SAFETY)
        assert rest.status_code == 200
        _, _, remainder = rest.content.partition(b"\n")
        assert "".join(lines[:-1]).encode() + remainder == whole, "resumed export is not the rest"
    app.extensions["engine"].dispose()


def kill(cluster: Server) -> None:
    """The cluster's postmaster and every backend killed (SIGKILL): no goodbye to any client."""
    processes = postgres_processes(cluster)
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(processes, timeout=SAFETY)


def download_through_an_outage(
    base_url: str, cluster: Server, stop: Callable[[Server], None] = Server.stop, pause: float = 0
) -> tuple[bytes, bool]:
    """GET /orders/export.csv, stopping the database `pause` seconds after the first bytes
    arrived (meanwhile the server waits to send: nothing more is read); (the body, whether it had
    its terminating chunk). The database is started again before returning."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.settimeout(SAFETY)
    sock.connect(("127.0.0.1", int(base_url.rsplit(":", 1)[1])))
    sock.sendall(b"GET /orders/export.csv HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    first = sock.recv(65536)
    time.sleep(pause)
    stop(cluster)  # mid-download: the next batch finds no database
    try:
        return read_chunked_after(sock, first)
    finally:
        sock.close()
        cluster.start()


@pytest.mark.parametrize(
    ("stop", "pauses"), [(Server.stop, [0.0]), (kill, [0.2, 0.5, 1.0, 0.2, 2.0])], ids=["stopped", "killed"]
)
def test_gunicorn_logs_an_interrupted_export_in_one_line(
    cluster: Server, tmp_path: Any, stop: Callable[[Server], None], pauses: list[float]
) -> None:
    """Under the production recipe (gunicorn.conf.py) the log says what happened and where to
    resume, in the app's one line, without gunicorn's traceback of the aborted stream: also when
    the database is killed while the server waits for the reader, and the session's cleanup then
    fails on the lost connection ("the connection is lost", which replaced ExportInterrupted and
    printed 125 lines). Several pauses: the cleanup fails only in some of them."""
    engine = make_engine(cluster.url)
    with Session(engine) as session:
        enough = session.scalar(select(func.count()).select_from(Order)) >= EXPORT_ROWS
    if not enough:
        seed_orders_only(engine, EXPORT_ROWS)
    engine.dispose()
    log_path = tmp_path / "gunicorn.log"
    env = {
        "SECRET_KEY": SECRET,
        "RATELIMIT_READS": "1000 per minute",
        **{k: str(v) for k, v in BOUNDS.items()},
        # What is tested is the outage mid-download, not the timeouts: on a loaded machine the
        # export's first batch from a database just restarted after a kill outran the 1 s
        # statement timeout once (a correct 503, before any byte of the download).
        "STATEMENT_TIMEOUT_MS": "5000",
        "DATABASE_READ_TIMEOUT_MS": "6000",
    }
    with gunicorn(cluster.url, log_path=log_path, workers=1, threads=2, env=env) as (base, _):
        for pause in pauses:
            _, complete = download_through_an_outage(base, cluster, stop, pause)
            assert not complete
    log = "\n".join(whole_lines(log_path))
    assert "export interrupted, resume after=" in log, log[-3000:]
    assert "Traceback" not in log and "Error handling request" not in log, log[-3000:]


def read_chunked_after(sock: socket.socket, first: bytes) -> tuple[bytes, bool]:
    """read_chunked() for a socket whose first bytes were already read."""

    class Replay:
        def __init__(self) -> None:
            self.pending = first

        def recv(self, size: int) -> bytes:
            if self.pending:
                data, self.pending = self.pending, b""
                return data
            return sock.recv(size)

    return read_chunked(Replay())


# --- A frozen Redis ----------------------------------------------------------------------------------


@pytest.fixture
def own_redis() -> Iterator[tuple[str, Any]]:
    with recipe.own_redis() as server:
        yield server


def redis_app(tmp_path: Any, uri: str) -> Flask:
    url = migrated(f"sqlite:///{tmp_path / 'redis.db'}")
    return make_app(
        url,
        RATELIMIT_STORAGE_URI=uri,
        RATELIMIT_STORAGE_TIMEOUT_MS=200,
        RATELIMIT_READS="1000 per minute",
        HEALTHZ_TIMEOUT_MS=500,
    )


def fallback_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "falling back to in-memory" in r.getMessage()]


def test_a_frozen_redis_is_a_refused_one(
    own_redis: tuple[str, Any], tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    uri, process = own_redis
    app = redis_app(tmp_path, uri)
    client = app.test_client()
    caplog.set_level(logging.INFO)
    assert client.get("/api/orders").status_code == 200
    assert client.get("/healthz").status_code == 200
    store = redis.Redis.from_url(uri, socket_timeout=2)
    assert list(store.scan_iter("*orders*")), "the counters are not in Redis"
    with frozen([process]):
        answers = [bounded_get(client, "/api/orders") for _ in range(20)]
        statuses = [response.status_code for response, _ in answers]
        slowest = max(elapsed for _, elapsed in answers)
        print(f"\nfrozen redis: {statuses.count(200)} of 20 answered 200, slowest {slowest:.2f} s")
        assert statuses == [200] * 20
        time.sleep(READY_FOR_S)  # past the readiness answer given before the freeze
        health, elapsed = bounded_get(client, "/healthz")
        print(f"frozen redis /healthz: {health.status_code} after {elapsed:.2f} s")
        # Still ready: reads go on, limits counted in memory (orders/views/health.py).
        assert health.status_code == 200, health.json
        assert health.json == {"status": "degraded", "degraded": ["rate_limit_storage"]}
        assert len(fallback_lines(caplog)) == 1, "the switch to memory is logged once"
    # Thawed: the app asks Redis again after 1, 2, 4 ... s and goes back to it (orders/web/limits.py).
    store.flushall()
    deadline = time.monotonic() + SAFETY
    while not list(store.scan_iter("*orders*")):
        assert time.monotonic() < deadline, "the limits never went back to Redis"
        assert client.get("/api/orders").status_code == 200
        time.sleep(0.25)
    assert client.get("/healthz").status_code == 200
    assert len(fallback_lines(caplog)) == 1
    store.close()
    app.extensions["engine"].dispose()


def test_a_frozen_redis_still_limits_in_memory(own_redis: tuple[str, Any], tmp_path: Any) -> None:
    uri, process = own_redis
    app = redis_app(tmp_path, uri)
    app.config["RATELIMIT_READS"] = "5 per minute"
    client = app.test_client()
    with frozen([process]):
        statuses = [bounded_get(client, "/api/orders")[0].status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2
    app.extensions["engine"].dispose()


# --- A frozen PostgreSQL with more clients than app slots, through the production recipe -------


def _haproxy_times(log: Path) -> list[tuple[str, int, int]]:
    """(status, ms waiting in haproxy's queue, ms the app took) of each /api/orders the front
    passed to gunicorn (httplog's Tw and Tr)."""
    found = []
    for line in whole_lines(log):
        if '"GET /api/orders' in line and " app/app1 " in line:
            timers, status = line.split(" app/app1 ", 1)[1].split()[:2]
            _, queued, _, answered, _ = timers.split("/")
            found.append((status, int(queued), int(answered)))
    return found


def test_a_frozen_database_with_more_clients_than_slots_answers_every_one_in_json_within_the_bound(
    cluster: Server, tmp_path: Path
) -> None:
    """8 x the app's slots ask for the list at once while the database is frozen: every answer
    is the JSON 503 with Retry-After (the app's, or the front's own after `timeout queue`), and
    the app answers each within the documented bound: pool wait + read timeout + connect timeout."""
    slots = 4
    bound_ms = (BOUNDS["DATABASE_READ_TIMEOUT_MS"] + 1000 * BOUNDS["DATABASE_CONNECT_TIMEOUT_S"]
                + 1000 * POOL_TIMEOUT_S)  # fmt: skip
    env = {**{k: str(v) for k, v in BOUNDS.items()}, "DATABASE_POOL_TIMEOUT_S": str(POOL_TIMEOUT_S)}
    with (
        recipe.own_redis() as (redis_url, _),
        recipe.production(tmp_path, cluster.url, redis_url, workers=1, threads=slots, env=env) as stack,
    ):
        assert requests.get(f"{stack.front}/api/orders", timeout=SAFETY).status_code == 200
        answers: list[tuple[int, str, str, float]] = []
        lock = threading.Lock()

        def ask() -> None:
            started = time.monotonic()
            response = requests.get(f"{stack.front}/api/orders", timeout=SAFETY)
            try:
                code = response.json()["error"]["code"]
            except ValueError:  # not JSON: haproxy's own HTML page
                code = response.headers.get("Content-Type", "")
            with lock:
                answers.append((response.status_code, code, response.headers.get("Retry-After", ""),
                                time.monotonic() - started))  # fmt: skip

        with frozen(postgres_processes(cluster)):
            clients = [threading.Thread(target=ask) for _ in range(8 * slots)]
            for client in clients:
                client.start()
            for client in clients:
                client.join(SAFETY)
        time.sleep(1)
        passed = _haproxy_times(stack.front_log)[1:]  # the first: the 200 before the freeze
    slowest_app = max((answered for _, _, answered in passed), default=0)
    print(
        f"\n{len(answers)} clients, {slots} slots: statuses {sorted(a[0] for a in answers)}; longest wait "
        f"{max(a[3] for a in answers):.1f} s; the app answered {len(passed)} (slowest {slowest_app} ms, "
        f"bound {bound_ms} ms), the front {len(answers) - len(passed)} itself"
    )
    assert len(answers) == 8 * slots
    for status, code, retry_after, _ in answers:
        assert (status, code) == (503, "unavailable") and int(retry_after) > 0, answers
    assert passed and all(answered <= bound_ms for _, _, answered in passed), passed
