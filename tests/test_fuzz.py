"""Fuzzing the HTTP edge: whatever a client sends, the answer is a documented status, never a 5xx.

Query strings are built raw (duplicated parameters, both `after` and `before`, non-UTF-8
percent-escapes, huge values) and sent to every list endpoint: the JSON API, the full page,
the htmx fragment, the new-orders banner and the CSV export. Cursors are genuine ones sealed
with the app's key (random in-range positions), mutated ones (bit flips, truncation,
re-encoding, swapped tags), ones sealed with another key, and junk. An independent
oracle decides the answer: 200 when every parameter is valid, else 400 with one of the codes
of the problems present. Bodies for POST /api/orders get 201, 413, 415 or 422 only.

Budgets are fixed and derandomized so CI runs the same examples every time: SQLite takes the
bulk, PostgreSQL and MariaDB a smaller share of each budget. `make hunt` multiplies them and
draws new examples (tests/hunt.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import unicodedata
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import pytest
from flask import Flask
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from werkzeug.wrappers import Request

from orders.data.db import make_engine
from orders.data.models import CUSTOMER_MAX_LENGTH, STATUSES
from orders.exports.csv_format import CSV_COLUMNS
from orders.finding.sorts import LIBRARY_SORTS
from orders.writing.grammar import BIDI_CONTROLS, BLANK_LOOKING, MAX_AMOUNT
from pagination import AFTER, BEFORE, CursorCodec, Position, filters_fingerprint

from .databases import ENGINES, migrated_database
from .fixtures import SECRET, authorized_client, make_app, with_token
from .helpers import BASE, add_orders
from .hunt import DERANDOMIZE, examples

UTC = dt.UTC
# Share of each example budget per engine: the HTTP edge is the same code on all of them, the
# engines differ in how they bind and compare the values a cursor carries (PostgreSQL 18 binds
# through the same driver as 15: half the share, for what its server compares differently).
BUDGET_SHARE = {"sqlite": 1.0, "postgresql": 0.12, "postgresql18": 0.06, "mysql": 0.12}
LIST_PARAMS = ("sort", "status", "limit", "after", "before")
TARGETS: dict[str, dict[str, Any]] = {
    "api": {"path": "/api/orders", "params": LIST_PARAMS, "budget": 1000},
    "page": {"path": "/orders", "params": (*LIST_PARAMS, "page"), "budget": 400},
    "fragment": {"path": "/orders", "params": (*LIST_PARAMS, "page"), "budget": 400, "htmx": True},
    "new": {"path": "/orders/new", "params": LIST_PARAMS, "budget": 250},
    "export": {"path": "/orders/export.csv", "params": LIST_PARAMS, "budget": 250},
}
API_ERROR_CODES = {"invalid_cursor", "cursor_mismatch", "invalid_parameter"}


# --- The app under test, one throwaway database per engine --------------------------------


@pytest.fixture(scope="module", params=ENGINES)
def fuzz_app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """An app on a database with 60 orders, many tied on created_at, every status present."""
    with migrated_database(request.param, tmp_path_factory.mktemp("fuzz"), "fuzz") as url:
        engine = make_engine(url)
        rows = [
            (
                BASE - dt.timedelta(minutes=i // 7),
                f"cust {i % 9} ção",
                Decimal(i % 11) + Decimal("0.25"),
                STATUSES[i % len(STATUSES)],
            )
            for i in range(60)
        ]
        add_orders(engine, rows)
        engine.dispose()
        # Writes need the token; the rate limits are on, with budgets for a fuzzer's thousands of
        # requests a minute from one address.
        app = with_token(make_app(url))
        app.config["ENGINE_KIND"] = request.param
        yield app
        app.extensions["engine"].dispose()


def run(app: Flask, budget: int, test: Callable[..., None], **strategies: Any) -> None:
    """Run `test` as a Hypothesis test with this engine's share of a fixed, derandomized budget
    (unless hunting: tests/hunt.py)."""
    share = examples(max(20, round(budget * BUDGET_SHARE[app.config["ENGINE_KIND"]])))
    fixed = settings(
        max_examples=share,
        derandomize=DERANDOMIZE,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    fixed(given(**strategies)(test))()


def no_leak(app: Flask) -> None:
    assert app.extensions["engine"].pool.checkedout() == 0, "a request leaked a database connection"


# --- Cursors: genuine, mutated, foreign, junk ----------------------------------------------

CODEC = CursorCodec(SECRET)
FOREIGN = CursorCodec("another-deployment-secret-0123456789-abcdefghij")
ids = st.integers(1, 2**63 - 1)
timestamps = st.datetimes(
    min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(9998, 12, 30), timezones=st.just(UTC)
)
amounts = st.decimals(min_value=0, max_value=MAX_AMOUNT, places=2)


def _valid_name(text: str) -> bool:
    """The oracle's reading of the README's rule for names: NFC, trimmed, at most 64 characters,
    something visible, no bidi overrides or isolates (controls and line separators are not drawn)."""
    name = unicodedata.normalize("NFC", text).strip()
    visible = any(
        unicodedata.category(ch) not in ("Cf", "Zs", "Mn", "Me") and ch not in BLANK_LOOKING for ch in name
    )
    return bool(name) and visible and len(name) <= CUSTOMER_MAX_LENGTH and not BIDI_CONTROLS & set(name)


customers = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=CUSTOMER_MAX_LENGTH
).filter(lambda s: s.strip() == s and _valid_name(s))
FIRST_KEY = {"newest": timestamps, "oldest": timestamps, "amount": amounts, "customer": customers}


@st.composite
def positions(
    draw: st.DrawFn, sort: str | None = None, direction: str | None = None, status: str | None = ""
) -> Position:
    """A position any page of this app could have handed out: in-range keys of the right types."""
    sort = sort or draw(st.sampled_from(list(LIBRARY_SORTS)))
    if status == "":
        status = draw(st.sampled_from([None, *STATUSES]))
    return Position(
        sort=sort,
        direction=direction or draw(st.sampled_from([AFTER, BEFORE])),
        filters=filters_fingerprint({"status": status}),
        keys=(draw(FIRST_KEY[sort]), draw(ids)),
        inclusive=draw(st.booleans()),
    )


def meta(position: Position) -> tuple[str, str, str]:
    return (position.sort, position.direction, position.filters)


@st.composite
def genuine(draw: st.DrawFn) -> tuple[str, tuple[str, str, str]]:
    position = draw(positions())
    return CODEC.encode(position), meta(position)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A genuine cursor changed in one of the ways a client, a proxy or an attacker would."""
    cursor, _ = draw(genuine())
    # A sealed cursor is base64url(version, nonce, ciphertext, 16-byte tag): the tag plays the
    # part a signature played in signed cursors.
    raw = _unb64(cursor)
    payload, signature = raw[:-16], raw[-16:]
    i = draw(st.integers(0, len(cursor) - 1))
    how = draw(
        st.sampled_from(
            [
                "flip_char_bit",
                "truncate",
                "delete_char",
                "insert_char",
                "swap_chars",
                "swap_case",
                "standard_base64",
                "padded",
                "payload_bit",
                "signature_bit",
                "version_byte",
                "other_signature",
                "no_signature",
                "doubled",
                "percent_literal",
                "whitespace",
                "signature_alias",
            ]
        )
    )
    if how == "flip_char_bit":
        result = cursor[:i] + chr(ord(cursor[i]) ^ (1 << draw(st.integers(0, 6)))) + cursor[i + 1 :]
    elif how == "truncate":
        result = cursor[:i]
    elif how == "delete_char":
        result = cursor[:i] + cursor[i + 1 :]
    elif how == "insert_char":
        result = cursor[:i] + draw(st.characters()) + cursor[i:]
    elif how == "swap_chars":
        j = min(i + 1, len(cursor) - 1)
        result = cursor[:i] + cursor[j] + cursor[i] + cursor[j + 1 :]
    elif how == "swap_case":
        result = cursor[:i] + cursor[i].swapcase() + cursor[i + 1 :]
    elif how == "standard_base64":
        result = cursor.replace("-", "+").replace("_", "/")
    elif how == "padded":
        result = cursor + "=" * (-len(cursor) % 4 or 4)
    elif how == "payload_bit":
        data = bytearray(payload)
        data[i % len(data)] ^= 1 << draw(st.integers(0, 7))
        result = _b64(bytes(data) + signature)
    elif how == "signature_bit":
        sig = bytearray(signature)
        sig[i % len(sig)] ^= 1 << draw(st.integers(0, 7))
        result = _b64(payload + bytes(sig))
    elif how == "version_byte":
        result = _b64(bytes([draw(st.integers(0, 255).filter(lambda v: v != raw[0]))]) + raw[1:])
    elif how == "other_signature":
        other, _ = draw(genuine())
        result = _b64(payload + _unb64(other)[-16:])
    elif how == "no_signature":
        result = _b64(payload)
    elif how == "doubled":
        result = cursor + draw(st.sampled_from(["", "."])) + cursor
    elif how == "percent_literal":
        result = "".join(f"%{ord(c):02X}" for c in cursor)  # the server sees the escapes as text
    elif how == "whitespace":
        result = draw(st.sampled_from([" ", "\t", "\n", "\u00a0"])) + cursor
    else:  # signature_alias: same bytes, other spare bits in the last base64 character
        last = cursor[-1]
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        index = alphabet.index(last)
        result = cursor[:-1] + alphabet[index ^ draw(st.integers(1, 3))]
    assume(result != cursor)
    return result


junk_cursors = st.one_of(
    st.text(max_size=80),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=", max_size=120),
    st.integers(500, 20_000).map(lambda n: "A" * n + ".AAAA"),
    st.just(""),
)

# A cursor value: (text or raw bytes as sent, the (sort, direction, filters) it is valid for).
cursor_values = st.one_of(
    genuine(),
    mutated().map(lambda c: (c, None)),
    positions().map(lambda p: (FOREIGN.encode(p), None)),
    junk_cursors.map(lambda c: (c, None)),
    st.binary(max_size=40).map(lambda b: (b, None)),
)


# --- Raw query strings and the oracle --------------------------------------------------------


def junk(valid: list[str]) -> st.SearchStrategy[str | bytes]:
    """Mostly a valid value; otherwise a near miss, random text or raw non-UTF-8 bytes."""
    near = [v.upper() for v in valid if v] + [v + " " for v in valid if v] + [" " + v for v in valid if v]
    return st.one_of(
        *[st.sampled_from(valid)] * 6,
        st.sampled_from(near or ["x"]),
        st.text(max_size=20),
        st.binary(max_size=10),
    )


def number_texts(low: int, high: int) -> st.SearchStrategy[str | bytes]:
    return st.one_of(
        st.integers(low - 3, high + 3).map(str),
        *[st.integers(low, high).map(str)] * 4,
        st.sampled_from(
            # the last two: past CPython's 4,300 digits for int() of a string
            [
                "",
                "1.5",
                "1e2",
                "+5",
                " 5",
                "5 ",
                "0x10",
                "00007",
                "9" * 50,
                "٥",
                "５",
                "-0",
                "½",
                "9" * 4301,
                "0" * 4400 + "7",
            ]
        ),
        st.text(max_size=8),
        st.binary(max_size=6),
    )


VALUE_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "sort": junk(["", *LIBRARY_SORTS]),
    "status": junk(["", *STATUSES]),
    "limit": number_texts(1, 100),
    "page": number_texts(1, 1_000_000),
}


def encode_value(value: str | bytes, style: str) -> str:
    raw = value.encode() if isinstance(value, str) else value
    if style == "every_byte":  # legal, if odd: the server decodes it to the same value
        return "".join(f"%{b:02X}" for b in raw)
    return quote(raw, safe="")


@st.composite
def raw_queries(draw: st.DrawFn, names: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """A raw query string with each parameter absent, once, or twice, in a random order."""
    pairs: list[tuple[str, str | bytes]] = []
    known: dict[str, Any] = {}
    for name in names:
        for _ in range(
            draw(
                st.sampled_from(
                    [0, 0, 0, 0, 1, 1, 1, 1, 2]
                    if name in ("after", "before")
                    else [0, 0, 0, 1, 1, 1, 1, 1, 1, 2]
                )
            )
        ):
            if name in ("after", "before"):
                value, valid_for = draw(cursor_values)
                if valid_for is not None:
                    known[value] = valid_for
            else:
                value = draw(VALUE_STRATEGIES[name])
            pairs.append((name, value))
    pairs = draw(st.permutations(pairs))
    style = draw(st.sampled_from(["quote", "quote", "every_byte"]))
    query = "&".join(f"{quote(name)}={encode_value(value, style)}" for name, value in pairs)
    return query, known


def _valid_int(raw: str, low: int, high: int) -> bool:
    # Decimal, not int(): int() of a string refuses over 4,300 digits (number_texts sends more).
    return raw.isascii() and raw.isdigit() and low <= Decimal(raw) <= high


def expected_codes(target: str, query: str, known: dict[str, Any]) -> set[str]:
    """The error codes the request may get: empty when every parameter is valid (then 200).

    With several problems the server reports one of them (it checks in its own order).
    """
    try:
        unquote_to_bytes(query).decode("utf-8")
    except UnicodeDecodeError:
        return {"invalid_parameter"}  # checked before any parameter (orders/web/errors.py)
    args = Request.from_values(query_string=query).args  # what the server sees, decoded
    texts = [text for pair in args.items(multi=True) for text in pair]
    if any(unicodedata.category(ch) in ("Cc", "Cs") for text in texts for ch in text):
        return {
            "invalid_parameter"
        }  # one rule for every parameter, checked first (orders/finding/request.py)
    problems: set[str] = set()
    params = TARGETS[target]["params"]
    for name in params:
        if len(args.getlist(name)) > 1:
            problems.add("invalid_parameter")
    sort, status = args.get("sort") or "newest", args.get("status") or None
    if sort not in LIBRARY_SORTS or (status is not None and status not in STATUSES):
        problems.add("invalid_parameter")
    if "limit" in args and not _valid_int(args["limit"], 1, 100):
        problems.add("invalid_parameter")
    if "page" in params and "page" in args and not _valid_int(args["page"], 1, 1_000_000):
        problems.add("invalid_parameter")
    if "after" in args and "before" in args:
        problems.add("invalid_parameter")
    if target == "export" and "before" in args:
        problems.add("invalid_parameter")  # an export reads forward only
    if target == "new" and "after" in args:
        problems.add("invalid_parameter")  # the banner counts rows above a `before` position
    if problems:
        return problems  # the cursor is checked last: against valid sort and status only
    for direction in (AFTER, BEFORE):
        if direction not in args:
            continue
        valid_for = known.get(args[direction])
        if valid_for is None:
            problems.add("invalid_cursor")
        elif valid_for != (sort, direction, filters_fingerprint({"status": status})):
            problems.add("cursor_mismatch")
    return problems


def check_response(app: Flask, target: str, query: str, known: dict[str, Any]) -> int:
    spec = TARGETS[target]
    headers = {"HX-Request": "true"} if spec.get("htmx") else {}
    response = app.test_client().get(f"{spec['path']}?{query}", headers=headers)
    body = response.get_data()
    response.close()
    no_leak(app)
    codes = expected_codes(target, query, known)
    status = response.status_code
    assert status < 500, f"{status} for {spec['path']}?{query}: {body[:300]!r}"
    if not codes:
        assert status == 200, f"expected 200 for {query}, got {status}: {body[:300]!r}"
    else:
        assert status == 400, f"expected 400 {codes} for {query}, got {status}: {body[:300]!r}"
    if target == "api":
        payload = json.loads(body)
        if status == 200:
            assert set(payload) == {"items", "next_cursor", "prev_cursor", "has_more", "has_previous"}
            args = Request.from_values(query_string=query).args
            assert len(payload["items"]) <= Decimal(args.get("limit", 20))  # 7 sent with 4,400 zeros
            assert payload["has_more"] == (payload["next_cursor"] is not None)
            assert payload["has_previous"] == (payload["prev_cursor"] is not None)
        else:
            assert payload["error"]["code"] in codes & API_ERROR_CODES, (query, payload)
            assert payload["error"]["message"]
    elif target == "export" and status == 200:
        assert response.mimetype == "text/csv"
        assert body.decode().startswith(",".join(CSV_COLUMNS) + "\n")
    else:
        assert response.mimetype == "text/html", (query, response.mimetype)
        text = body.decode()
        if spec.get("htmx"):
            assert set(response.headers.get("Vary", "").split(", ")) >= {"HX-Request", "HX-Boosted"}
            assert "<html" not in text
            if status == 200 and "before" in Request.from_values(query_string=query).args:
                # Rows loaded above: the top sentinel, or (at the top) nothing but rows.
                assert 'id="more"' not in text and 'id="end-of-list"' not in text
            elif status == 200:
                assert 'id="more"' in text or 'id="end-of-list"' in text
        elif target == "page":
            assert "<footer" in text
    return status


# --- GET: random query strings on every list endpoint ----------------------------------------


@pytest.mark.parametrize("target", list(TARGETS))
def test_random_queries_get_a_documented_answer(fuzz_app: Flask, target: str) -> None:
    statuses: list[int] = []

    def one(query: tuple[str, dict[str, Any]]) -> None:
        statuses.append(check_response(fuzz_app, target, *query))

    run(fuzz_app, TARGETS[target]["budget"], one, query=raw_queries(TARGETS[target]["params"]))
    # The generator must reach both outcomes, or the oracle proves little.
    assert 200 in statuses and 400 in statuses, sorted(set(statuses))


@st.composite
def cursor_queries(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """Valid sort, status and limit; exactly one cursor parameter: the cursor decides alone."""
    sort = draw(st.sampled_from(list(LIBRARY_SORTS)))
    status = draw(st.sampled_from(["", *STATUSES]))
    direction = draw(st.sampled_from([AFTER, BEFORE]))
    # Half the time a genuine cursor that fits the request, which must page normally.
    if draw(st.booleans()):
        position = draw(positions(sort, direction, status or None))
        value, valid_for = CODEC.encode(position), meta(position)
    else:
        value, valid_for = draw(cursor_values)
    known = {value: valid_for} if valid_for is not None else {}
    pairs = [
        ("sort", sort),
        ("status", status),
        ("limit", str(draw(st.integers(1, 100)))),
        (direction, value),
    ]
    style = draw(st.sampled_from(["quote", "every_byte"]))
    return "&".join(f"{name}={encode_value(v, style)}" for name, v in pairs), known


@pytest.mark.parametrize("target", ["api", "fragment"])
def test_cursors_are_accepted_exactly_when_genuine_and_fitting(fuzz_app: Flask, target: str) -> None:
    seen: dict[int, int] = {}

    def one(query: tuple[str, dict[str, Any]]) -> None:
        status = check_response(fuzz_app, target, *query)
        seen[status] = seen.get(status, 0) + 1

    run(fuzz_app, 800 if target == "api" else 300, one, query=cursor_queries())
    assert seen.get(200) and seen.get(400), seen


@pytest.mark.parametrize("target", ["api", "page"])
def test_real_cursors_of_other_sorts_and_filters_are_mismatches(fuzz_app: Flask, target: str) -> None:
    """Cursors the server itself handed out, replayed with every other sort, status and direction."""
    client = fuzz_app.test_client()
    issued = []
    for sort in LIBRARY_SORTS:
        for status in ["", "paid"]:
            body = client.get("/api/orders", query_string={"sort": sort, "status": status, "limit": 5}).json
            after = body["next_cursor"]
            issued.append((after, (sort, AFTER, status)))
            before = client.get(
                "/api/orders", query_string={"sort": sort, "status": status, "limit": 5, "after": after}
            ).json["prev_cursor"]
            issued.append((before, (sort, BEFORE, status)))
    for cursor, (sort, direction, status) in issued:
        for other_sort in LIBRARY_SORTS:
            for other_status in ["", "paid", "shipped"]:
                for other_direction in (AFTER, BEFORE):
                    query = f"sort={other_sort}&status={other_status}&{other_direction}={cursor}"
                    fits = (sort, direction, status) == (other_sort, other_direction, other_status)
                    valid_for = (sort, direction, filters_fingerprint({"status": status or None}))
                    assert check_response(fuzz_app, target, query, {cursor: valid_for}) == (
                        200 if fits else 400
                    )


# --- POST /api/orders: random bodies and content types ----------------------------------------

VALID_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "customer": customers.map(lambda s: draw_spaces(s)),
    # Strings, integers and numbers with a fraction: one grammar for all of them.
    "amount": st.one_of(amounts.map(str), st.integers(0, 9_999_999_999), amounts.map(float)),
    "status": st.sampled_from(STATUSES),
    "created_at": st.builds(
        lambda t, minutes, sep, utc: rfc3339(
            t.astimezone(dt.timezone(dt.timedelta(minutes=minutes))), sep, utc
        ),
        st.datetimes(  # anything up to now (a client may backdate, never date ahead)
            min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2026, 1, 1), timezones=st.just(UTC)
        ),
        st.one_of(st.just(0), st.integers(-14 * 60, 14 * 60)),
        st.sampled_from("Tt"),
        st.sampled_from(["Z", "z", "+00:00"]),
    ),
}


def rfc3339(when: dt.datetime, sep: str, utc: str) -> str:
    """`when` as RFC 3339 writes it (the description's date-time): the separator T or t, UTC as
    Z, z or +00:00."""
    text = when.isoformat().replace("T", sep)  # the one T of isoformat() is the separator
    return text.removesuffix("+00:00") + utc if text.endswith("+00:00") else text


def read_rfc3339(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.removesuffix("z") + "Z" if text.endswith("z") else text)


def draw_spaces(text: str) -> str:
    return f" {text} " if len(text) % 3 == 0 else text  # surrounding spaces are trimmed, not refused


INVALID_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "customer": st.one_of(
        st.sampled_from(
            [
                *["", "   ", "x" * (CUSTOMER_MAX_LENGTH + 1), "a\x00b", "tab\there", "\ud800", "é\udfff"],
                "\u200b\u200b",
                "a\u202eb",
                "x\u009by",
                "\u3164",
                "\u2066y\u2069",
                "l\u2028l",
            ]
        ),
        st.integers(),
        st.lists(st.text(max_size=2), max_size=2),
        st.none(),
        st.booleans(),
    ),
    "amount": st.one_of(
        st.sampled_from(
            [
                *["1.234", "-1", "-0.01", "1e20", "NaN", "Infinity", "-Infinity", "", "abc", "1,00", "0x10"],
                "-0.00",
                "1_000",
                "\u0661\u0662",
                "\uff11",
                "0012",
                "0.30000000000000001",
                "12.",
                ".5",
            ]
        ),
        st.sampled_from([True, False, None, [], {}, 10**11, -1, 0.125, 1e300, 10**4000]),
    ),
    "status": st.one_of(
        st.sampled_from(["lost", "PAID", "", " paid"]), st.none(), st.integers(), st.lists(st.none())
    ),
    "created_at": st.one_of(
        st.sampled_from(
            [
                "2026-03-11T10:39:00",  # naive
                "yesterday",
                "",
                "1969-12-31T23:59:59Z",
                "9999-06-01T00:00:00Z",
                "9998-12-31T00:00:00Z",  # the future: would top "newest" for ever
                "2999-01-01T00:00:00+14:00",
                "0001-01-01T00:00:00+01:00",  # overflows when moved to UTC
                "2026-02-30T00:00:00Z",
            ]
        ),
        st.integers(),
        st.booleans(),
        st.lists(st.text(max_size=3), max_size=2),
        st.none(),  # left out it is now; null is refused, as a null status is
    ),
}


@st.composite
def order_bodies(draw: st.DrawFn) -> tuple[Any, set[str]]:
    """A JSON value to POST and the fields it gets wrong (empty: a valid order)."""
    fields: dict[str, Any] = {}
    wrong: set[str] = set()
    for name in ("customer", "amount", "status", "created_at"):
        choice = draw(st.sampled_from(["valid", "valid", "valid", "invalid", "absent"]))
        if choice == "absent":
            if name in ("customer", "amount"):
                wrong.add(name)
            continue
        if choice == "invalid":
            wrong.add(name)
        fields[name] = draw((VALID_FIELDS if choice == "valid" else INVALID_FIELDS)[name])
    for extra in draw(
        st.lists(st.sampled_from(["id", "Customer", "amount ", "notes", ""]), max_size=2, unique=True)
    ):
        fields[extra] = draw(st.text(max_size=5))
        wrong.add(extra)
    return fields, wrong


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
JSON_TYPES = ["application/json", "application/json; charset=utf-8", "application/merge-patch+json"]
OTHER_TYPES = [
    "text/plain",
    "",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
    "text/json",
    "json",
]
MAX_BODY = 16 * 1024


@st.composite
def post_requests(draw: st.DrawFn) -> tuple[bytes, str, set[str] | None]:
    """(body bytes, content type, wrong fields: None when the body is not an order object at all)."""
    kind = draw(st.sampled_from(["order", "order", "order", "json", "bytes", "deep", "bigint", "huge"]))
    wrong: set[str] | None = None
    if kind == "order":
        value, wrong = draw(order_bodies())
        body = json.dumps(value).encode()
    elif kind == "json":
        body = json.dumps(draw(json_values)).encode()
    elif kind == "bytes":
        body = draw(st.binary(max_size=200))
    elif kind == "deep":
        depth = draw(st.integers(100, 8000))
        body = (draw(st.sampled_from(["[", '{"a":'])) * depth).encode()
    elif kind == "bigint":  # past Python's 4300-digit limit for int() of a string
        body = b'{"customer": "Ana", "amount": ' + b"9" * draw(st.integers(4290, 6000)) + b"}"
    else:
        body = (
            b'{"customer": "' + b"x" * draw(st.integers(MAX_BODY - 40, 4 * MAX_BODY)) + b'", "amount": "1"}'
        )
    content_type = draw(st.sampled_from(JSON_TYPES * 3 + OTHER_TYPES))
    return body, content_type, wrong


def test_post_bodies_get_201_413_415_or_422(fuzz_app: Flask) -> None:
    client = authorized_client(fuzz_app)
    seen: dict[int, int] = {}

    def one(request: tuple[bytes, str, set[str] | None]) -> None:
        body, content_type, wrong = request
        response = client.post("/api/orders", data=body, content_type=content_type)
        no_leak(fuzz_app)
        status = response.status_code
        seen[status] = seen.get(status, 0) + 1
        described = f"{content_type!r} {body[:200]!r}"
        assert status in (201, 413, 415, 422), f"{status} for {described}: {response.get_data()[:300]!r}"
        is_json = content_type.split(";")[0] in ("application/json", "application/merge-patch+json")
        if not is_json:
            assert status == 415, described
        elif len(body) > MAX_BODY:
            assert status == 413, described
        elif wrong is not None:
            assert status == (422 if wrong else 201), (described, response.json)
        error = response.json.get("error") if status != 201 else None
        if status == 201:
            order = response.json
            assert client.get(response.headers["Location"]).json == order
            sent = json.loads(body)
            assert order["customer"] == unicodedata.normalize("NFC", sent["customer"]).strip()
            assert Decimal(order["amount"]) == Decimal(str(sent["amount"]))
            assert order["status"] == sent.get("status", "pending")
            if sent.get("created_at"):
                assert dt.datetime.fromisoformat(order["created_at"]) == read_rfc3339(sent["created_at"])
        else:
            codes = {413: "payload_too_large", 415: "unsupported_media_type", 422: "invalid_order"}
            assert error["code"] == codes[status] and error["message"]
            if status == 422 and wrong:
                assert set(error["errors"]) == wrong, (described, error)

    # Each answer once for certain, whatever this engine's share of the budget draws.
    one((b'{"customer": "Ana", "amount": "1"}', "application/json", set()))
    one((b'{"customer": "' + b"x" * MAX_BODY + b'", "amount": "1"}', "application/json", None))
    one((b'{"customer": "Ana", "amount": "1"}', "text/plain", None))
    one((b'{"customer": "Ana"}', "application/json", {"amount"}))
    run(fuzz_app, 800, one, request=post_requests())
    assert {201, 413, 415, 422} <= set(seen), seen


# --- One order by id: any path segment ---------------------------------------------------------


def test_order_ids_of_any_shape_are_found_or_404(fuzz_app: Flask) -> None:
    client = authorized_client(fuzz_app)
    known = client.get("/api/orders?limit=1").json["items"][0]["id"]
    # /orders/new, /orders/export.csv, /orders/stream: routes of their own, not order ids (the
    # stream's 503 under the test client was drawn once by random examples).
    routes = {
        rule.rule.removeprefix("/orders/")
        for rule in fuzz_app.url_map.iter_rules()
        if rule.rule.startswith("/orders/") and "<" not in rule.rule
    }
    assert {"new", "export.csv", "stream"} <= routes, routes
    segments = st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.integers(0, 10**30).map(lambda n: "0" * (n % 3) + str(n)),
        st.just(known),
        st.text(max_size=30).filter(lambda t: t not in ("", ".", "..")),
    )

    def one(segment: str, method: str) -> None:
        path = quote(segment, safe="")
        if method == "DELETE":
            assume(segment != known)  # keep the one known order for the GETs
            response = client.delete(f"/api/orders/{path}")
            assert response.status_code in (204, 404), (segment, response.status_code)
        else:
            response = client.get(f"/api/orders/{path}")
            assert response.status_code in (200, 404), (segment, response.status_code)
            if response.status_code == 404:
                assert response.json["error"]["code"] == "not_found"
            page = client.get(f"/orders/{path}")
            if segment not in routes:
                assert page.status_code in (200, 404), (segment, page.status_code)
        no_leak(fuzz_app)

    run(fuzz_app, 300, one, segment=segments, method=st.sampled_from(["GET", "DELETE"]))


# --- Cursors signed with our own key, holding keys no page could have made ----------------------

# Only a holder of SECRET_KEY can make these (or an older release with other column types). They
# must still be refused as invalid_cursor before the database sees them, never fail in binding or
# in the server (a 500, or a 503 that tells the client to retry what can never work).
any_key = st.one_of(
    st.integers(),
    st.integers(-(2**64), 2**64),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.sampled_from([None, UTC])),
    st.text(max_size=80),
    st.dates(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.uuids(),
)


@st.composite
def odd_cursors(draw: st.DrawFn) -> tuple[str, str]:
    sort = draw(st.sampled_from(list(LIBRARY_SORTS)))
    keys = draw(
        st.one_of(st.tuples(any_key, any_key), st.tuples(FIRST_KEY[sort], any_key), st.lists(any_key))
    )
    position = Position(sort, AFTER, filters_fingerprint({"status": None}), tuple(keys), draw(st.booleans()))
    try:
        return sort, CODEC.encode(position)
    except ValueError:  # too long: the codec refuses to make it (CursorTooLong)
        assume(False)
        raise


@pytest.mark.parametrize(
    ("sort", "keys"),
    [
        ("newest", (dt.datetime(2026, 3, 11, 10, 39), 5)),  # naive
        ("newest", (BASE, 2**63)),  # past BIGINT
        ("amount", (Decimal("1E+40"), 5)),  # past NUMERIC(12, 2)
        ("customer", ("x" * (CUSTOMER_MAX_LENGTH + 1), 5)),  # past VARCHAR(64)
    ],
)
def test_signed_cursors_with_impossible_keys_are_invalid(fuzz_app: Flask, sort: str, keys: tuple) -> None:
    cursor = CODEC.encode(Position(sort, AFTER, filters_fingerprint({"status": None}), keys))
    response = fuzz_app.test_client().get("/api/orders", query_string={"sort": sort, "after": cursor})
    assert response.status_code == 400 and response.json["error"]["code"] == "invalid_cursor"


def test_signed_cursors_with_any_keys_are_a_page_or_invalid_cursor(fuzz_app: Flask) -> None:
    client = fuzz_app.test_client()

    def one(cursor: tuple[str, str]) -> None:
        sort, value = cursor
        response = client.get("/api/orders", query_string={"sort": sort, "after": value})
        no_leak(fuzz_app)
        assert response.status_code in (200, 400), (sort, CODEC.decode(value), response.get_data()[:300])
        if response.status_code == 400:
            assert response.json["error"]["code"] == "invalid_cursor"

    run(fuzz_app, 600, one, cursor=odd_cursors())


def test_signed_cursor_with_nul_in_text_is_invalid(fuzz_app: Flask):
    # PostgreSQL text cannot hold NUL (psycopg would refuse to send the key): Keyset.check
    # refuses NUL in text keys on every engine, since no stored row can have one.
    cursor = CODEC.encode(Position("customer", AFTER, filters_fingerprint({"status": None}), ("a\x00b", 5)))
    response = fuzz_app.test_client().get("/api/orders", query_string={"sort": "customer", "after": cursor})
    assert response.status_code == 400, response.get_data()[:300]
    assert response.json["error"]["code"] == "invalid_cursor"
