"""The primary dies, for real: three PostgreSQL nodes under Patroni (synchronous mode), two gunicorn
app servers, haproxy (devtools/cluster.py), once for the module, with Chromium and API readers and
API writers going through haproxy while the leader is killed (kill -9), switched over
(`patronictl switchover`), and killed together with its synchronous standby.

What is checked is the guarantee written in docs/several-servers.md: across a failover or a
switchover no reader sees an error, a gap or a row twice; no acknowledged write (201, 204) is
lost; writes meanwhile are refused with 503 and Retry-After (never a 500); cursors from before
open their next page on the new primary, also one stamped with a WAL position the new primary
has not reached; the old primary comes back as a replica and serves reads. With the leader and
the synchronous standby both gone, Patroni promotes no one (the asynchronous replica may lack
acknowledged commits): writes are refused until the synchronous standby is back.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import suppress

import pytest
import requests
from playwright.sync_api import Page, expect
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.orm import Session

from devtools.cluster import Cluster
from devtools.failover import Readers, Writers
from devtools.patroni import LOOP_WAIT, TTL, Databases, Node
from orders.data.models import Order
from orders.data.replicas.lsn import format_lsn
from orders.web.read_routing import HEADER

from .cluster_support import (
    PATRONI_LANE_A,
    ROWS,
    Walk,
    screen_ids,
    scroll,
    served,
    traffic,
    watch_failures,
)

pytestmark = PATRONI_LANE_A

ANYWHERE_BEYOND = "FFFFFFFF/FFFFFFFF"  # a Read-After-LSN no replica reaches: the primary reads


def api(cluster: Cluster) -> str:
    return f"{cluster.url}/api/orders"


def serves_reads(cluster: Cluster, node: Node, timeout: float = 60) -> None:
    """Until a read through haproxy is served by `node` as a replica."""
    name = cluster.databases.router_name(node)
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while name not in seen:
        assert time.monotonic() < deadline, f"{node.name} never served a read: {seen}"
        response = requests.get(api(cluster), params={"limit": 5}, timeout=30)
        assert response.status_code == 200, response.text
        seen.add(served(response)[0])
        time.sleep(0.05)


def check_writes(writers: Writers, primary: Engine) -> None:
    """No acknowledged write lost: every order answered 201 is there unless a 204 deleted it, and
    none answered 204 is. Writes meanwhile were refused with 503 and Retry-After, never worse."""
    with Session(primary) as session:
        present = set(session.scalars(select(Order.id).where(Order.customer == "Writer")))
    # An unanswered DELETE (in_doubt) may have committed before the leader died: its order may
    # be gone, and that loses no acknowledged write (it was seen once as a false "lost" order).
    kept = set(writers.created) - writers.deleted - writers.in_doubt
    assert kept <= present, f"{len(kept - present)} acknowledged orders lost: {sorted(kept - present)[:10]}"
    assert not writers.deleted & present, "an acknowledged delete came back"
    assert set(writers.statuses()) <= {201, 204, 503}, writers.statuses()
    refused = [a for a in writers.answers if a.status == 503]
    assert all(a.retry_after and int(a.retry_after) > 0 for a in refused)


def check_reads(readers: Readers, orders: list[int]) -> None:
    """No reader error; every walk shows the seeded orders exactly, in order (the writers' orders,
    newer than all of them, come first and are not checked)."""
    assert set(readers.statuses()) == {200}, readers.statuses()
    seeded = set(orders)
    for ids, trail in zip(readers.walks, readers.trails, strict=True):
        assert len(ids) == len(set(ids)), "a row was shown twice"
        assert [i for i in ids if i in seeded] == orders, f"a walk missed or reordered seeded rows: {trail}"


def spanning(readers: Readers, moment: float) -> int:
    return sum(start < moment < end for start, end in readers.spans)


@pytest.mark.browser
def test_leader_killed_under_chromium_reader_and_api_writers(
    cluster: Cluster, orders: list[int], primary: Engine, page: Page
):
    dbs = cluster.databases
    failures = watch_failures(page)
    page.goto(f"{cluster.url}/orders")
    expect(page.locator(ROWS).first).to_be_attached()
    scroll(page, lambda: page.locator(ROWS).count() >= 120, steps=400)
    # Cursors taken before the kill: one read on a replica, one on the primary (stamped with the
    # old primary's position), ten pages deep.
    walk = Walk(cluster.url)
    for _ in range(10):
        walk.step()
    on_primary = requests.get(
        api(cluster), params={"limit": 20}, headers={HEADER: ANYWHERE_BEYOND}, timeout=30
    )
    assert served(on_primary)[0] == "primary"
    cursors = {
        "replica": (walk.cursor, orders[200:220]),
        "primary": (on_primary.json()["next_cursor"], orders[20:40]),
    }

    with traffic(cluster.url) as (readers, writers):
        old = dbs.primary
        killed_at = time.monotonic()
        old.kill_postmaster()
        promoted: list[float] = []
        watcher = threading.Thread(target=_watch_for_leader, args=(dbs, old, promoted), daemon=True)
        watcher.start()
        scroll(page, lambda: bool(page.locator("#end-of-list").count() or failures))
        new = dbs.wait_for_leader(other_than=old)
        watcher.join(timeout=60)
        promoted_at = promoted[0] if promoted else time.monotonic()
        recovered_at = writers.wait_for_success_after(killed_at)
        # Old cursors go on, on the new timeline.
        for name, (cursor, expected) in cursors.items():
            response = requests.get(api(cluster), params={"after": cursor, "limit": 20}, timeout=30)
            assert response.status_code == 200, (name, response.text)
            assert [int(o["id"]) for o in response.json()["items"]] == expected, name
        # The old primary is rewound and follows the new one; then it serves reads.
        dbs.wait_healthy()
        serves_reads(cluster, old)
        time.sleep(1)
    assert not failures, failures
    expect(page.locator("#end-of-list")).to_be_attached()
    assert screen_ids(page) == orders
    check_reads(readers, orders)
    assert spanning(readers, killed_at), "no API walk went across the kill: nothing was tested"
    check_writes(writers, primary)
    refused = writers.statuses(killed_at, recovered_at)[503]
    # Writes were sent while no node took them (refused with 503, or answered once one did).
    assert sum(writers.statuses(killed_at, promoted_at).values()), "the writers never met the failover"
    print(
        f"\n{old.name} killed, {new.name} leads; first write {recovered_at - killed_at:.1f} s after the "
        f"kill; {refused} writes refused meanwhile, {len(writers.created)} acknowledged; "
        f"{len(readers.walks)} API walks ({spanning(readers, killed_at)} across the kill), "
        f"reads {readers.nodes}"
    )


def test_switchover_loses_no_request(cluster: Cluster, orders: list[int], primary: Engine):
    """A planned switchover: readers see no error; writers send each order with an Idempotency-Key
    and send it again on any answer but 201 (a 503 while no node takes writes), so every order is
    acknowledged, exactly once: the orders in the database are exactly the acknowledged ones."""
    dbs = cluster.databases
    with traffic(cluster.url, idempotency_keys=True) as (readers, writers):
        old = dbs.primary
        started = time.monotonic()
        new = dbs.switchover()
        writers.wait_for_success_after(time.monotonic())
        dbs.wait_healthy()
        time.sleep(1)
    check_reads(readers, orders)
    assert spanning(readers, started), "no API walk went across the switchover: nothing was tested"
    check_writes(writers, primary)
    assert writers.abandoned == 0
    with Session(primary) as session:
        present = set(session.scalars(select(Order.id).where(Order.customer == "Writer")))
    assert present == set(writers.created) - writers.deleted, "an order was created twice (or lost)"
    assert len(writers.created) == len(set(writers.created))
    print(
        f"\nswitchover {old.name} -> {new.name}: writes {writers.statuses(started)}"
        f", reads {readers.statuses()}"
    )


def test_failover_without_writes_opens_a_cursor_stamped_beyond_the_new_primary(
    cluster: Cluster, orders: list[int], primary: Engine
):
    """The old primary wrote WAL no standby received (an open transaction's rows, while its WAL
    senders are stopped) and stamped a page with that position; then it died and nothing was
    written since. The new primary's positions are behind the stamp: the cursor's next page must
    neither wait for a position no node will reach nor skip rows."""
    dbs = cluster.databases
    old = dbs.primary
    senders = [int(pid) for pid in old.sql("SELECT array_agg(pid) FROM pg_stat_replication")]
    killed = False
    for pid in senders:
        os.kill(pid, signal.SIGSTOP)
    try:
        engine = create_engine(old.url())
        conn = engine.connect()
        conn.execute(
            text(
                "INSERT INTO orders (created_at, customer, customer_key, amount, status) "
                "SELECT now(), 'Never', 'never', 1, 'paid' FROM generate_series(1, 20000)"
            )
        )  # never committed: it dies with the primary
        time.sleep(0.5)  # the WAL writer writes it out (wal_writer_delay is 200 ms)
        page = requests.get(api(cluster), params={"limit": 20}, headers={HEADER: ANYWHERE_BEYOND}, timeout=30)
        node, stamp = served(page)
        assert node == "primary" and stamp is not None
        cursor = page.json()["next_cursor"]
        leader_seen: list[float] = []
        watcher = threading.Thread(target=_watch_for_leader, args=(dbs, old, leader_seen), daemon=True)
        old.kill_postmaster()
        killed = True
        watcher.start()
    finally:
        # Killed, not continued, once the primary is dead: a WAL sender let go would still send
        # what it holds. (On a live primary a killed child would make it restart: continue them.)
        for pid in senders:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if killed else signal.SIGCONT)
    # Opened at once, during the failover: it waits for the new primary (it holds every
    # acknowledged commit) and reads the page there; or, if no primary answered for the whole
    # wait, refuses with 503. It must not wait out its timeout while a primary answers.
    during = requests.get(api(cluster), params={"after": cursor, "limit": 20}, timeout=30)
    answered_at = time.monotonic()
    watcher.join(timeout=60)
    with suppress(Exception):
        engine.dispose()
    assert leader_seen, "no new leader"
    if during.status_code == 503:
        # A primary that became writable in the wait's last moments may be found a little after
        # it ends (the app's next try, a loaded machine's scheduling): 2 s of room, far less than
        # a wait that ignored the new primary would show.
        assert leader_seen[0] > answered_at - 2.0, "waited out the timeout while the new primary answered"
    else:
        assert during.status_code == 200, during.text
        assert [int(o["id"]) for o in during.json()["items"]] == orders[20:40]
    new = dbs.wait_for_leader(other_than=old)
    behind = new.sql(f"SELECT pg_current_wal_lsn() < '{format_lsn(stamp)}'::pg_lsn")
    assert behind, "the new primary's position passed the stamp: the case was not made"
    # After the failover, with nothing written: every app server reads it on the new primary, and
    # the walk goes on to the end without a gap.
    for _ in range(4):
        response = requests.get(api(cluster), params={"after": cursor, "limit": 20}, timeout=30)
        assert response.status_code == 200, response.text
        assert served(response)[0] == "primary"
        assert [int(o["id"]) for o in response.json()["items"]] == orders[20:40]
    walk = Walk(cluster.url)
    walk.cursor = cursor
    walk.run()
    assert walk.ids == orders[20:]
    walk.check(set(orders[20:]), same_timeline=False)
    print(
        f"\n{old.name} died at a stamp beyond {new.name}'s position"
        f"; during the failover: {during.status_code}"
    )


def _watch_for_leader(dbs: Databases, old: Node, seen: list[float]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        leader = dbs.leader()
        # Writable: out of recovery, what libpq's target_session_attrs=read-write accepts (Patroni
        # reports the leader an instant before).
        if leader is not None and leader is not old and leader.writable():
            seen.append(time.monotonic())
            return
        time.sleep(0.05)


def test_leader_and_synchronous_standby_lost(cluster: Cluster, orders: list[int], primary: Engine):
    """Both nodes that hold every acknowledged commit gone (Patroni and PostgreSQL killed): Patroni
    promotes no one, though the asynchronous replica is healthy and the leader key has expired.
    Writes answer 503 with Retry-After; reads go on from the replica. When the synchronous standby
    is back it is promoted, and no acknowledged write is lost."""
    dbs = cluster.databases
    old, sync = dbs.primary, dbs.sync_standby()
    assert sync is not None
    (replica,) = [node for node in dbs.nodes if node not in (old, sync)]
    with traffic(cluster.url, before=10) as (readers, writers):
        old.kill()
        sync.kill()
        lost_at = time.monotonic()
        # Past the leader key's time to live, and a few Patroni loops more.
        time.sleep(TTL + 4 * LOOP_WAIT)
        assert dbs.leader() is None, dbs.members()
        outage = writers.statuses(lost_at, time.monotonic())
        assert outage[503] > 0 and set(outage) == {503}, outage
        fresh = Walk(cluster.url).run()  # a walk started during the outage, on the replica
        assert fresh.ids[-len(orders) :] == orders
        assert {node for node, _ in fresh.pages} == {dbs.router_name(replica)}
        back_at = time.monotonic()
        sync.start()
        assert dbs.wait_for_leader() is sync
        writers.wait_for_success_after(back_at)
        old.start()
        dbs.wait_healthy()
    check_writes(writers, primary)
    # Readers: a page whose cursor came from a node now gone, past what the replica has, is refused
    # (503, Retry-After) rather than read at an older position; the reader retries it.
    assert set(readers.statuses()) <= {200, 503}, readers.statuses()
    seeded = set(orders)
    for ids, trail, (start, end) in zip(readers.walks, readers.trails, readers.spans, strict=True):
        shown = [i for i in ids if i in seeded]
        assert shown == orders, (
            f"a walk from {start - lost_at:+.1f} s to {end - lost_at:+.1f} s after the loss showed"
            f" {len(shown)} of {len(orders)} seeded orders; its pages: {trail}"
        )
    print(
        f"\nleader and sync standby lost: writes {writers.statuses(lost_at)}"
        f", reads {readers.statuses(lost_at)}"
    )
