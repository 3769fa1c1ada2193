"""Input that is valid JSON but misleading: one strict grammar for names, amounts, ids and dates."""

from __future__ import annotations

import datetime as dt
import re
import unicodedata

import pytest
from flask import Flask

from .fixtures import authorized_client, make_app, migrated, with_token


@pytest.fixture
def app(tmp_path) -> Flask:
    url = f"sqlite:///{tmp_path / 'input.db'}"
    migrated(url)
    app = with_token(make_app(url))
    yield app
    app.extensions["engine"].dispose()


@pytest.fixture
def client(app: Flask):
    return authorized_client(app)


def post_raw(client, body: str):
    return client.post("/api/orders", data=body.encode(), content_type="application/json")


@pytest.mark.parametrize(
    "customer",
    [
        "\u200b\u200b",  # zero-width spaces only
        "\u200d\ufeff\u2060",  # joiners and a BOM only
        "\ue000",  # private use alone: shows only in a font made for it
        "\uffff",  # a noncharacter
        "Ana\ufdd0",  # a noncharacter within a name
        "\u3164",  # Hangul filler: a letter that shows nothing
        "\u2800",  # braille blank
        "\u0301",  # a combining accent on nothing
        "evil\u202etxt.exe",  # right-to-left override
        "\u2066isolated\u2069",  # isolates
        "\u202aembedded\u202c",
        "a\u009bb",  # C1 control (CSI)
        "a\x85b",  # C1 next line
        "a\x1bb",  # C0 escape
        "line\u2028break",
        "para\u2029break",
        "tab\there",
        " ",
        "",
    ],
)
def test_misleading_names_are_refused(client, customer: str) -> None:
    response = client.post("/api/orders", json={"customer": customer, "amount": "1.00"})
    assert response.status_code == 422, customer
    assert set(response.json["error"]["errors"]) == {"customer"}


def test_names_are_stored_in_nfc(client) -> None:
    composed, decomposed = "Jos\u00e9", "Jose\u0301"
    a = client.post("/api/orders", json={"customer": decomposed, "amount": "1.00"}).json
    b = client.post("/api/orders", json={"customer": composed, "amount": "1.00"}).json
    assert a["customer"] == b["customer"] == composed == unicodedata.normalize("NFC", decomposed)
    # Readable names with format characters that belong in them stay as sent.
    for name in ("O\u2019Brien", "\u0645\u062d\u0645\u062f", "a\u200db", "  Ana  ", "\u00adAna"):
        response = client.post("/api/orders", json={"customer": name, "amount": "1"})
        assert response.status_code == 201, name
        assert response.json["customer"] == unicodedata.normalize("NFC", name).strip()
    # Zero-width marks at either end are taken off with the spaces: one customer "Ana", not two
    # that look alike; a joiner within a name stays.
    for name, stored in (("\ufeffAna", "Ana"), (" \u200bAna\u200d ", "Ana"), ("a" + "\u200d" * 63, "a")):
        response = client.post("/api/orders", json={"customer": name, "amount": "1"})
        assert (response.status_code, response.json["customer"]) == (201, stored), name


@pytest.mark.parametrize(
    "amount",
    [
        '"-0.00"',
        '"-0"',
        '"-1"',
        '"1_000"',
        '"1,000"',
        '"\u0661\u0662"',  # Arabic-Indic digits
        '"\uff11\uff12"',  # full-width digits
        '"\u00bd"',
        '"12."',
        '".5"',
        '"0012"',
        '"1e2"',
        '" 12"',
        '"12.345"',
        '"0.30000000000000001"',
        "0.30000000000000001",  # the same text as a JSON number: the same answer
        "-0.00",
        "-0",
        "1e2",
        "1E+2",
        "12.345",
        "10000000000",
        "NaN",
        "Infinity",
        "true",
        "null",
        '"99999999999"',
    ],
)
def test_amounts_follow_one_grammar_for_strings_and_numbers(client, amount: str) -> None:
    response = post_raw(client, f'{{"customer": "Ana", "amount": {amount}}}')
    assert response.status_code == 422, amount
    errors = response.json["error"]["errors"]
    assert set(errors) & {"amount", "body"}, (amount, errors)


@pytest.mark.parametrize(
    ("amount", "stored"),
    [
        ('"12.30"', "12.30"),
        ("12.30", "12.30"),
        ('"12.3"', "12.30"),
        ("12.3", "12.30"),
        ("12", "12.00"),
        ('"0"', "0.00"),
        ("0", "0.00"),
        ("0.1", "0.10"),  # exactly 0.10: never read through a binary float
        ('"9999999999.99"', "9999999999.99"),
        ("9999999999.99", "9999999999.99"),
    ],
)
def test_amounts_accepted_by_that_grammar(client, amount: str, stored: str) -> None:
    response = post_raw(client, f'{{"customer": "Ana", "amount": {amount}}}')
    assert response.status_code == 201, response.json
    assert response.json["amount"] == stored


def test_json_that_python_would_bend_is_refused(client) -> None:
    duplicate = post_raw(client, '{"customer": "Ana", "amount": "1", "amount": "2"}')
    assert duplicate.status_code == 422 and "twice" in duplicate.json["error"]["errors"]["body"]
    huge = post_raw(client, '{"customer": "Ana", "amount": ' + "9" * 5000 + "}")
    assert huge.status_code == 422
    not_utf8 = client.post(
        "/api/orders", data=b'{"customer": "\xff", "amount": "1"}', content_type="application/json"
    )
    assert not_utf8.status_code == 422


@pytest.mark.parametrize(
    "segment",
    ["\u0661\u0662", "\uff11\uff12", "\u0967", "012", "0", "+12", "12 ", "1_2", "9" * 20, str(2**63)],
)
def test_ids_in_paths_are_ascii_digits_only(client, segment: str) -> None:
    for _ in range(12):
        client.post("/api/orders", json={"customer": "Ana", "amount": "1"})
    assert client.get("/api/orders/12").status_code == 200 and client.get("/orders/12").status_code == 200
    for path in (f"/api/orders/{segment}", f"/orders/{segment}"):
        assert client.get(path).status_code == 404, path
    assert client.delete(f"/api/orders/{segment}").status_code == 404
    assert client.get("/api/orders/12").status_code == 200  # nothing was deleted


# --- created_at: bounded, and the "N new orders" banner stays honest ------------------------------


def count_in_banner(client, url: str) -> int:
    text = client.get(url).get_data(as_text=True)
    match = re.search(r"(\d+)\+? new order", text)
    return int(match.group(1)) if match else 0


def test_future_dates_are_refused(client, app: Flask) -> None:
    now = dt.datetime.now(dt.UTC)
    skew = app.config["CREATED_AT_MAX_SKEW_SECONDS"]
    for ahead in (dt.timedelta(seconds=skew + 60), dt.timedelta(days=365 * 7000)):  # 9998 at most
        order = {"customer": "Top", "amount": "1", "created_at": (now + ahead).isoformat()}
        response = client.post("/api/orders", json=order)
        assert response.status_code == 422 and set(response.json["error"]["errors"]) == {"created_at"}
    ahead = (now + dt.timedelta(seconds=skew / 2)).isoformat()
    assert (
        client.post("/api/orders", json={"customer": "Ana", "amount": "1", "created_at": ahead}).status_code
        == 201
    )
    past = {"customer": "Bo", "amount": "1", "created_at": "2001-01-01T00:00:00Z"}
    response = client.post("/api/orders", json=past)  # backdating is fine: it appears in its place
    assert response.status_code == 201 and response.json["created_at"] == "2001-01-01T00:00:00.000000Z"


def test_the_banner_counts_every_order_made_after_the_top_row(client, app: Flask) -> None:
    """A reader opens the list; every order made afterwards is counted. (Were future dates
    accepted, an order dated 9998 would be the top row forever and the count would stay 0; the
    bound leaves at most CREATED_AT_MAX_SKEW_SECONDS during which a new order sorts below the
    top row. Set to 0 here so the test does not depend on the clock.)"""
    app.config["CREATED_AT_MAX_SKEW_SECONDS"] = 0
    stale = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    assert (
        client.post("/api/orders", json={"customer": "Top", "amount": "1", "created_at": stale}).status_code
        == 422
    )
    assert client.post("/api/orders", json={"customer": "Top", "amount": "1"}).status_code == 201
    page = client.get("/orders").get_data(as_text=True)
    banner_url = re.search(r'hx-get="(/orders/new\?[^"]+)"', page).group(1).replace("&amp;", "&")
    assert count_in_banner(client, banner_url) == 0
    for _ in range(3):
        assert client.post("/api/orders", json={"customer": "New", "amount": "1"}).status_code == 201
    assert count_in_banner(client, banner_url) == 3
