"""The primary is down and no replica has replayed as far as the reader's cursor: the page is a
503 `unavailable` with Retry-After (the documented answer, once a 500 through a mistyped
ApiError), within the router's short wait, and the same cursor opens once a replica catches up.

Two Patroni nodes of our own (devtools.patroni.databases): the standby's replay is paused (which
puts Patroni in maintenance mode, so no failover) so that it stays behind the position the cursor
was read at; then the leader's PostgreSQL is killed.

A replica that hangs instead (SIGSTOP on the standby's PostgreSQL, by its ids) while the app holds
a pooled connection to it: the client's read timeout ends the read there, the node is marked down
and the page is read on the primary, within the timeout and a margin; after SIGCONT it serves again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from devtools.patroni import Databases
from devtools.throwaway import frozen, postgres_processes
from orders.data.replicas.router import PRIMARY_DOWN_WAIT_SECONDS, REFRESH_SECONDS
from orders.web.read_routing import HEADER

from .cluster_support import PATRONI_LANE_A, clear_orders, module_databases
from .fixtures import make_app
from .helpers import seed

pytestmark = PATRONI_LANE_A


@pytest.fixture(scope="module")
def cluster() -> Iterator[Databases]:
    with module_databases(nodes=2, synchronous=False) as running:
        yield running


@pytest.fixture
def dbs(cluster: Databases) -> Databases:
    """The cluster as every test starts: a leader (whichever node: a test may kill one), the other
    node streaming from it, no replay paused, no orders."""
    cluster.wait_healthy()
    clear_orders(cluster)
    return cluster


def test_a_cursor_no_replica_reached_is_503_while_the_primary_is_down(dbs: Databases) -> None:
    app = make_app(dbs.primary_url, DATABASE_REPLICA_URLS=dbs.replica_urls, REPLICA_MAX_LAG_MS=600_000)
    client = app.test_client()
    seed(app.extensions["engine"], 50)
    dbs.wait_for_standbys()
    standby = dbs.standbys[0]
    standby.pause_replay()
    try:
        seed(app.extensions["engine"], 50)  # on the primary only: the standby does not replay them
        # Read after the primary's position: the page is read on the primary, its cursor stamped there.
        first = client.get("/api/orders?limit=10", headers={HEADER: dbs.primary_lsn()})
        assert first.status_code == 200
        cursor = first.get_json()["next_cursor"]
        leader = dbs.primary
        # In maintenance mode Patroni neither restarts it nor fails over; down means every backend gone.
        leader.kill_postmaster(wait_for_backends=True)
        started = time.monotonic()
        answer = client.get(f"/api/orders?limit=10&after={cursor}")
        waited = time.monotonic() - started
        assert answer.status_code == 503, answer.get_data(as_text=True)
        assert answer.get_json()["error"]["code"] == "unavailable"
        assert int(answer.headers["Retry-After"]) >= 1
        assert waited < PRIMARY_DOWN_WAIT_SECONDS + 10, waited
        standby.resume_replay()  # and maintenance off: Patroni brings a primary back
        deadline = time.monotonic() + 60
        while True:  # the same cursor, once the standby has replayed what the primary had sent
            again = client.get(f"/api/orders?limit=10&after={cursor}")
            if again.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert again.status_code == 200, again.get_data(as_text=True)
        assert len(again.get_json()["items"]) == 10
    finally:
        standby.resume_replay()
        app.extensions["router"].dispose()
        app.extensions["engine"].dispose()


READ_TIMEOUT_MS = 3000
SAFETY = 60  # far beyond the read timeout and a connect timeout: only a wait without limit crosses it


def test_a_frozen_replica_ends_the_read_within_the_read_timeout(dbs: Databases) -> None:
    app = make_app(
        dbs.primary_url,
        DATABASE_REPLICA_URLS=dbs.replica_urls,
        REPLICA_MAX_LAG_MS=600_000,
        STATEMENT_TIMEOUT_MS=1000,
        DATABASE_READ_TIMEOUT_MS=READ_TIMEOUT_MS,
    )
    client = app.test_client()
    seed(app.extensions["engine"], 50)
    dbs.wait_for_standbys()
    standby = next(node for node in dbs.standbys)
    name = dbs.router_name(standby)
    router = app.extensions["router"]
    reads = ThreadPoolExecutor(1)
    try:
        deadline = time.monotonic() + 30
        while name not in client.get("/api/orders?limit=10").headers.get("Server-Timing", ""):
            assert time.monotonic() < deadline, "no read went to the standby"
        with frozen(postgres_processes(standby)):
            # Past REFRESH_SECONDS: the read's routing probes every node in rotation, the frozen
            # one included (that probe once waited without a bound, whenever a refresh was due).
            time.sleep(REFRESH_SECONDS * 2)
            started = time.monotonic()
            # In a thread, so that a read without a bound fails here (SAFETY) instead of hanging.
            answer = reads.submit(client.get, "/api/orders?limit=10").result(timeout=SAFETY)
            waited = time.monotonic() - started
            timing = answer.headers.get("Server-Timing")
            print(f"\nfrozen replica: {answer.status_code} in {waited:.1f} s, {timing}")
            assert answer.status_code == 200, answer.get_data(as_text=True)
            assert name not in answer.headers["Server-Timing"], "read on the frozen node"
            assert waited < READ_TIMEOUT_MS / 1000 + 10, waited
        deadline = time.monotonic() + 60
        while name not in client.get("/api/orders?limit=10").headers.get("Server-Timing", ""):
            assert time.monotonic() < deadline, "the standby never served again after SIGCONT"
            time.sleep(0.5)
    finally:
        # Thawed by now: a read still running (a failed bound) ends, and gives its connections
        # back before the pools are closed; one that finished after dispose() would open a
        # connection in the new pool that nothing closes (a ResourceWarning in a later module).
        reads.shutdown(wait=True)
        router.dispose()
        app.extensions["engine"].dispose()
