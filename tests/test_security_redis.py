"""Rate limits shared by several app servers through the real Redis (RATELIMIT_STORAGE_URI).

Two app instances (as two gunicorn servers would be) on one database and one Redis: what a
client spends on one is spent on the other. In memory, each counts alone. Redis comes from
TEST_REDIS_URL, default redis://127.0.0.1:6379; without it the test skips loudly, and fails
under CI=true.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis
from flask import Flask

from orders.app import create_app

from .databases import unavailable
from .fixtures import API_TOKEN, AUTH, SECRET, migrated

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
