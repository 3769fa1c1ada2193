"""Writes on a synchronous Patroni cluster (two nodes of our own, devtools.patroni.databases): no
write is acknowledged before the synchronous standby has it, and none keeps going to a demoted
primary.

- The synchronous standby frozen (SIGSTOP on its PostgreSQL, by its ids): COMMIT waits for it,
  bounded by the client's read timeout, not ended by the 1 s statement_timeout (PostgreSQL
  disables it before committing): 503 with Retry-After, also for the client's retry with the same
  Idempotency-Key, until the standby thaws; a commit whose wait is cancelled (pg_cancel_backend),
  which PostgreSQL reports done with only a warning, is a 503 too. Thawed, each key's retry gets
  its 201, exactly one order per key, and a failover right after loses none (orders/data/db.py,
  SYNC_WAIT_CANCELLED).
- A switchover behind a proxy that still points at the old primary: the app's pool reconnects
  to it (a standby now: reads work, pings pass, writes fail with 25006). Once the proxy points at
  the new primary, the first write already succeeds: 25006 drops the pool and the write runs once
  more on a fresh connection (orders/data/db.py, READ_ONLY_TRANSACTION).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from devtools.patroni import Databases, Node, proxy
from devtools.throwaway import frozen, postgres_processes

from .cluster_support import PATRONI_LANE_B, clear_orders, module_databases
from .fixtures import CLIENT_LIMITS, make_app

pytestmark = PATRONI_LANE_B

STATEMENT_TIMEOUT_MS = 1000
READ_TIMEOUT_MS = 5000


@pytest.fixture(scope="module")
def cluster() -> Iterator[Databases]:
    with module_databases(nodes=2, synchronous=True) as running:
        yield running


@pytest.fixture
def dbs(cluster: Databases) -> Databases:
    """Every test starts from a leader (whichever node), a synchronous standby and no orders."""
    for node in cluster.nodes:
        node.start()  # Patroni of a node a test killed (already running: nothing)
    cluster.wait_healthy()
    clear_orders(cluster)
    return cluster


def post(client: Any, key: str, customer: str) -> Any:
    return client.post(
        "/api/orders", json={"customer": customer, "amount": "1.00"}, headers={"Idempotency-Key": key}
    )


def sync_waits(node: Node) -> set[int]:
    """The backends on `node` whose COMMIT waits for the synchronous standby."""
    pids = node.sql("SELECT array_agg(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
    return set(pids or [])


def count(dbs: Databases, customer: str) -> int:
    return int(str(dbs.primary.sql(f"SELECT count(*) FROM orders WHERE customer = '{customer}'")))


def test_no_write_is_acknowledged_before_the_synchronous_standby_has_it(dbs: Databases) -> None:
    app = make_app(
        dbs.primary_url,
        STATEMENT_TIMEOUT_MS=STATEMENT_TIMEOUT_MS,
        DATABASE_READ_TIMEOUT_MS=READ_TIMEOUT_MS,
        **CLIENT_LIMITS,
    )
    client = app.test_client()
    keys = {f"sync-{uuid.uuid4()}": f"Frozen {i}" for i in range(2)}
    acknowledged: dict[str, int] = {}
    try:
        before = post(client, f"sync-{uuid.uuid4()}", "Before")
        assert before.status_code == 201, before.get_data(as_text=True)
        leader, standby = dbs.primary, dbs.sync_standby()
        assert standby is not None, dbs.members()
        with frozen(postgres_processes(standby)):
            for key, customer in [*keys.items(), *keys.items()]:  # each sent, then retried
                started = time.monotonic()
                answer = post(client, key, customer)
                waited = time.monotonic() - started
                print(f"\nstandby frozen: {answer.status_code} in {waited:.1f} s")
                assert answer.status_code == 503, (answer.status_code, answer.get_data(as_text=True))
                assert int(answer.headers["Retry-After"]) >= 1
                assert waited < READ_TIMEOUT_MS / 1000 + 10, waited
            # A cancel does end the wait (an operator's pg_cancel_backend): PostgreSQL reports
            # the commit done, with a warning; the app does not acknowledge it.
            waiting = sync_waits(leader)
            cancelled_key = f"sync-{uuid.uuid4()}"
            with ThreadPoolExecutor(1) as requests:
                cancelled = requests.submit(post, client, cancelled_key, "Cancelled")
                deadline = time.monotonic() + READ_TIMEOUT_MS / 1000
                while not (new := sync_waits(leader) - waiting) and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert new, "the commit never waited for the synchronous standby"
                leader.sql(f"SELECT pg_cancel_backend({new.pop()})")
                answer = cancelled.result(timeout=60)
            assert answer.status_code == 503, (answer.status_code, answer.get_data(as_text=True))
            # Its retry finds the order committed on the primary alone: still no 201 while the
            # standby does not have it (the replay's own commit waits for the standby).
            again = post(client, cancelled_key, "Cancelled")
            assert again.status_code == 503, (again.status_code, again.get_data(as_text=True))
        keys[cancelled_key] = "Cancelled"
        # Thawed: the client's retries get their 201, the first commit's order.
        for key, customer in keys.items():
            deadline = time.monotonic() + 60
            while (answer := post(client, key, customer)).status_code != 201:
                assert answer.status_code == 503, answer.get_data(as_text=True)
                assert time.monotonic() < deadline, "no 201 after the standby thawed"
                time.sleep(0.2)
            acknowledged[customer] = int(answer.get_json()["id"])
        for customer in keys.values():
            assert count(dbs, customer) == 1, f"{customer}: not exactly one order for its key"
        # A failover right after: the leader's node lost whole (Patroni and PostgreSQL), the
        # synchronous standby is promoted once the leader key expires, with every acknowledged order.
        dbs.wait_healthy()
        leader.kill()
        promoted = dbs.wait_for_leader(timeout=90, other_than=leader)
        assert promoted is standby
        ids = ",".join(str(i) for i in acknowledged.values())
        present = promoted.sql(f"SELECT count(*) FROM orders WHERE id IN ({ids})")
        assert present == len(acknowledged), "an acknowledged order was lost in the failover"
    finally:
        app.extensions["engine"].dispose()
        for node in dbs.nodes:
            node.start()  # a node killed above comes back (as a replica): the next test's cluster


def test_a_pooled_connection_to_the_demoted_primary_does_not_keep_writing(
    dbs: Databases, tmp_path: Path
) -> None:
    with proxy(dbs, tmp_path) as px:
        # One address for the primary, as a health-checked haproxy or a DNS name gives it.
        app = make_app(px.url(application_name="demoted-test"), **CLIENT_LIMITS)
        client = app.test_client()
        try:
            old = dbs.primary
            created = [post(client, str(uuid.uuid4()), "Before switchover") for _ in range(3)]
            assert {a.status_code for a in created} == {201}
            new = dbs.switchover()
            # The proxy still sends new connections to the old primary, a standby now: the pool
            # reconnects there (the old connections died with its restart), and reads work.
            deadline = time.monotonic() + 60
            while client.get(f"/api/orders/{created[0].get_json()['id']}").status_code != 200:
                assert time.monotonic() < deadline, "the old primary never served a read"
                time.sleep(0.2)
            px.point_at(new)  # the proxy has learnt: new connections go to the new primary
            answers = [post(client, str(uuid.uuid4()), "After switchover") for _ in range(10)]
            statuses = [a.status_code for a in answers]
            assert statuses == [201] * 10, statuses
            assert count(dbs, "After switchover") == 10
            # No connection of the app is left on the demoted node.
            deadline = time.monotonic() + 10
            sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'demoted-test'"
            while (left := old.sql(sql, "postgres")) != 0:
                assert time.monotonic() < deadline, f"{left} app connections still on the demoted node"
                time.sleep(0.2)
        finally:
            app.extensions["engine"].dispose()
