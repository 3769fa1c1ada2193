"""Rate limits shared by several app servers through the real Redis (RATELIMIT_STORAGE_URI).

Two app instances (as two gunicorn servers would be) on one database and one Redis: what a
client spends on one is spent on the other. In memory, each counts alone. Redis comes from
TEST_REDIS_URL, default redis://127.0.0.1:6379; without it the test skips loudly, and fails
under CI=true.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests
from flask import Flask

from devtools.throwaway import frozen
from orders.app import create_app
from orders.data.db import make_engine, migrate

from .databases import throwaway_database, unavailable
from .fixtures import API_TOKEN, AUTH, SECRET, migrated
from .logs import whole_lines
from .recipe import own_redis, production

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")
ORDER = {"customer": "Ana", "amount": "1.00"}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as err:
        unavailable("Redis", f"{REDIS_URL}: {err}")
    client.close()
    yield REDIS_URL


@pytest.fixture
def servers(redis_url: str, tmp_path) -> Iterator:
    """make(storage) -> two apps sharing one database and, for Redis, one key prefix."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    migrated(url)
    prefix = f"orders-test-{uuid.uuid4().hex[:12]}"  # this run's counters only
    made: list[Flask] = []

    def make(storage: str) -> tuple[Flask, Flask]:
        config = {
            "TESTING": True,
            "DATABASE_URL": url,
            "SECRET_KEY": SECRET,
            "API_TOKENS": API_TOKEN,
            "RATELIMIT_STORAGE_URI": storage,
            "RATELIMIT_KEY_PREFIX": prefix,
            "RATELIMIT_READS": "5 per minute",
            "RATELIMIT_WRITES": "2 per minute",
        }
        pair = (create_app(config), create_app(config))
        made.extend(pair)
        return pair

    yield make
    for app in made:
        app.extensions["engine"].dispose()
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"*{prefix}*"):
        client.delete(key)
    client.close()


def test_two_servers_share_one_limit_through_redis(servers, redis_url: str) -> None:
    one, two = (app.test_client() for app in servers(redis_url))
    assert [one.get("/api/orders").status_code for _ in range(3)] == [200] * 3
    assert [two.get("/orders").status_code for _ in range(3)] == [200, 200, 429]
    assert one.get("/api/orders").status_code == 429
    limited = two.get("/api/orders")
    assert limited.json["error"]["code"] == "rate_limited" and int(limited.headers["Retry-After"]) >= 1
    # Writes have their own shared budget.
    assert one.post("/api/orders", json=ORDER, headers=AUTH).status_code == 201
    assert two.post("/api/orders", json=ORDER, headers=AUTH).status_code == 201
    assert one.post("/api/orders", json=ORDER, headers=AUTH).status_code == 429
    # Another client has a budget of its own on both servers.
    other = {"REMOTE_ADDR": "127.0.0.9"}
    assert two.get("/api/orders", environ_base=other).status_code == 200
    # The counters really are in Redis.
    keys = list(redis.Redis.from_url(redis_url).scan_iter("*orders-test-*"))
    assert keys


def test_in_memory_each_server_counts_alone(servers) -> None:
    one, two = (app.test_client() for app in servers("memory://"))
    assert [one.get("/api/orders").status_code for _ in range(6)] == [200] * 5 + [429]
    assert [two.get("/api/orders").status_code for _ in range(5)] == [200] * 5


# --- A Redis that hangs or refuses under concurrent readers, in the production recipe ---------

READERS = 12  # more than the app's threads: several are inside a Redis call when it stops
WORKERS = 4
SWITCH_LOGGER = "orders.limits"  # the app's one line per switch (orders/web/limits.py)
REDIS_PASSWORD = "S3cret-redis-pass"
BOUND = 45.0  # seconds: the longest any wait below waits for the log to say something


def test_threads_that_switch_together_log_one_line(servers, caplog: pytest.LogCaptureFixture) -> None:
    """Threads notice a lost or recovered Redis together: eight switching at once, twice each way,
    make two lines each way, in order, naming the storage without its password (Flask-Limiter,
    which the app used before, flipped its flag behind a check-then-set that threads passed
    together: one switch was logged up to three times)."""
    app, _ = servers("redis://:hunter2@127.0.0.1:1/0")
    limiter = app.extensions["rate_limiter"]
    caplog.set_level(logging.INFO)
    for dead in (True, False, True, False):
        barrier = threading.Barrier(8)

        def flip(value: bool = dead, barrier: threading.Barrier = barrier) -> None:
            barrier.wait(10)
            limiter.switch(value)

        threads = [threading.Thread(target=flip) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    lines = [r for r in caplog.records if r.name == SWITCH_LOGGER]
    told = [r.getMessage() for r in lines]
    assert [r.fields["rate_limits"] for r in lines] == ["memory", "shared"] * 2, told
    assert all("hunter2" not in line and "redis://:***@127.0.0.1:1/0" in line for line in told), told


def _read_until(base: str, stop: threading.Event, statuses: list[int]) -> None:
    while not stop.is_set():
        try:
            statuses.append(requests.get(f"{base}/api/orders?limit=5", timeout=20).status_code)
        except requests.RequestException:
            statuses.append(-1)


@contextlib.contextmanager
def readers(base: str) -> Iterator[list[int]]:
    statuses: list[int] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_read_until, args=(base, stop, statuses)) for _ in range(READERS)]
    for thread in threads:
        thread.start()
    try:
        yield statuses
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)


def switches(log: Path) -> dict[int, list[str]]:
    """Per worker process id, the rate limits' switches gunicorn's error log tells, in order:
    "memory" (Redis lost) or "shared" (Redis back), from the app's JSON lines."""
    found: dict[int, list[str]] = {}
    for line in whole_lines(log):
        if line.startswith("{"):
            record = json.loads(line)
            if record["logger"] == SWITCH_LOGGER:
                found.setdefault(record["pid"], []).append(record["rate_limits"])
    return found


def wait_until_every_worker(log: Path, state: str, told: int, what: str) -> None:
    """Until every worker's last switch is `state`, having told at least `told` switches (bounded)."""
    deadline = time.monotonic() + BOUND
    while True:
        seen = switches(log)
        if len(seen) == WORKERS and all(len(s) >= told and s[-1] == state for s in seen.values()):
            return
        assert time.monotonic() < deadline, f"{what}: within {BOUND} s the log told {seen}"
        time.sleep(0.2)


def test_a_frozen_or_killed_redis_is_never_a_500_and_each_switch_is_one_line_per_process(
    tmp_path: Path,
) -> None:
    """4 workers x 4 threads behind the front, 12 readers at once, a Redis of the test's own with
    a password: SIGSTOP on it, SIGCONT, then SIGKILL. Every request is answered 200, and each
    worker's lines in gunicorn's error log alternate: one "falling back" line when it loses
    Redis, one "recovered" when Redis answers again, never two in a row (Flask-Limiter's own
    check-then-set wrote one switch up to three times), never the password."""
    with (
        throwaway_database("postgresql", tmp_path, "redis") as url,
        own_redis() as (plain_url, process),
    ):
        redis.Redis.from_url(plain_url).config_set("requirepass", REDIS_PASSWORD)
        redis_url = plain_url.replace("redis://", f"redis://:{REDIS_PASSWORD}@")
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        env = {"RATELIMIT_STORAGE_TIMEOUT_MS": "200"}
        with production(tmp_path, url, redis_url, workers=WORKERS, threads=4, env=env) as stack:
            log = stack.gunicorn_log
            with readers(stack.front) as statuses:
                with frozen([process]):
                    wait_until_every_worker(log, "memory", 1, "Redis frozen")
                wait_until_every_worker(log, "shared", 2, "Redis thawed")
                thawed = switches(log)
                process.kill()
                wait_until_every_worker(log, "memory", 3, "Redis killed")
            told = switches(log)
            text = "\n".join(whole_lines(log))
    counts = {s: statuses.count(s) for s in set(statuses)}
    print(
        f"\n{len(statuses)} answers by {READERS} readers: {counts}; "
        f"switches per worker after the thaw {thawed}, after the kill {told}"
    )
    assert statuses and set(statuses) == {200}, counts
    for pid, states in told.items():
        # One line per switch: memory and shared alternate, starting and ending with memory.
        assert states[0] == states[-1] == "memory", (pid, states)
        assert all(a != b for a, b in itertools.pairwise(states)), (pid, states)
    assert REDIS_PASSWORD not in text
    assert f"redis://:***@{plain_url.removeprefix('redis://')}" in text
