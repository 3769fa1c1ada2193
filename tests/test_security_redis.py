"""Rate limits shared by several app servers through the real Redis (RATELIMIT_STORAGE_URI).

Two app instances (as two gunicorn servers would be) on one database and one Redis: what a
client spends on one is spent on the other. In memory, each counts alone. Redis comes from
TEST_REDIS_URL, default redis://127.0.0.1:6379; without it the test skips loudly, and fails
under CI=true.
"""

from __future__ import annotations

import contextlib
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
from orders.web.limits import FALLBACK_MESSAGE, RECOVERED_MESSAGE

from .databases import throwaway_database, unavailable
from .fixtures import API_TOKEN, AUTH, SECRET, migrated
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
def servers(redis_url: str, tmp_path) -> Iterator:  # type: ignore[type-arg]
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


def test_two_servers_share_one_limit_through_redis(servers, redis_url: str) -> None:  # type: ignore[no-untyped-def]
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


def test_in_memory_each_server_counts_alone(servers) -> None:  # type: ignore[no-untyped-def]
    one, two = (app.test_client() for app in servers("memory://"))
    assert [one.get("/api/orders").status_code for _ in range(6)] == [200] * 5 + [429]
    assert [two.get("/api/orders").status_code for _ in range(5)] == [200] * 5


# --- A Redis that hangs or refuses under concurrent readers, in the production recipe ---------

READERS = 8  # as many as the app's threads: several are inside a Redis call when it stops
FALLBACK = "falling back to in-memory storage"
RECOVERED = "Rate limit storage recovered"


class _SlowHandler(logging.Handler):
    """Writes as slowly as a busy error log: the moment Flask-Limiter's own check-then-set let
    other threads log the same switch."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        time.sleep(0.05)
        self.lines.append(record.getMessage())


def test_threads_that_fail_together_log_one_switch(servers) -> None:  # type: ignore[no-untyped-def]
    """Eight threads whose Redis calls failed at once each tell the limiter's logger so, as
    Flask-Limiter does; one line per switch comes out, and a switch after a recovery is logged
    again."""
    app, _ = servers("redis://127.0.0.1:1/0")
    logger = app.extensions["rate_limiter"].logger
    handler = _SlowHandler()
    logger.logger.addHandler(handler)
    level = logger.logger.level
    logger.logger.setLevel(logging.INFO)
    try:
        for _ in range(2):
            threads = [threading.Thread(target=logger.warning, args=(FALLBACK_MESSAGE,)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            logger.info(RECOVERED_MESSAGE)
    finally:
        logger.logger.removeHandler(handler)
        logger.logger.setLevel(level)
    assert handler.lines == [FALLBACK_MESSAGE, RECOVERED_MESSAGE] * 2, handler.lines


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


def _lines(log: Path, text: str) -> dict[str, int]:
    """How many lines of gunicorn's error log say `text`, per worker process id: the app's JSON
    lines (LOG_FORMAT=json, the default) name it in "pid", gunicorn's own text lines in brackets."""
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        if text in line:
            if line.startswith("{"):
                pid = str(json.loads(line)["pid"])
            else:
                pid = line.split("] [", 1)[1].split("]", 1)[0]
            counts[pid] = counts.get(pid, 0) + 1
    return counts


def test_a_frozen_or_killed_redis_is_never_a_500_and_is_logged_once_per_process(
    tmp_path: Path,
) -> None:
    """2 workers x 4 threads behind the front, 8 readers at once: SIGSTOP on the Redis of the
    rate limits (a Redis of the test's own), SIGCONT, then SIGKILL. Every request is answered
    200; gunicorn's error log says the switch to memory once per process and switch, and the
    return to Redis."""
    workers = 2
    with (
        throwaway_database("postgresql", tmp_path, "redis") as url,
        own_redis() as (redis_url, process),
    ):
        engine = make_engine(url)
        migrate(engine)
        engine.dispose()
        env = {"RATELIMIT_STORAGE_TIMEOUT_MS": "200"}
        with production(tmp_path, url, redis_url, workers=workers, threads=4, env=env) as stack:
            log = stack.gunicorn_log
            with readers(stack.front) as statuses:
                time.sleep(1)
                with frozen([process]):  # type: ignore[list-item]
                    time.sleep(3)
                frozen_answers = len(statuses)
                time.sleep(5)  # Flask-Limiter asks Redis again after 1, 2, 4 s
                fallbacks, recovered = _lines(log, FALLBACK), _lines(log, RECOVERED)
                process.kill()  # type: ignore[attr-defined]
                time.sleep(3)
            killed = _lines(log, FALLBACK)
    print(
        f"\n{len(statuses)} answers by {READERS} readers ({frozen_answers} by the thaw): "
        f"{ {s: statuses.count(s) for s in set(statuses)} }; fallback lines per worker {fallbacks}, "
        f"recovered {recovered}, after the kill {killed}"
    )
    assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    # Once per process and switch: a worker that came back to Redis and lost it again (the burst of
    # answers a thawed Redis sends at once can time out) switched twice, and says so twice.
    assert fallbacks and all(n <= recovered.get(pid, 0) + 1 for pid, n in fallbacks.items()), (
        fallbacks,
        recovered,
    )
    assert len(fallbacks) <= workers and recovered, (fallbacks, recovered)
    assert all(killed.get(pid, 0) - fallbacks.get(pid, 0) <= 1 for pid in killed), killed
    assert sum(killed.values()) > sum(fallbacks.values()), "the kill was not logged"
