"""A shard's leader dies, for real: a coordinator and two shards, each a Patroni cluster of two nodes
in synchronous mode (devtools/shards.py's ha_topology, one etcd), one gunicorn app server,
and through it a reader walking the list (following Retry-After on a 503), a reader that retries
every 100 ms (it times the outage), and two writers inserting, while shard 1's leader's PostgreSQL
is killed (kill -9); then the same with the coordinator's leader (the coordinator is a Patroni
cluster of two nodes too, DATABASE_URL multi-host); then `flask add-shard` with a spare Patroni
cluster under the same load, through the running app server.

The coordinator's foreign server for each shard lists both nodes with
`target_session_attrs=read-write` (orders/data/shards.py): after the failover, the next
transaction's connection reaches the promoted node. What is checked (docs/shards.md): no walk shows
a row twice or misses one that existed throughout, no acknowledged write is lost, every refusal is
a 503 with Retry-After (never a 500), and reads and writes on the killed shard come back; the
pauses are measured and printed, not asserted (the machine's load sets them).

Without Patroni, etcd, PostgreSQL's server binaries or postgres_fdw this skips loudly (fails under
CI=true).
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pytest
import requests
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from devtools.gunicorn import ROOT, gunicorn
from devtools.patroni import ClusterUnavailable, Databases, binary
from devtools.shards import HaTopology, ha_topology
from orders.data.db import make_engine
from orders.data.models import Order
from orders.finding.sorts import LIBRARY_SORTS

from .cluster_support import PATRONI_LANE_B
from .databases import unavailable
from .fixtures import SECRET
from .helpers import BASE, MISPLACED_ROWS, add_orders, partitions_watched

pytestmark = [pytest.mark.slow, PATRONI_LANE_B]
SHARDS, NODES, SEED, LIMIT = 2, 2, 400, 20
KILLED = 0  # shard 1
APP_ENV = {
    "SECRET_KEY": SECRET,
    "RATELIMIT_READS": "100000 per minute",
    "RATELIMIT_WRITES": "100000 per minute",
}
TIMEOUT = 30  # a client's wait for one answer


@dataclass
class Answer:
    sent: float
    at: float
    status: int  # 0: no HTTP answer
    retry_after: str | None
    order: int | None = None  # the id a 201 created
    error: str | None = None  # why there was no HTTP answer (status 0)


@dataclass
class Client:
    """A thread sending requests until stopped, recording every answer with its times."""

    base: str
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def send(
        self, http: requests.Session, method: str, path: str, **kwargs: object
    ) -> requests.Response | None:
        sent, error = time.monotonic(), None
        try:
            response = http.request(method, self.base + path, timeout=TIMEOUT, **kwargs)
        except requests.RequestException as err:
            response, error = None, f"{method} {path} after {time.monotonic() - sent:.1f} s: {err!r}"
        created = response is not None and response.status_code == 201
        self.answers.append(
            Answer(
                sent,
                time.monotonic(),
                response.status_code if response is not None else 0,
                response.headers.get("Retry-After") if response is not None else None,
                int(response.json()["id"]) if created and response is not None else None,
                error,
            )
        )
        return response

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def finish(self, timeout: float = 120) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{type(self).__name__} did not finish within {timeout} s"

    def run(self) -> None:
        raise NotImplementedError

    def successes(self) -> list[Answer]:
        return [a for a in self.answers if 200 <= a.status < 300]


@dataclass
class Reader(Client):
    """Walks /api/orders newest first, again and again; a walk ends only at its last page (a stop
    request is seen between walks). On a 503 the same page is asked again after Retry-After
    seconds, or after `retry_every` when that is set."""

    retry_every: float | None = None
    walks: list[list[int]] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)

    def run(self) -> None:
        http = requests.Session()
        while not self.stop.is_set():
            started, ids, cursor = time.monotonic(), [], None
            while True:
                params = {"limit": LIMIT, **({"after": cursor} if cursor else {})}
                response = self.send(http, "GET", "/api/orders", params=params)
                if response is None or response.status_code != 200:
                    wait = self.retry_every
                    if wait is None:
                        retry_after = response.headers.get("Retry-After") if response is not None else None
                        wait = float(retry_after or 1)
                    time.sleep(wait)
                    continue
                body = response.json()
                ids += [int(item["id"]) for item in body["items"]]
                cursor = body["next_cursor"]
                if cursor is None:
                    break
                time.sleep(0.05)
            self.walks.append(ids)
            self.spans.append((started, time.monotonic()))


@dataclass
class Writer(Client):
    """POSTs an order every 50 ms, never retrying: a 201 is an acknowledged write."""

    def run(self) -> None:
        http = requests.Session()
        while not self.stop.is_set():
            self.send(http, "POST", "/api/orders", json={"customer": "Writer", "amount": "1.00"})
            time.sleep(0.05)


def assert_every_answer_http(client: Client) -> None:
    """Every request `client` sent got a 200, 201 or 503: never a 500, never no answer at all
    (status 0, whose errors the message shows)."""
    statuses = {a.status for a in client.answers}
    assert statuses <= {200, 201, 503}, (statuses, [a.error for a in client.answers if a.error][:3])


def longest_gap(answers: list[Answer], since: float) -> float:
    """The longest time between two consecutive successful answers around `since` (from the last
    success before it to the first after it, and every gap after)."""
    times = sorted(a.at for a in answers if 200 <= a.status < 300)
    before = [t for t in times if t <= since][-1:]
    after = [t for t in times if t > since]
    chain = before + after
    return max((b - a for a, b in itertools.pairwise(chain)), default=float("inf"))


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HaTopology, str, Engine]]:
    try:
        for name in ("etcd", "patroni", "patronictl"):
            binary(name)
        with ha_topology(SHARDS, nodes=NODES, coordinator_nodes=NODES, spare=1) as top:
            yield from _serve(top, tmp_path_factory.mktemp("shard-failover"))
    except ClusterUnavailable as err:
        unavailable("Patroni clusters as shards (patroni, etcd, PostgreSQL, postgres_fdw)", str(err))


def _serve(top: HaTopology, logs: Path) -> Iterator[tuple[HaTopology, str, Engine]]:
    """init-db, SEED orders, and one gunicorn app server on the topology."""
    env = {**os.environ, **APP_ENV, **top.environment}
    env.pop("APP_ENV", None)
    flask = [str(ROOT / ".venv" / "bin" / "flask"), "--app", "app", "init-db"]
    done = subprocess.run(flask, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    coordinator = make_engine(top.url)
    rows = [
        (BASE - dt.timedelta(minutes=i // 3), f"Customer {i % 17}", Decimal(i) + Decimal("0.25"), "paid")
        for i in range(SEED)
    ]
    add_orders(coordinator, rows)
    try:
        with gunicorn(
            top.url, log_path=logs / "app.log", workers=2, threads=2, env={**APP_ENV, **top.environment}
        ) as (
            base,
            _,
        ):
            yield top, base, coordinator
    finally:
        coordinator.dispose()


def test_foreign_servers_list_every_node_of_their_shard(ha):
    top, _, coordinator = ha
    with coordinator.connect() as conn:
        options = dict(
            conn.execute(
                text("SELECT srvname, array_to_string(srvoptions, ' ') FROM pg_foreign_server ORDER BY 1")
            ).all()
        )
    for i, cluster in enumerate(top.clusters):
        listed = options[f"orders_shard_{i + 1}"]
        assert "port=" + ",".join(str(node.port) for node in cluster.nodes) in listed, listed
        assert "target_session_attrs=read-write" in listed, listed


def kill_leader_under_load(
    top: HaTopology, base: str, coordinator: Engine, cluster: Databases, what: str
) -> None:
    """kill -9 `cluster`'s leader's PostgreSQL while a reader walks the list (following
    Retry-After), another retries every 100 ms and two writers insert; check the walks and the
    acknowledged writes, print the pauses."""
    with Session(coordinator) as session:
        by_newest = LIBRARY_SORTS["newest"].order_by()
        newest = select(Order.id).where(Order.customer != "Writer").order_by(*by_newest)
        seeded = list(session.scalars(newest))
    for each in (*top.clusters, top.coordinator):
        assert isinstance(each, Databases)
        each.wait_healthy()
    reader, prober = Reader(base), Reader(base, retry_every=0.1)
    writers = [Writer(base) for _ in range(2)]
    clients: list[Client] = [reader, prober, *writers]
    for client in clients:
        client.start()
    time.sleep(3)
    leader = cluster.primary
    killed = time.monotonic()
    leader.kill_postmaster()
    try:
        new_leader = cluster.wait_for_leader(timeout=90, other_than=leader)
        promoted = time.monotonic() - killed
        cluster.wait_healthy(timeout=120)  # the old leader back as the synchronous standby
        healthy = time.monotonic() - killed
        time.sleep(3)
    finally:
        for client in clients:
            client.finish()

    # No acknowledged write lost: every 201's order is there, read through the coordinator.
    created = [a.order for w in writers for a in w.answers if a.order is not None]
    with coordinator.connect() as conn:
        placed = dict(
            conn.execute(
                text("SELECT id, tableoid::regclass::text FROM orders WHERE id = ANY(:ids)"), {"ids": created}
            ).all()
        )
    lost = set(created) - set(placed)
    assert not lost, f"{len(lost)} acknowledged writes lost: {sorted(lost)[:10]}"
    assert len(created) == len(set(created)), "one id handed out twice"
    # Every refusal a 503 with Retry-After, never a 500 (nor no answer at all).
    for client in clients:
        assert_every_answer_http(client)
        assert all(a.retry_after and int(a.retry_after) > 0 for a in client.answers if a.status == 503)
    # Every walk: no row twice, every seeded row (they existed throughout) once and in order.
    spanning = 0
    for walker in (reader, prober):
        for ids, (start, end) in zip(walker.walks, walker.spans, strict=True):
            assert len(ids) == len(set(ids)), "a row was shown twice"
            assert [i for i in ids if i in set(seeded)] == seeded, "a walk missed or reordered a row"
            spanning += start < killed < end
    assert spanning, "no walk ran across the kill"
    # Writes landed again after the failover, on every shard.
    answers = [a for w in writers for a in w.answers]
    for i in range(len(top.clusters)):
        on = f"orders_shard_{i + 1}"
        assert any(a.sent > killed and placed[a.order] == on for a in answers if a.order is not None), (
            f"no write reached {on} after the failover"
        )
    on_killed = [a for a in answers if a.order is not None and placed[a.order] == what]
    refused = {
        f"{type(c).__name__}{i}": sum(a.status == 503 for a in c.answers) for i, c in enumerate(clients)
    }
    print(
        f"\n{what}: {leader.name} killed, {new_leader.name} promoted after {promoted:.1f} s, "
        f"{leader.name} back as synchronous standby after {healthy:.1f} s\n"
        f"reads:  longest pause {longest_gap(prober.answers, killed):.2f} s (retrying every 100 ms), "
        f"{longest_gap(reader.answers, killed):.2f} s (following Retry-After)\n"
        + (
            f"writes: longest pause on {what} {longest_gap(on_killed, killed):.2f} s, "
            if on_killed
            else "writes: "
        )
        + f"longest pause on all shards {longest_gap(answers, killed):.2f} s; "
        f"{len(created)} acknowledged, 0 lost; 503s: {refused}; walks across the kill: {spanning}"
    )


def test_a_shard_leader_killed_under_a_reader_and_two_writers(ha):
    top, base, coordinator = ha
    kill_leader_under_load(top, base, coordinator, top.clusters[KILLED], f"orders_shard_{KILLED + 1}")


def test_the_coordinator_leader_killed_under_a_reader_and_two_writers(ha):
    top, base, coordinator = ha
    assert isinstance(top.coordinator, Databases)
    kill_leader_under_load(top, base, coordinator, top.coordinator, "coordinator")


def test_add_shard_on_patroni_clusters_under_a_reader_and_two_writers(ha):
    """add-shard (tests/test_shard_add.py has the details) with every shard, the new one and the
    coordinator Patroni clusters, through the running app server, which is not restarted."""
    top, base, coordinator = ha
    spare = top.spare[0]
    for each in (*top.clusters, top.coordinator, spare):
        assert isinstance(each, Databases)
        each.wait_healthy()
    with Session(coordinator) as session:
        by_newest = LIBRARY_SORTS["newest"].order_by()
        newest = select(Order.id).where(Order.customer != "Writer").order_by(*by_newest)
        seeded = list(session.scalars(newest))
    http = requests.Session()
    cursor = None
    for _ in range(5):
        params = {"limit": LIMIT, **({"after": cursor} if cursor else {})}
        cursor = http.get(f"{base}/api/orders", params=params, timeout=TIMEOUT).json()["next_cursor"]
    page_before = http.get(
        f"{base}/api/orders", params={"limit": LIMIT, "after": cursor}, timeout=TIMEOUT
    ).json()

    reader, writers = Reader(base), [Writer(base) for _ in range(2)]
    clients: list[Client] = [reader, *writers]
    for client in clients:
        client.start()
    # `switched`: the moment the coordinator's layout showed the new partition.
    with partitions_watched(coordinator, SHARDS + 1) as switched:
        try:
            time.sleep(2)
            env = {**os.environ, **APP_ENV, **top.environment}
            env.pop("APP_ENV", None)
            flask = [str(ROOT / ".venv" / "bin" / "flask"), "--app", "app", "add-shard", spare.primary_url]
            started = time.monotonic()
            done = subprocess.run(
                flask, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
            )
            ended = time.monotonic()
            time.sleep(2)
        finally:
            for client in clients:
                client.finish()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"shard {SHARDS + 1} added" in done.stdout, done.stdout
    (switch,) = switched

    # The cursor from before: the same next page, now read over three shards.
    page_after = http.get(
        f"{base}/api/orders", params={"limit": LIMIT, "after": cursor}, timeout=TIMEOUT
    ).json()
    assert page_after["items"] == page_before["items"]
    spanning = 0
    for ids, (start, end) in zip(reader.walks, reader.spans, strict=True):
        assert len(ids) == len(set(ids)), "a row was shown twice"
        assert [i for i in ids if i in set(seeded)] == seeded, "a walk missed or reordered a row"
        spanning += start < switch < end
    assert spanning, "no walk ran across the switch"
    created = [a.order for w in writers for a in w.answers if a.order is not None]
    with coordinator.connect() as conn:
        present = set(conn.scalars(text("SELECT id FROM orders WHERE id = ANY(:ids)"), {"ids": created}))
        misplaced = conn.scalar(MISPLACED_ROWS)
        on_new = conn.scalar(text(f"SELECT count(*) FROM orders_shard_{SHARDS + 1}"))
    assert set(created) <= present, f"{len(set(created) - present)} acknowledged writes lost"
    assert misplaced == 0 and on_new
    for client in clients:
        assert_every_answer_http(client)
    write_times = [a for w in writers for a in w.answers]
    print(
        f"\n{done.stdout.strip()}\ntook {ended - started:.1f} s; longest pause: writes "
        f"{longest_gap(write_times, started):.2f} s, reads {longest_gap(reader.answers, started):.2f} s; "
        f"{len(created)} acknowledged, 0 lost; {on_new} orders on the new shard; "
        f"walks across the add: {spanning}"
    )
