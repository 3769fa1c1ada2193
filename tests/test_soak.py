"""The soak in its short mode, and the delete race it is built to catch, made deterministic.

`python -m soak.run` runs a minute; here it runs 15 s against a throwaway PostgreSQL database
and the test asserts its invariants (never its timings): every walk without duplicates, gaps
or backward steps, no 5xx, no hung request, no order deleted twice, every gunicorn worker alive.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from soak.run import WALKS, Config, soak

from .databases import ENGINES, migrated_database, throwaway_database
from .fixtures import authorized_client, make_app, with_token

SHORT_SECONDS = 15


@pytest.fixture
def postgresql_url(tmp_path: Path) -> Iterator[str]:
    with throwaway_database("postgresql", tmp_path, "soak") as url:
        yield url


def test_short_soak_keeps_every_invariant(postgresql_url: str) -> None:
    report = soak(postgresql_url, Config(seconds=SHORT_SECONDS))
    assert report["violations"] == [], report
    assert report["server_errors"] == 0
    # The run really did what it claims: every kind of walk completed while writes went on. (Not
    # how many: that is the machine's speed. A walk begun before the end is finished, so each
    # kind completes once at least; at load 12 a full run's soak did 6 walks, a quiet one over 8.)
    assert len(report["walks_by_sort"]) == len(WALKS) + 1, report
    assert report["walks_by_sort"].get("newest (browser)", 0) >= 1, report  # Chromium scrolled it all
    # Writes went on (how many depends on the machine's load: 68 inserts in 15 s at load 10).
    assert report["statuses"].get("POST 201", 0) > 20 and report["statuses"].get("DELETE 204", 0) > 20
    assert len(report["workers"]) == 3 and report["workers_alive_at_end"] == report["workers"]


@pytest.fixture(params=ENGINES)
def delete_app(request: pytest.FixtureRequest, tmp_path: Path):
    with migrated_database(request.param, tmp_path, "delete") as url:
        app = with_token(make_app(url))
        yield app
        app.extensions["engine"].dispose()


def test_two_concurrent_deletes_of_one_order_are_one_204_and_one_404(delete_app) -> None:
    """Reading the order and then deleting it told both racers 204 (and made SQLAlchemy warn
    that its DELETE matched no row): one order, deleted "twice". Only one of them deleted it."""
    client = authorized_client(delete_app)
    ids = [client.post("/api/orders", json={"customer": "Ana", "amount": "1"}).json["id"] for _ in range(30)]
    outcomes: Counter[tuple[int, ...]] = Counter()
    for order_id in ids:
        start = threading.Barrier(2)
        statuses: list[int] = []

        def delete(
            order_id: str = order_id, start: threading.Barrier = start, statuses: list[int] = statuses
        ):
            start.wait()
            statuses.append(authorized_client(delete_app).delete(f"/api/orders/{order_id}").status_code)

        racers = [threading.Thread(target=delete) for _ in range(2)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(30)
        outcomes[tuple(sorted(statuses))] += 1
    assert outcomes == {(204, 404): len(ids)}, outcomes
    assert delete_app.extensions["engine"].pool.checkedout() == 0
