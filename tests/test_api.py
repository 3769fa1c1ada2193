"""The JSON API as docs/http-api.md describes it, on every engine.

Writes send the bearer token (tests/fixtures.py); the rate limits are on, sized for a test client.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest

from .fixtures import authorized_client, with_token
from .helpers import BASE, add_orders, seed_ties, walk_api

pytestmark = pytest.mark.usefixtures("app")


@pytest.fixture
def client(app):
    return authorized_client(with_token(app))


def test_items_have_the_contract_shape(client, engine):
    add_orders(engine, [(BASE.replace(microsecond=123456), "Ana", Decimal("12.30"), "paid")])
    body = client.get("/api/orders").json
    assert body["has_more"] is False and body["has_previous"] is False
    assert body["next_cursor"] is None and body["prev_cursor"] is None
    (item,) = body["items"]
    assert item == {
        "id": item["id"],
        "customer": "Ana",
        "amount": "12.30",
        "status": "paid",
        "created_at": "2026-03-11T10:39:00.123456Z",
    }
    assert isinstance(item["id"], str) and item["id"].isdigit()


def test_walk_returns_every_row_once_in_order_for_each_sort_and_filter(client, engine):
    ids = seed_ties(engine)
    for sort in ("newest", "oldest", "amount", "customer"):
        for status in (None, "paid"):
            params = {"sort": sort, "limit": 7, **({"status": status} if status else {})}
            items = walk_api(client, **params)
            got = [int(i["id"]) for i in items]
            assert len(got) == len(set(got))
            if status is None:
                assert sorted(got) == sorted(ids)
            else:
                assert {i["status"] for i in items} == {status}
    newest = walk_api(client, limit=7)
    keys = [(i["created_at"], int(i["id"])) for i in newest]
    assert keys == sorted(keys, reverse=True)


def test_walk_while_others_insert_and_delete(client, engine):
    ids = seed_ties(engine, 120)
    rng = random.Random(7)
    existing = set(ids)
    deleted: set[int] = set()

    def others_write() -> None:
        # Someone inserts: newer than everything, tied with rows ahead, and behind the reader.
        for minutes in (-1, rng.randint(0, 18), 30):
            created = (BASE - dt.timedelta(minutes=minutes)).isoformat()
            order = {"customer": "new", "amount": "1.00", "created_at": created}
            new = client.post("/api/orders", json=order)
            assert new.status_code == 201
            existing.add(int(new.json["id"]))
        # Someone deletes: a row already shown and a row not yet shown.
        for victim in rng.sample(sorted(existing - deleted), 2):
            assert client.delete(f"/api/orders/{victim}").status_code == 204
            deleted.add(victim)

    seen = walk_api(client, others_write, limit=9)
    got = [int(i["id"]) for i in seen]
    assert len(got) == len(set(got)), "a row was returned twice"
    assert set(ids) - deleted <= set(got), "a row that existed throughout was skipped"
    keys = [(i["created_at"], int(i["id"])) for i in seen]
    assert keys == sorted(keys, reverse=True), "the order went backwards"


def test_previous_pages_walk_back_to_the_first(client, engine):
    seed_ties(engine, 45)
    forward = walk_api(client, limit=10)
    body = client.get("/api/orders", query_string={"limit": 10}).json
    while body["has_more"]:
        last = body
        body = client.get("/api/orders", query_string={"limit": 10, "after": body["next_cursor"]}).json
    back = body["items"]
    del last
    while body["has_previous"]:
        body = client.get("/api/orders", query_string={"limit": 10, "before": body["prev_cursor"]}).json
        back = body["items"] + back
    assert back == forward


def test_cursor_of_a_deleted_row_still_continues_the_walk(client, engine):
    seed_ties(engine, 30)
    first = client.get("/api/orders", query_string={"limit": 10}).json
    client.delete(f"/api/orders/{first['items'][-1]['id']}")  # the row the cursor points at
    second = client.get("/api/orders", query_string={"limit": 10, "after": first["next_cursor"]}).json
    full = walk_api(client, limit=30)
    expected_ids = [i["id"] for i in full]
    assert [i["id"] for i in second["items"]] == expected_ids[9:19]


def test_has_previous_only_when_a_previous_row_exists(client, engine):
    seed_ties(engine, 30)
    first = client.get("/api/orders", query_string={"limit": 10}).json
    for item in first["items"]:
        client.delete(f"/api/orders/{item['id']}")
    second = client.get("/api/orders", query_string={"limit": 10, "after": first["next_cursor"]}).json
    assert second["has_previous"] is False and second["prev_cursor"] is None
    assert len(second["items"]) == 10


@pytest.mark.parametrize(
    "query",
    [
        "limit=0",
        "limit=101",
        "limit=-1",
        "limit=abc",
        "limit=1.5",
        "limit=",
        "limit=%EF%BC%95",  # a full-width digit five
        "limit=5&limit=6",
        "sort=price",
        "status=lost",
        "after=x&before=y",
        "sort=newest&sort=oldest",
    ],
)
def test_bad_parameters_are_400_invalid_parameter(client, query):
    response = client.get(f"/api/orders?{query}")
    assert response.status_code == 400
    assert response.json["error"]["code"] == "invalid_parameter"
    assert response.json["error"]["message"]


def test_limit_default_and_bounds(client, engine):
    seed_ties(engine, 120)
    assert len(client.get("/api/orders").json["items"]) == 20
    assert len(client.get("/api/orders?limit=1").json["items"]) == 1
    assert len(client.get("/api/orders?limit=100").json["items"]) == 100


def test_cursor_errors_are_typed(client, engine):
    seed_ties(engine, 30)
    body = client.get("/api/orders", query_string={"limit": 5}).json
    cursor = body["next_cursor"]
    cases = {
        f"after={cursor[:-2]}": "invalid_cursor",
        "after=garbage": "invalid_cursor",
        f"after={'A' * 10_000}": "invalid_cursor",
        "after=%C3%A9": "invalid_cursor",
        f"after={cursor}&sort=oldest": "cursor_mismatch",
        f"after={cursor}&status=paid": "cursor_mismatch",
        f"before={cursor}": "cursor_mismatch",
    }
    for query, code in cases.items():
        response = client.get(f"/api/orders?{query}")
        assert response.status_code == 400, query
        assert response.json["error"]["code"] == code, query


def test_one_order_create_and_delete(client):
    response = client.post(
        "/api/orders",
        json={"customer": "<script>alert('x')</script> \"Q\"", "amount": "12345678.90", "status": "paid"},
    )
    assert response.status_code == 201
    order = response.json
    assert response.headers["Location"] == f"/api/orders/{order['id']}"
    assert client.get(response.headers["Location"]).json == order
    page = client.get(f"/orders/{order['id']}").get_data(as_text=True)
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert client.delete(f"/api/orders/{order['id']}").status_code == 204
    assert client.get(f"/api/orders/{order['id']}").status_code == 404
    assert client.delete(f"/api/orders/{order['id']}").json["error"]["code"] == "not_found"
    assert client.get(f"/api/orders/{2**64}").status_code == 404


def test_create_with_exact_timestamp_and_amount(client):
    response = client.post(
        "/api/orders",
        json={"customer": "Ana", "amount": 7, "created_at": "2026-03-11T07:39:00.000001-03:00"},
    )
    assert response.status_code == 201, response.json
    assert response.json["created_at"] == "2026-03-11T10:39:00.000001Z"
    assert response.json["amount"] == "7.00"
    assert response.json["status"] == "pending"


@pytest.mark.parametrize(
    "written",
    ["2026-03-11t07:39:00.000001-03:00", "2026-03-11T10:39:00.000001z", "2026-03-11t10:39:00.000001z"],
)
def test_a_lowercase_t_or_z_is_rfc_3339_too(client, written):
    """The description's date-time is RFC 3339's, which allows a lowercase t and z (section 5.6):
    a 201 as for T and Z (a lowercase z was a 422)."""
    response = client.post("/api/orders", json={"customer": "Ana", "amount": 7, "created_at": written})
    assert response.status_code == 201, response.json
    assert response.json["created_at"] == "2026-03-11T10:39:00.000001Z"


@pytest.mark.parametrize(
    ("written", "message"),
    [
        # fromisoformat took these three as timestamps (a user's probe of the API found them)
        ("2026-12-05T10:00:00\u0000Z", "must be an ISO 8601 timestamp with a timezone"),
        ("2026-12-05T10:00:00.Z", "must be an ISO 8601 timestamp with a timezone"),
        ("2026-12-05T10:00:00+02:00:30", "needs a timezone of whole minutes (Z or ±hh:mm)"),
        # well formed, and not a time that can be stored: the message says which part
        ("2016-12-31T23:59:60Z", "a leap second (:60) cannot be stored: give :59.999999"),
        ("2025-02-29T12:00:00Z", "2025-02-29 is not a date"),
        ("2026-12-05T24:00:00Z", "24:00 is not a time of day: give 00:00 of the next day"),
    ],
)
def test_a_timestamp_is_refused_saying_what_is_wrong(client, written, message):
    response = client.post("/api/orders", json={"customer": "Ana", "amount": 7, "created_at": written})
    assert response.status_code == 422, response.json
    assert response.json["error"]["errors"] == {"created_at": message}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, {"customer", "amount"}),
        ({"customer": "", "amount": "1"}, {"customer"}),
        ({"customer": "x" * 65, "amount": "1"}, {"customer"}),
        ({"customer": "a\x00b", "amount": "1"}, {"customer"}),
        ({"customer": "Ana", "amount": "1.234"}, {"amount"}),
        ({"customer": "Ana", "amount": "-1"}, {"amount"}),
        ({"customer": "Ana", "amount": "1e20"}, {"amount"}),
        ({"customer": "Ana", "amount": "NaN"}, {"amount"}),
        ({"customer": "Ana", "amount": True}, {"amount"}),
        ({"customer": "Ana", "amount": "1", "status": "lost"}, {"status"}),
        ({"customer": "Ana", "amount": "1", "created_at": "2026-03-11T10:39:00"}, {"created_at"}),
        ({"customer": "Ana", "amount": "1", "created_at": "yesterday"}, {"created_at"}),
        ({"customer": "Ana", "amount": "1", "created_at": 5}, {"created_at"}),
        # Null is refused like a null status: it was taken as now (random OpenAPI examples).
        ({"customer": "Ana", "amount": "1", "created_at": None}, {"created_at"}),
        ({"customer": "Ana", "amount": "1", "status": None}, {"status"}),
        ({"customer": "Ana", "amount": "1", "id": "7"}, {"id"}),
    ],
)
def test_invalid_orders_are_422_with_field_errors(client, body, fields):
    response = client.post("/api/orders", json=body)
    assert response.status_code == 422
    assert response.json["error"]["code"] == "invalid_order"
    assert set(response.json["error"]["errors"]) == fields


def test_non_json_bodies_are_415_and_oversized_413(client):
    response = client.post("/api/orders", data="customer=Ana&amount=1")
    assert response.status_code == 415
    assert response.json["error"]["code"] == "unsupported_media_type"
    response = client.post("/api/orders", data="{not json", content_type="application/json")
    assert response.status_code == 422
    assert client.post("/api/orders", json=[1, 2]).status_code == 422
    response = client.post("/api/orders", data="x" * 100_000, content_type="application/json")
    assert response.status_code == 413
    assert response.json["error"]["code"] == "payload_too_large"
    # The same words as a chunked body's 413 (tests/test_security_doors.py), not werkzeug's.
    assert response.json["error"]["message"] == "the body is larger than 16384 bytes"


def test_health_and_headers(client):
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json == {"status": "ok"}
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"


def test_unknown_routes_and_methods_are_json_errors(client):
    assert client.get("/api/nothing").json["error"]["code"] == "not_found"
    # Which path, not werkzeug's advice to a person who typed a URL ("If you entered the URL
    # manually..."); an id that is not a number matches no route, and is told so the same way.
    for path in ("/api/nothing", "/api/orders/abc"):
        assert client.get(path).json["error"]["message"] == f"nothing is at {path!r}"
    page = client.get("/orders/abc")
    assert page.status_code == 404 and "nothing is at &#39;/orders/abc&#39;" in page.get_data(as_text=True)
    response = client.put("/api/orders")
    assert response.status_code == 405 and response.json["error"]["code"] == "method_not_allowed"


def test_an_empty_page_still_leads_back(client, engine):
    seed_ties(engine, 30)
    first = client.get("/api/orders", query_string={"limit": 10}).json
    everything = walk_api(client, limit=30)
    for item in everything[10:]:  # someone deletes every row after the cursor
        client.delete(f"/api/orders/{item['id']}")
    empty = client.get("/api/orders", query_string={"limit": 10, "after": first["next_cursor"]}).json
    assert empty["items"] == [] and empty["has_more"] is False and empty["has_previous"] is True
    back = client.get("/api/orders", query_string={"limit": 10, "before": empty["prev_cursor"]}).json
    # The way back includes the cursor's own row: the last row of the first page.
    assert back["items"] == first["items"] and back["has_previous"] is False and back["has_more"] is False
