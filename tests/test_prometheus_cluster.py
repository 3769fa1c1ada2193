"""The cluster recipes' Prometheus, for real: it scrapes every app server, haproxy's exporter and
every Patroni node, loads deploy/prometheus/alerts.yml as shipped, and its alerts follow a failure.

- `make cluster-shards`'s recipe (devtools/shards.py shard_cluster: a coordinator and two shards,
  each a Patroni cluster of two nodes in one etcd, two app servers, haproxy, Prometheus): shard 1's
  leader node is killed (Patroni and PostgreSQL, kill -9). Prometheus's own HTTP API
  (/api/v1/alerts) shows `OrdersShardLeaderless` for that shard's scope, pending (it fires after
  30 s leaderless; Patroni promotes the synchronous standby once the dead leader's key expires,
  10 s here, so it does not get there), and no more once the standby leads. Then shard 2's
  leader is killed in maintenance mode, where Patroni promotes nobody: the alert goes pending,
  fires after its 30 s, and is gone once maintenance ends and the standby leads.
- `make cluster`'s recipe (devtools/cluster.py, two nodes, asynchronous): readers walk the list
  through haproxy while a standby's replay is paused and resumed, and /metrics of every app
  server, read again and again meanwhile, counts the router's decisions
  (`orders_replica_reads_total`: replica, or primary when no standby had the reader's position)
  exactly as the readers saw them in Server-Timing; Prometheus's sum says the same.

Prometheus scrapes and evaluates every second here (the test's Intervals; the shipped file says
15 s); the rules and their `for` are the shipped ones. Every wait is bounded. Without Prometheus,
Patroni, etcd, PostgreSQL's server binaries or haproxy this skips loudly (fails under CI=true).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from devtools.cluster import Cluster, ClusterUnavailable
from devtools.patroni import Databases
from devtools.prometheus import Intervals, Prometheus, PrometheusUnavailable
from devtools.shards import HaTopology, ShardCluster, shard_cluster
from orders.data.db import make_engine

from .cluster_support import APP_ENV, MAX_LAG_MS, PATRONI_LANE_B, module_cluster, reseed, served
from .databases import unavailable
from .helpers import BASE, add_orders

pytestmark = PATRONI_LANE_B
FAST = Intervals(scrape="1s", evaluation="1s")
LEADERLESS = "OrdersShardLeaderless"


def alerts_named(prom: Prometheus, name: str, **labels: str) -> list[dict[str, Any]]:
    return [
        a
        for a in prom.alerts()
        if a["labels"]["alertname"] == name and all(a["labels"].get(k) == v for k, v in labels.items())
    ]


# --- a shard's leader killed ---------------------------------------------------------------


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[ShardCluster]:
    try:
        with shard_cluster(
            2, nodes=2, rows=200, log_dir=tmp_path, workers=1, env=APP_ENV, prometheus=FAST
        ) as running:
            yield running
    except (ClusterUnavailable, PrometheusUnavailable) as err:
        unavailable("the sharded Patroni cluster with Prometheus", str(err))


def test_a_shard_leader_killed_is_an_alert_until_its_standby_leads(shards: ShardCluster) -> None:
    prom = shards.prometheus
    top = shards.topology
    assert prom is not None and isinstance(top, HaTopology)
    # Two app servers, haproxy's exporter, the coordinator's two Patroni nodes and each shard's two.
    up = prom.all_up(2 + 1 + 2 + 2 * len(top.clusters), timeout=120)
    assert Counter(t["labels"]["job"] for t in up) == {"orders": 2, "haproxy": 1, "patroni": 6}
    scopes = {"orders-coordinator", "orders-shard1", "orders-shard2"}

    def every_scope_led() -> bool | None:
        # Until each scope's leader has been scraped (the first scrapes are staggered) a scope
        # can look leaderless, and the alert pending: wait until that has passed too.
        leading = {r["metric"]["scope"] for r in prom.query("max by (scope) (patroni_primary) == 1")}
        return True if leading == scopes and not alerts_named(prom, LEADERLESS) else None

    prom.wait_for("a leader in every Patroni scope, and no alert", every_scope_led, timeout=60)
    # haproxy's exporter is scraped: its backend of app servers, both up.
    assert prom.query('sum(haproxy_backend_active_servers{proxy="app_servers"})')[0]["value"][1] == "2"

    # Act 1: shard 1's leader node dies; Patroni promotes its standby once the key expires.
    states, killed = watch_a_leader_killed(prom, top.clusters[0], "orders-shard1")
    assert {state for _, state in states} <= {"pending", "firing"}
    # The other shard never lost its leader; the killed node is seen down (warned after 2 min).
    assert not alerts_named(prom, LEADERLESS, scope="orders-shard2")
    assert not alerts_named(prom, "OrdersShardDown")
    assert alerts_named(prom, "OrdersPatroniNodeDown", instance=killed, scope="orders-shard1")

    # Act 2: shard 2's leader node dies in maintenance mode (`patronictl pause`): nobody is
    # promoted, so the alert outlasts its 30 s and fires; maintenance ends, the standby leads.
    states, _killed = watch_a_leader_killed(prom, top.clusters[1], "orders-shard2", paused=True)
    seen = [state for _, state in states]
    assert "pending" in seen and "firing" in seen and seen.index("pending") < seen.index("firing")
    assert not alerts_named(prom, "OrdersShardDown")


def watch_a_leader_killed(
    prom: Prometheus, shard: Databases, scope: str, *, paused: bool = False
) -> tuple[list[tuple[float, str]], str]:
    """Kill `shard`'s leader node (Patroni and PostgreSQL, kill -9) and follow its
    OrdersShardLeaderless in /api/v1/alerts until a standby leads and it is gone; with `paused`,
    in maintenance mode until the alert fires. Returns its states with their seconds after the
    kill, and the killed node's instance (host:port of its REST API)."""
    leader = shard.wait_healthy()
    standby = next(node for node in shard.nodes if node is not leader)
    if paused:
        standby.maintenance(True)
    leader.kill()
    started = time.monotonic()
    states: list[tuple[float, str]] = []

    def state() -> str | None:
        found = alerts_named(prom, LEADERLESS, scope=scope)
        if found:
            states.append((time.monotonic() - started, found[0]["state"]))
        return found[0]["state"] if found else None

    if paused:
        prom.wait_for(f"{LEADERLESS} firing for {scope}", lambda: state() == "firing" or None, timeout=90)
        standby.maintenance(False)
    else:
        prom.wait_for(f"{LEADERLESS} for {scope}", state, timeout=60)
    promoted = shard.wait_for_leader(timeout=90, other_than=leader)
    led_at = time.monotonic() - started
    prom.wait_for(f"{LEADERLESS} resolved for {scope}", lambda: True if state() is None else None, timeout=60)
    firing = next((f"firing at {t:.1f} s, " for t, s in states if s == "firing"), "")
    print(
        f"\n{scope}: leader {leader.name} killed{' in maintenance mode' if paused else ''}; alert "
        f"{states[0][1]} at {states[0][0]:.1f} s, {firing}{promoted.name} leads at {led_at:.1f} s, "
        f"resolved at {time.monotonic() - started:.1f} s"
    )
    return states, f"127.0.0.1:{leader.rest_port}"


# --- the router's decisions counted under load ---------------------------------------------

READERS, PAGES = 4, 30


@pytest.fixture
def routed(tmp_path: Path) -> Iterator[Cluster]:
    try:
        with module_cluster(tmp_path, nodes=2, synchronous=False, prometheus=FAST) as running:
            yield running
    except PrometheusUnavailable as err:
        unavailable("Prometheus", str(err))


def replica_reads(body: str, by: str = "node") -> Counter[str]:
    """orders_replica_reads_total by node (replica, primary), or by reason, in one /metrics answer."""
    counts: Counter[str] = Counter()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == "orders_replica_reads_total":
                counts[sample.labels[by]] += int(sample.value)
    return counts


def test_replica_reads_and_primary_fallbacks_are_counted_under_load(routed: Cluster) -> None:
    dbs = routed.databases
    primary = make_engine(dbs.primary_url)
    seen: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    scrapes: list[Counter[str]] = []

    def walk(_: int) -> None:
        """PAGES pages of /api/orders through haproxy, from the top again at each end."""
        http, cursor = requests.Session(), None
        for _ in range(PAGES):
            params: dict[str, Any] = {"limit": 20, **({"after": cursor} if cursor else {})}
            response = http.get(f"{routed.url}/api/orders", params=params, timeout=30)
            assert response.status_code == 200, response.text
            node, _lsn = served(response)
            with lock:
                seen["primary" if node == "primary" else "replica"] += 1
            cursor = response.json()["next_cursor"]

    def scraper() -> None:
        while not stop.is_set():
            for base in routed.app_servers:
                scrapes.append(replica_reads(requests.get(f"{base}/metrics", timeout=30).text))
            time.sleep(0.1)

    watcher = threading.Thread(target=scraper)
    try:
        reseed(routed, primary)
        bodies = [requests.get(f"{b}/metrics", timeout=30).text for b in routed.app_servers]
        before = sum((replica_reads(body) for body in bodies), Counter())
        before_reasons = sum((replica_reads(body, "reason") for body in bodies), Counter())
        watcher.start()
        with ThreadPoolExecutor(READERS) as pool:
            list(pool.map(walk, range(READERS)))  # standbys caught up: replica reads
            standby = dbs.standbys[0]
            standby.pause_replay()
            try:
                # Written on the primary only: the standby falls behind every new position and,
                # after REPLICA_MAX_LAG_MS, behind a first page's bound too.
                add_orders(
                    primary,
                    [(BASE + dt.timedelta(seconds=i), "Late", Decimal("1.00"), "paid") for i in range(5)],
                )
                time.sleep(MAX_LAG_MS / 1000 * 2)
                list(pool.map(walk, range(READERS)))  # the primary's
            finally:
                standby.resume_replay()
            dbs.wait_for_standbys()
            list(pool.map(walk, range(READERS)))
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=60)
        primary.dispose()
    assert len(scrapes) > 2 * len(routed.app_servers), "/metrics was read under load"
    bodies = [requests.get(f"{b}/metrics", timeout=30).text for b in routed.app_servers]
    after = sum((replica_reads(body) for body in bodies), Counter())
    counted = after - before
    reasons = sum((replica_reads(body, "reason") for body in bodies), Counter()) - before_reasons
    print(f"\nreaders saw {dict(seen)}; /metrics counted {dict(counted)}, by reason {dict(reasons)}")
    assert seen["replica"] > 0 and seen["primary"] > 0, "both decisions were taken"
    assert counted == seen
    # The standby was up all along, only behind: every primary read says so, never "no standby".
    assert set(reasons) <= {"standby", "behind"} and reasons["behind"] >= counted["primary"], reasons

    prom = routed.prometheus
    assert prom is not None
    prom.all_up(2 + 1 + len(dbs.nodes), timeout=60)

    def agrees() -> bool | None:
        found = {
            r["metric"]["node"]: int(float(r["value"][1]))
            for r in prom.query("sum by (node) (orders_replica_reads_total)")
        }
        return True if found == dict(after) else None

    prom.wait_for("Prometheus's orders_replica_reads_total equal to /metrics'", agrees, timeout=30)
