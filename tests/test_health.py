"""Health as load balancers and orchestrators read it (orders/views/health.py), with the real
dependencies taken away: a PostgreSQL cluster and a Redis of the test's own.

- Redis killed: every read still answers 200 (limits counted in memory), so /healthz (readiness)
  is 200 "degraded", not 503: a balancer polling it would have taken every app server out of
  rotation during an outage users never notice (issue 58; on the old check this test fails).
- PostgreSQL frozen too: /healthz is 503 `unavailable` naming the database within its bound;
  /healthz/live still 200 and asks nothing.
- Cheap: within READY_FOR_S every readiness answer after the first is the cached one (one database
  connection for many probes); liveness opens none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from devtools.pgserver import Server, ServerUnavailable, debian_bindir
from devtools.throwaway import frozen, postgres_processes
from orders.data.db import make_engine, migrate
from orders.views.health import READER_SETTINGS, READY_FOR_S

from .databases import unavailable
from .fixtures import make_app
from .recipe import own_redis
from .test_hangs import BOUNDS, SAFETY, assert_unavailable, bounded_get


@pytest.fixture(scope="module")
def cluster() -> Iterator[Server]:
    bindir = debian_bindir()
    if bindir is None:
        unavailable("PostgreSQL server binaries", "no /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    try:
        server = Server.started(bindir, prefix="health-pg-")
    except ServerUnavailable as err:
        unavailable("a throwaway PostgreSQL cluster", str(err))
    with server:
        engine = make_engine(server.url)
        migrate(engine)
        engine.dispose()
        yield server


def _connects(app: Any) -> list[int]:
    """A list that grows by one at each new connection of /healthz's engine."""
    made: list[int] = []
    event.listen(app.extensions["health_engine"], "connect", lambda *_: made.append(1))
    return made


def test_readiness_is_degraded_without_redis_and_down_without_the_database(cluster: Server) -> None:
    with own_redis() as (redis_url, redis_process):
        app = make_app(
            cluster.url, RATELIMIT_STORAGE_URI=redis_url, RATELIMIT_STORAGE_TIMEOUT_MS=200, **BOUNDS
        )
        client = app.test_client()
        assert client.get("/healthz").json == {"status": "ok"}
        assert client.get("/healthz/live").json == {"status": "ok"}
        redis_process.kill()
        redis_process.wait(10)
        time.sleep(READY_FOR_S)
        assert client.get("/api/orders").status_code == 200  # reads go on, counted in memory
        health = client.get("/healthz")
        assert health.status_code == 200, health.get_data()[:300]
        assert health.json == {"status": "degraded", "degraded": ["rate_limit_storage"]}
        with frozen(postgres_processes(cluster)):
            time.sleep(READY_FOR_S)
            live, live_s = bounded_get(client, "/healthz/live")
            assert live.status_code == 200 and live.json == {"status": "ok"}
            ready, ready_s = bounded_get(client, "/healthz")
            assert_unavailable(ready)
            assert "database" in ready.json["error"]["message"]
            print(f"\nfrozen database: /healthz/live {live_s * 1000:.1f} ms, /healthz 503 in {ready_s:.2f} s")
        deadline = time.monotonic() + SAFETY
        while client.get("/healthz").status_code != 200:
            assert time.monotonic() < deadline, "readiness never came back after SIGCONT"
            time.sleep(0.2)
        app.extensions["engine"].dispose()


def test_readiness_reads_a_redis_on_a_unix_socket_as_the_limits_do() -> None:
    """RATELIMIT_STORAGE_URI=redis+unix:///path (the limits library's name, which the settings
    take): the limits counted there while every /healthz was a 500 (redis-py calls it unix://)."""
    with own_redis(unix_socket=True) as (redis_uri, redis_process):
        app = make_app("sqlite://", RATELIMIT_STORAGE_URI=redis_uri, RATELIMIT_STORAGE_TIMEOUT_MS=200)
        client = app.test_client()
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json == {"status": "ok"}, health.get_data()[:300]
        redis_process.kill()
        redis_process.wait(10)
        time.sleep(READY_FOR_S)
        health = client.get("/healthz")
        assert health.json == {"status": "degraded", "degraded": ["rate_limit_storage"]}, health.get_data()[
            :300
        ]
        app.extensions["engine"].dispose()


def test_readiness_is_checked_once_a_second_and_liveness_asks_nothing(cluster: Server) -> None:
    app = make_app(cluster.url, **BOUNDS)
    client = app.test_client()
    made = _connects(app)
    for _ in range(50):
        assert client.get("/healthz/live").status_code == 200
    assert made == [], "liveness opened a database connection"
    started = time.monotonic()
    answers = [client.get("/healthz").status_code for _ in range(50)]
    within = time.monotonic() - started
    assert answers == [200] * 50
    # Every answer within one READY_FOR_S came from one check: at most one connection per second.
    assert len(made) <= 1 + int(within / READY_FOR_S), (len(made), within)
    time.sleep(READY_FOR_S)
    assert client.get("/healthz").status_code == 200
    assert len(made) >= 2, "an answer older than READY_FOR_S was given again"
    app.extensions["engine"].dispose()


def test_settings_answer_what_a_tester_reads_and_nothing_else() -> None:
    """/healthz/settings: the reader settings a browser test aimed at a deployment reads
    (tests/live.py given), as the app runs them; no secret, no address of a server behind."""
    app = make_app("sqlite://", AUTO_PAGES=7, STREAMS_PER_PROCESS=3)
    body = app.test_client().get("/healthz/settings").get_json()
    assert body == {name: app.config[name] for name in READER_SETTINGS}
    assert body["AUTO_PAGES"] == 7 and body["STREAMS_PER_PROCESS"] == 3
    assert not {"SECRET_KEY", "DATABASE_URL", "API_TOKENS", "REDIS_URL"} & set(body)
