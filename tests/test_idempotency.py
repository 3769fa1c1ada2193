"""POST /api/orders with an Idempotency-Key (orders/writing/idempotency.py), on every engine: a retry of a
write whose answer was lost creates nothing and answers the first 201 again; a key reused for
another body is refused; concurrent retries create one order. tests/test_failover.py retries
keyed writes across a switchover."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orders.data.models import IdempotencyKey, Order
from orders.writing import idempotency

ORDER = {"customer": "Ana", "amount": "12.50", "status": "paid"}


def count(engine, customer: str = "Ana") -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).where(Order.customer == customer)) or 0


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def at_once(app: Flask, key: str, clients: int) -> list[tuple[int, object]]:
    """`clients` threads send the same keyed POST at once; each one's status and order id."""
    start = threading.Barrier(clients)
    answers: list[tuple[int, object]] = []
    lock = threading.Lock()

    def post() -> None:
        client = app.test_client()
        start.wait()
        response = client.post("/api/orders", json=ORDER, headers=keyed(key))
        with lock:
            answers.append((response.status_code, response.json.get("id", response.json)))

    threads = [threading.Thread(target=post) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_a_retry_with_the_same_key_creates_nothing_and_answers_the_first_201(client, engine):
    key = str(uuid.uuid4())
    first = client.post("/api/orders", json=ORDER, headers=keyed(key))
    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first.headers
    for _ in range(3):
        again = client.post("/api/orders", json=ORDER, headers=keyed(key))
        assert again.status_code == 201
        assert again.json == first.json
        assert again.headers["Location"] == first.headers["Location"]
        assert again.headers["Idempotent-Replayed"] == "true"
    assert count(engine) == 1
    # The key is the client's: another key is another order, and so is a POST without one.
    assert client.post("/api/orders", json=ORDER, headers=keyed(str(uuid.uuid4()))).status_code == 201
    assert client.post("/api/orders", json=ORDER).status_code == 201
    assert client.post("/api/orders", json=ORDER).status_code == 201
    assert count(engine) == 4


def test_keys_are_case_sensitive(client, engine):
    assert client.post("/api/orders", json=ORDER, headers=keyed("Retry-abc")).status_code == 201
    other = client.post("/api/orders", json=ORDER, headers=keyed("retry-ABC"))
    assert other.status_code == 201 and "Idempotent-Replayed" not in other.headers
    assert count(engine) == 2


def test_a_replay_after_the_order_was_deleted_does_not_bring_it_back(client, engine):
    key = str(uuid.uuid4())
    first = client.post("/api/orders", json=ORDER, headers=keyed(key))
    assert client.delete(first.headers["Location"]).status_code == 204
    again = client.post("/api/orders", json=ORDER, headers=keyed(key))
    assert again.status_code == 201 and again.json == first.json
    assert again.headers["Idempotent-Replayed"] == "true"
    assert count(engine) == 0


def test_the_same_key_with_another_body_is_refused(client, engine):
    key = str(uuid.uuid4())
    assert client.post("/api/orders", json=ORDER, headers=keyed(key)).status_code == 201
    other = client.post("/api/orders", json={**ORDER, "amount": "99.00"}, headers=keyed(key))
    assert other.status_code == 422
    assert other.json["error"]["code"] == "invalid_order"
    assert "Idempotency-Key" in other.json["error"]["errors"]
    assert count(engine) == 1


def test_an_invalid_order_does_not_use_up_its_key(client, engine):
    key = str(uuid.uuid4())
    assert client.post("/api/orders", json={"customer": ""}, headers=keyed(key)).status_code == 422
    assert client.post("/api/orders", json=ORDER, headers=keyed(key)).status_code == 201
    assert count(engine) == 1


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there"])
def test_invalid_keys_are_422_and_create_nothing(client, engine, key):
    response = client.post("/api/orders", json=ORDER, headers=keyed(key))
    assert response.status_code == 422, response.json
    assert response.json["error"]["code"] == "invalid_order"
    assert "Idempotency-Key" in response.json["error"]["errors"]
    assert count(engine) == 0


def test_the_longest_key_is_accepted(client, engine):
    assert client.post("/api/orders", json=ORDER, headers=keyed("k" * 255)).status_code == 201
    assert client.post("/api/orders", json=ORDER, headers=keyed("k" * 255)).status_code == 201
    assert count(engine) == 1


def test_concurrent_requests_with_one_key_create_one_order(app, engine):
    """Eight clients send the same keyed POST at once: the database's unique key lets one
    transaction commit; the others wait for it, fail their insert and answer its 201."""
    key = str(uuid.uuid4())
    answers = at_once(app, key, 8)
    assert {status for status, _ in answers} == {201}, answers
    assert len({order_id for _, order_id in answers}) == 1, answers
    assert count(engine) == 1


def test_expired_keys_are_pruned_and_then_create_anew(app, client, engine, monkeypatch):
    old = str(uuid.uuid4())
    first = client.post("/api/orders", json=ORDER, headers=keyed(old))
    hours = app.config["IDEMPOTENCY_KEY_HOURS"]
    with Session(engine) as session:
        row = session.get(IdempotencyKey, idempotency._sha256(old))
        assert row is not None
        row.created_at = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours, minutes=1)
        session.commit()
    monkeypatch.setattr(idempotency, "PRUNE_EVERY", 1)  # prune after the next keyed POST
    assert client.post("/api/orders", json=ORDER, headers=keyed(str(uuid.uuid4()))).status_code == 201
    with Session(engine) as session:
        assert session.get(IdempotencyKey, idempotency._sha256(old)) is None
    again = client.post("/api/orders", json=ORDER, headers=keyed(old))
    assert again.status_code == 201 and again.json["id"] != first.json["id"]
    assert "Idempotent-Replayed" not in again.headers
    assert count(engine) == 3


def age(engine, key: str, hours: float) -> None:
    with Session(engine) as session:
        row = session.get(IdempotencyKey, idempotency._sha256(key))
        assert row is not None
        row.created_at = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours)
        session.commit()


def test_a_key_past_its_lifetime_never_replays_even_before_it_is_pruned(app, client, engine, monkeypatch):
    """The lifetime holds when the key is read: pruning runs on one keyed POST in PRUNE_EVERY
    per process, and a key a day and a minute old replayed the old order until then."""
    monkeypatch.setattr(idempotency, "PRUNE_EVERY", 10**9)  # never pruned in this test
    hours = app.config["IDEMPOTENCY_KEY_HOURS"]
    old, young = str(uuid.uuid4()), str(uuid.uuid4())
    first_old = client.post("/api/orders", json=ORDER, headers=keyed(old))
    first_young = client.post("/api/orders", json=ORDER, headers=keyed(young))
    age(engine, old, hours + 1 / 60)
    age(engine, young, hours - 1 / 60)
    again = client.post("/api/orders", json=ORDER, headers=keyed(old))
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    assert again.json["id"] != first_old.json["id"]
    # The key now answers for the new order, for a new lifetime; the younger key still replays.
    replay = client.post("/api/orders", json=ORDER, headers=keyed(old))
    assert replay.headers["Idempotent-Replayed"] == "true" and replay.json["id"] == again.json["id"]
    young_again = client.post("/api/orders", json=ORDER, headers=keyed(young))
    assert young_again.headers["Idempotent-Replayed"] == "true"
    assert young_again.json["id"] == first_young.json["id"]
    # An expired key is free for another body too: it is forgotten, not reused by mistake.
    age(engine, old, hours + 1)
    other = client.post("/api/orders", json={**ORDER, "amount": "99.00"}, headers=keyed(old))
    assert other.status_code == 201 and "Idempotent-Replayed" not in other.headers
    assert count(engine) == 4


def test_concurrent_retries_of_an_expired_key_create_one_new_order(app, engine):
    key = str(uuid.uuid4())
    first = app.test_client().post("/api/orders", json=ORDER, headers=keyed(key))
    age(engine, key, app.config["IDEMPOTENCY_KEY_HOURS"] + 1)
    answers = at_once(app, key, 6)
    assert {status for status, _ in answers} == {201}, answers
    ids = {order_id for _, order_id in answers}
    assert len(ids) == 1 and first.json["id"] not in ids, answers
    assert count(engine) == 2
