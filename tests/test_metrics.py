"""/metrics: every family the operator's alerts read, correct when gunicorn's workers share it.

Under load, on each engine: gunicorn with three workers (prometheus-client's multiprocess mode,
gunicorn.conf.py) serves pages, fragments, the API, exports and writes while /metrics is read
again and again; then what /metrics says is compared with what the clients counted themselves:
requests by kind and result, rows exported, 429s. The requests' log lines show more than one
worker answered, so the totals are sums over workers, not one worker's view.

In one process (the same code, the default registry): a pool with every connection held shows a
waiting thread and counts the timeout; a statement cancelled by its timeout is counted. Replica
routing (orders_replica_reads_total) needs standbys: tests/test_prometheus_cluster.py reads it
from every app server's /metrics under load on `make cluster`'s recipe, and from its Prometheus.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
import requests
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url

from devtools.gunicorn import gunicorn
from orders.web import metrics

from .databases import unavailable
from .fixtures import API_TOKEN, clear, make_app
from .helpers import seed
from .logs import whole_lines

REDIS_URL = "redis://127.0.0.1:6379"
FAMILIES = {
    "orders_http_request_duration_seconds",
    "orders_page_duration_seconds",
    "orders_export_rows",
    "orders_rate_limited",
    "orders_ratelimit_fallback",
    "orders_db_pool_in_use",
    "orders_db_pool_waiting",
    "orders_db_pool_timeouts",
    "orders_statement_timeouts",
}
ROWS = 90


def samples(body: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a /metrics answer, parsed by prometheus-client's own parser."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def total(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= ls)


@pytest.fixture(scope="module")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as err:
        unavailable("Redis", f"{REDIS_URL}: {err}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def served(db_url: str, engine: Engine, redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    clear(engine)
    seed(engine, ROWS)
    env = {
        "RATELIMIT_STORAGE_URI": redis_url,
        "RATELIMIT_KEY_PREFIX": f"orders-metrics-{uuid.uuid4().hex[:12]}",
        # Enough for the load below, not for the burst after it: the 429s are counted too.
        "RATELIMIT_READS": "160 per minute",
        "API_TOKENS": API_TOKEN,
        "METRICS_DIR": str(tmp_path / "metrics"),
        "LOG_FORMAT": "json",
    }
    log = tmp_path / "gunicorn.log"
    with gunicorn(db_url, log_path=log, workers=3, threads=4, env=env) as (base, _master):
        yield base, log


def test_every_family_is_the_sum_over_workers_under_load(served: tuple[str, Path]) -> None:
    base, log = served
    seen: Counter[tuple[str, str]] = Counter()
    exported = 0
    lock = threading.Lock()
    stop = threading.Event()
    scrapes: list[str] = []

    def get(kind: str, path: str, **headers: str) -> requests.Response:
        response = requests.get(base + path, headers=headers, timeout=30)
        result = "503" if response.status_code == 503 else f"{response.status_code // 100}xx"
        with lock:
            seen[kind, result] += 1
        return response

    def reader(i: int) -> None:
        nonlocal exported
        sort = ("newest", "amount")[i % 2]
        first = get("api", f"/api/orders?limit=10&sort={sort}").json()
        get("api", f"/api/orders?limit=10&sort={sort}&after={first['next_cursor']}")
        get("page", f"/orders?sort={sort}")
        get("fragment", f"/orders?sort={sort}&after={first['next_cursor']}", **{"HX-Request": "true"})
        csv = get("export", "/orders/export.csv")
        with lock:
            exported += len(csv.text.splitlines()) - 1  # the header

    def writer(i: int) -> None:
        written = requests.post(
            base + "/api/orders",
            json={"customer": f"Load {i}", "amount": "1.00"},
            headers={"Authorization": f"Bearer {API_TOKEN}"},
            timeout=30,
        )
        with lock:
            seen["write", f"{written.status_code // 100}xx"] += 1

    def scraper() -> None:
        while not stop.is_set():
            scraped = requests.get(base + "/metrics", timeout=30)
            scrapes.append(
                scraped.text if scraped.status_code == 200 else f"{scraped.status_code}: {scraped.text[:500]}"
            )
            time.sleep(0.05)

    watcher = threading.Thread(target=scraper)
    watcher.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            # Writes first: an export's count is its batches' planned rows (orders/exports/
            # stream.py Chunk.rows), which a row inserted into a batch's range meanwhile is not.
            list(pool.map(writer, range(24)))
            list(pool.map(reader, range(24)))  # 24 x 5 reads = 120, within the 160 allowed
            # Then a burst past the read budget: some of it is refused 429.
            list(pool.map(lambda _: get("api", "/api/orders?limit=1"), range(80)))
    finally:
        stop.set()
        watcher.join()
    assert len(scrapes) > 3, "/metrics was read under load"
    assert all("orders_http_request_duration_seconds_bucket" in body for body in scrapes), [
        body[:800] for body in scrapes if "orders_http_request_duration_seconds_bucket" not in body
    ]

    found = samples(requests.get(base + "/metrics", timeout=30).text)
    names = {name for name, _ in found}
    missing = {f for f in FAMILIES if not any(n.startswith(f) for n in names)}
    assert not missing, f"families missing from /metrics: {missing}"
    for (kind, result), count in seen.items():
        counted = total(found, "orders_http_request_duration_seconds_count", kind=kind, result=result)
        assert counted == count, f"{kind} {result}: /metrics says {counted}, the clients saw {count}"
    assert seen["api", "4xx"] > 0, "the burst was refused in part (429)"
    assert total(found, "orders_rate_limited_total", scope="reads") == seen["api", "4xx"]
    assert total(found, "orders_export_rows_total") == exported > 0
    assert total(found, "orders_page_duration_seconds_count", depth="first", sort="amount") > 0
    assert total(found, "orders_page_duration_seconds_count", depth="deep", sort="newest") > 0
    # At rest every worker gave its connections back, and Redis answered throughout.
    assert total(found, "orders_db_pool_in_use", engine="primary") == 0
    assert total(found, "orders_db_pool_waiting", engine="primary") == 0
    assert total(found, "orders_ratelimit_fallback") == 0

    # One JSON line per request, from more than one worker: /metrics above added them up.
    lines = [json.loads(line) for line in whole_lines(log) if line.startswith("{")]
    requests_logged = [line for line in lines if line["logger"] == "orders.request"]
    assert len({line["pid"] for line in requests_logged}) > 1, "one worker served everything"
    assert all(line["request_id"] and "duration_ms" in line for line in requests_logged)


@pytest.fixture
def server_engine(db_url: str) -> str:
    if make_url(db_url).get_backend_name() == "sqlite":
        pytest.skip("SQLite has no pool timeout or statement timeout to count (one file, no server)")
    return db_url


def test_a_full_pool_shows_a_waiting_thread_and_counts_its_timeout(server_engine: str) -> None:
    # The request waits for the pool this long: the gauge is read while it does (polled: on a loaded
    # machine the request may take a while to reach its checkout; a fixed 0.5 s sleep against a
    # 1 s wait left too little room either side).
    app = make_app(server_engine, DATABASE_POOL_TIMEOUT_S=5)
    engine = app.extensions["engine"]
    waiting = ("orders_db_pool_waiting", {"engine": "primary"})
    timeouts = ("orders_db_pool_timeouts_total", {"engine": "primary"})
    before = REGISTRY.get_sample_value(*timeouts) or 0
    held = [engine.connect() for _ in range(engine.pool.size() + engine.pool._max_overflow)]
    try:
        assert REGISTRY.get_sample_value("orders_db_pool_in_use", {"engine": "primary"}) == len(held)
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(app.test_client().get, "/api/orders")
            deadline = time.monotonic() + 4
            while REGISTRY.get_sample_value(*waiting) != 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert REGISTRY.get_sample_value(*waiting) == 1
            assert answer.result(timeout=10).status_code == 503
    finally:
        for conn in held:
            conn.close()
        engine.dispose()
    assert REGISTRY.get_sample_value(*waiting) == 0
    assert REGISTRY.get_sample_value(*timeouts) == before + 1


def test_a_statement_cancelled_by_its_timeout_is_counted(server_engine: str) -> None:
    app = make_app(server_engine, STATEMENT_TIMEOUT_MS=50)
    engine = app.extensions["engine"]
    sample = ("orders_statement_timeouts_total", {"engine": "primary"})
    before = REGISTRY.get_sample_value(*sample) or 0
    slow = (
        "SELECT pg_sleep(2)"
        if engine.dialect.name == "postgresql"
        # MariaDB's SLEEP() is interrupted quietly; a long computation is cancelled with 1969.
        else (
            "SELECT COUNT(*) FROM information_schema.columns a, information_schema.columns b, "
            "information_schema.columns c"
        )
    )
    try:
        with engine.connect() as conn, pytest.raises(Exception, match=r"cancel|interrupted|timeout"):
            conn.execute(text(slow))
    finally:
        engine.dispose()
    assert REGISTRY.get_sample_value(*sample) == before + 1


def test_metrics_off_serves_and_counts_nothing(db_url: str) -> None:
    app = make_app(db_url, METRICS="off")
    client = app.test_client()
    try:
        assert client.get("/metrics").status_code == 404
        assert client.get("/api/orders").status_code == 200
    finally:
        app.extensions["engine"].dispose()


def test_a_workers_empty_file_is_no_500(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker creates each of its metrics files and sizes it a moment later (prometheus-client's
    MmapedDict, its issue #1199): a scrape in between failed whole, /metrics answered 500 under the
    load test above in a full run. With one worker's file written and another's still empty (or
    left so by a worker killed in that moment), the scrape serves the written values."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    written = MmapedDict(str(tmp_path / "counter_1001.db"))
    name = "orders_export_rows_total"
    written.write_value(mmap_key(name, name, [], [], "Rows written into CSV exports"), 7.0, 0.0)
    written.close()
    (tmp_path / "histogram_1002.db").touch()  # created, not sized yet
    found = samples(generate_latest(metrics.registry()).decode())
    assert total(found, name) == 7.0
