"""Cursors: every key type round-trips exactly; they are sealed (nothing readable); anything
altered, foreign, old or oversized is refused; older secrets still open cursors."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orders.data.models import Order
from orders.finding.sorts import LIBRARY_SORTS
from pagination import (
    AFTER,
    BEFORE,
    MAX_CURSOR_LENGTH,
    CursorCodec,
    CursorMismatch,
    CursorTooLong,
    InvalidCursor,
    Keyset,
    KeysetError,
    PaginationError,
    Position,
    filters_fingerprint,
)

from .hunt import examples

SECRET = "a-secret-for-cursor-tests-0123456789abcdef"
codec = CursorCodec(SECRET)
UTC = dt.UTC

VALUES = [
    dt.datetime(2026, 3, 11, 10, 39, 0, 123456, tzinfo=UTC),
    dt.datetime(1970, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    dt.datetime(2026, 3, 11, 10, 39, 0, 1),  # naive stays naive
    2**63 - 1,
    -(2**63),
    10**40,
    0,
    Decimal("12345678901.23"),
    Decimal("0.000000000000000000001"),
    Decimal("-1E+30"),
    "Ana Souza",
    'ção 名前 🎉 "quotes" <script>',
    "",
    dt.date(2026, 2, 28),
    0.1,
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    True,
    b"\x00\xffbytes",
]


def make(keys, sort="newest", direction=AFTER, filters=None, inclusive=False, meta=None):
    position = Position(sort, direction, filters_fingerprint(filters), tuple(keys), inclusive, meta or {})
    return codec.encode(position)


def seal(plain: bytes, version: int = 2) -> str:
    """A cursor sealed with the test secret around any plaintext (what only the server can do)."""
    header, nonce = bytes([version]), os.urandom(12)
    return _b64(header + nonce + codec._sealer.encrypt(nonce, plain, header))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_key_type_round_trips_exactly(value):
    cursor = make([value, 7])
    decoded = codec.decode(cursor)
    assert decoded.keys == (value, 7)
    assert type(decoded.keys[0]) is type(value)
    if isinstance(value, dt.datetime):
        assert decoded.keys[0].utcoffset() == (None if value.tzinfo is None else dt.timedelta(0))
        assert decoded.keys[0].microsecond == value.microsecond
    if isinstance(value, Decimal):
        assert str(decoded.keys[0]) == str(value)  # digit for digit, exponent included


def test_cursor_is_url_safe_short_and_carries_everything():
    meta = {"lsn": "0/3000060"}
    cursor = make(
        [VALUES[0], 2**63 - 1],
        sort="amount",
        direction=BEFORE,
        filters={"status": "paid"},
        inclusive=True,
        meta=meta,
    )
    assert len(cursor) <= MAX_CURSOR_LENGTH
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    position = codec.decode(cursor)
    assert position == Position(
        "amount", BEFORE, filters_fingerprint({"status": "paid"}), (VALUES[0], 2**63 - 1), True, meta
    )
    assert position.meta == meta and isinstance(position.meta, dict)
    assert codec.decode(make([VALUES[0], 1])).meta == {}


def test_cursor_is_sealed_nothing_in_it_is_readable():
    name = "Sofia Cardoso"
    cursor = make([name, 424242], sort="customer", filters={"status": "paid"}, meta={"lsn": "0/3000060"})
    raw = _unb64(cursor)
    for secret in (name, "customer", "424242", "0/3000060", filters_fingerprint({"status": "paid"})):
        assert secret.encode() not in raw
        assert secret not in cursor
    # Deterministic: the same position gives the same cursor; any difference gives another.
    assert make([name, 1]) == make([name, 1])
    assert make([name, 1]) != make([name, 2]) != make([name, 2], meta={"lsn": "0/1"})
    assert len({make([name, i])[:17] for i in range(50)}) == 50  # nonces differ with the plaintext


def test_longest_app_cursor_fits_in_512_characters():
    # The app's customer column holds at most 64 characters; 4-byte characters are the worst case.
    cursor = make(
        ["🎉" * 64, 2**63 - 1],
        sort="customer",
        filters={"status": "cancelled"},
        meta={"lsn": "FFFFFFFF/FFFFFFFF"},
    )
    assert len(cursor) <= 512


def test_a_string_255_key_of_4_byte_characters_fits_under_the_cap():
    cursor = make(["🎉" * 255, 2**63 - 1], sort="customer", filters={"status": "cancelled"})
    assert len(cursor) <= MAX_CURSOR_LENGTH
    assert codec.decode(cursor).keys[0] == "🎉" * 255


def test_a_key_too_long_for_any_cursor_is_a_server_error_not_a_client_one():
    with pytest.raises(CursorTooLong, match="max_length") as caught:
        make(["x" * MAX_CURSOR_LENGTH, 1], sort="customer")
    assert not isinstance(caught.value, PaginationError)  # an app maps those to a 400
    assert isinstance(caught.value, KeysetError)
    bigger = CursorCodec(SECRET, max_length=4 * MAX_CURSOR_LENGTH)
    position = Position("customer", AFTER, "", ("x" * MAX_CURSOR_LENGTH, 1))
    assert bigger.decode(bigger.encode(position)) == position


def test_every_single_character_change_is_refused():
    cursor = make([VALUES[0], 123456], meta={"lsn": "0/1"})
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
    for i, original in enumerate(cursor):
        for replacement in alphabet:
            if replacement != original:
                with pytest.raises(InvalidCursor):
                    codec.decode(cursor[:i] + replacement + cursor[i + 1 :])


def test_every_truncation_is_refused():
    cursor = make([VALUES[0], 123456])
    for length in range(len(cursor)):
        with pytest.raises(InvalidCursor):
            codec.decode(cursor[:length])


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "x" * 10_000,
        "é",
        "abc.déf",
        "not a cursor",
        "%20",
        "....",
        ".",
        "a.",
        ".a",
        "\x00\x01",
        "WzEsIm5ld2VzdCJd",  # a version 1 payload without its signature
        "Ag",  # the version byte alone
    ],
    ids=repr,
)
def test_garbage_is_refused_with_invalid_cursor(garbage):
    with pytest.raises(InvalidCursor):
        codec.decode(garbage)


def test_reencoded_cursor_is_refused():
    cursors = [make([VALUES[0], i]) for i in range(20)]
    for cursor in cursors:
        raw = _unb64(cursor)
        variants = (
            cursor + "=" * (-len(cursor) % 4 or 4),  # padded
            base64.b64encode(raw).decode(),  # standard alphabet
            cursor.replace("-", "%2D"),
            cursor + "\n",
            " " + cursor,
            base64.b32encode(raw).decode(),
        )
        for variant in variants:
            if variant != cursor:
                with pytest.raises(InvalidCursor):
                    codec.decode(variant)


def test_cursor_sealed_with_another_secret_is_refused():
    foreign = CursorCodec("another-secret-another-secret-0000").encode(
        Position("newest", AFTER, filters_fingerprint(None), (VALUES[0], 1))
    )
    with pytest.raises(InvalidCursor, match="seal does not match"):
        codec.decode(foreign)


def test_fallback_secrets_open_old_cursors_and_never_make_new_ones():
    old, older = "old-secret-old-secret-old-secret-0", "older-secret-older-secret-older-0"
    position = Position("newest", AFTER, filters_fingerprint(None), (VALUES[0], 1), meta={"lsn": "0/1"})
    by_old, by_older = CursorCodec(old).encode(position), CursorCodec(older).encode(position)
    rotated = CursorCodec(SECRET, fallbacks=[old, older.encode()])
    assert rotated.decode(by_old) == position
    assert rotated.decode(by_older) == position
    # New cursors use the current secret only: a server that knows only the old one refuses them.
    with pytest.raises(InvalidCursor, match="seal"):
        CursorCodec(old).decode(rotated.encode(position))
    assert codec.decode(rotated.encode(position)) == position
    with pytest.raises(InvalidCursor, match="seal"):
        codec.decode(by_old)  # without the fallback, the old cursor is foreign
    with pytest.raises(TypeError):
        CursorCodec(SECRET, fallbacks=old)  # one string is not a list of secrets
    with pytest.raises(ValueError):
        CursorCodec(SECRET, fallbacks=[""])


def test_signed_cursor_of_the_previous_version_is_refused_as_older():
    # What version 1 issued: base64url(JSON) "." HMAC-SHA256 by itsdangerous, readable by anyone.
    from itsdangerous import Signer

    signer = Signer(SECRET, salt="pagination.cursor", digest_method=hashlib.sha256, sep=".")
    payload = _b64(json.dumps([1, "newest", "a", filters_fingerprint(None), 0, [["i", "1"]]]).encode())
    old = signer.sign(payload).decode()
    with pytest.raises(InvalidCursor, match="older version"):
        codec.decode(old)


def test_cursor_of_another_version_is_refused_as_what_it_is():
    """A version above ours may be a newer server's (a rolling deploy) or an altered byte; one
    below is altered: no binary cursor was ever issued with it (version 1 was the signed shape).
    Neither is "from an older version", which tells the reader their link merely went stale."""
    plain = codec.encode(Position("newest", AFTER, "x", (1,)))
    inner = codec._sealer.decrypt(_unb64(plain)[1:13], _unb64(plain)[13:], b"\x02")
    for version in (3, 99, 255):
        with pytest.raises(InvalidCursor, match=r"unknown version \(altered, or from a newer server\)"):
            codec.decode(seal(inner, version))
    for version in (0, 1):
        with pytest.raises(InvalidCursor, match="cursor is malformed"):
            codec.decode(seal(inner, version))


def test_sealed_but_malformed_payloads_are_refused():
    assert codec.decode(seal(json.dumps(["newest", "A", "x", ["i", "1"], {}]).encode())).inclusive
    for payload in (
        ["newest", "a", "x", ["i", "1.5"], {}],
        ["newest", "a", "x", ["t", "yesterday"], {}],
        ["newest", "a", "x", ["d", "sNaN"], {}],  # NaN and +-Infinity are PostgreSQL NUMERIC's
        ["newest", "a", "x", ["d", "-NaN"], {}],
        ["newest", "a", "x", [], {}, 5],  # the sort's fingerprint is text
        ["newest", "a", "x", ["?", "1"], {}],
        ["newest", "a", "x", ["i"], {}],
        ["newest", "a", "x", [["i", "1"]], {}],
        ["newest", "a", "x", "i1", {}],
        ["newest", "q", "x", [], {}],
        ["newest", "a", "x", [], {"lsn": 5}],
        ["newest", "a", "x", [], []],
        ["newest", "a", "x", 0, [], {}],
        ["newest"],
        {"v": 1},
        "text",
    ):
        with pytest.raises(InvalidCursor, match="malformed"):
            codec.decode(seal(json.dumps(payload).encode()))
    for plain in (b"\xff\xfe", b"", b"[1,"):
        with pytest.raises(InvalidCursor, match="malformed"):
            codec.decode(seal(plain))


@settings(max_examples=examples(500))
@given(st.text(max_size=600) | st.binary(max_size=600).map(lambda b: b.decode("latin-1")))
def test_any_text_is_refused_with_invalid_cursor_only(text):
    with pytest.raises(InvalidCursor):
        codec.decode(text)


# --- Binding a cursor to its sort, direction and filters -----------------------------------


def test_cursor_for_another_sort_direction_or_filters_is_a_mismatch():
    keyset = LIBRARY_SORTS["newest"]
    fingerprint = filters_fingerprint({"status": None})
    ok = codec.decode(make([VALUES[0], 1], filters={"status": None}))
    keyset.check(ok, direction=AFTER, filters=fingerprint)
    with pytest.raises(CursorMismatch, match="sort 'amount', not 'newest'"):
        keyset.check(
            codec.decode(make([Decimal("1.00"), 1], sort="amount")), direction=AFTER, filters=fingerprint
        )
    with pytest.raises(CursorMismatch, match="'after', not 'before'"):
        keyset.check(ok, direction=BEFORE, filters=fingerprint)
    with pytest.raises(CursorMismatch, match="other filters"):
        keyset.check(ok, direction=AFTER, filters=filters_fingerprint({"status": "paid"}))


def test_cursor_with_wrong_key_types_for_the_sort_is_invalid():
    keyset = LIBRARY_SORTS["newest"]
    wrong = codec.decode(make(["not a time", 1]))
    with pytest.raises(InvalidCursor, match="does not fit"):
        keyset.check(wrong, direction=AFTER, filters=filters_fingerprint(None))
    too_few = codec.decode(make([1]))
    with pytest.raises(InvalidCursor, match="does not fit"):
        keyset.check(too_few, direction=AFTER, filters=filters_fingerprint(None))


def test_errors_are_value_errors_with_one_base():
    assert issubclass(InvalidCursor, PaginationError)
    assert issubclass(CursorMismatch, PaginationError)
    assert issubclass(PaginationError, ValueError)


# --- Keyset definitions ---------------------------------------------------------------------


def test_keyset_remembers_explicit_null_placement_of_its_first_term():
    # Uniqueness and nullability are judged per statement when paged (tests/test_library_statements.py).
    from sqlalchemy import Column, Integer, MetaData, String, Table

    table = Table(
        "t", MetaData(), Column("id", Integer, primary_key=True), Column("note", String, nullable=True)
    )
    assert Keyset("fine", table.c.note.asc(), table.c.id.asc()).nulls_last is None
    assert Keyset("fine", table.c.note.desc().nulls_last(), table.c.id.desc()).nulls_last is True
    assert Keyset("fine", table.c.note.nulls_first().asc(), table.c.id).nulls_last is False


def test_keyset_accepts_mixed_directions_and_plain_columns():
    keyset = Keyset("mixed", Order.amount.desc(), Order.customer, Order.id.asc())
    assert [c.descending for c in keyset.columns] == [True, False, False]


@pytest.mark.parametrize(
    "keys",
    [
        (dt.datetime(2026, 3, 11, 10, 39), 5),  # naive, for a timezone-aware column
        (VALUES[0], 2**63),  # past BIGINT
        (VALUES[0], True),  # a bool is not an id
    ],
    ids=repr,
)
def test_signed_cursor_with_keys_the_columns_cannot_hold_is_invalid(keys):
    position = codec.decode(make(keys))
    with pytest.raises(InvalidCursor, match="does not fit"):
        LIBRARY_SORTS["newest"].check(position, direction=AFTER, filters=filters_fingerprint(None))
    too_big = codec.decode(make([Decimal("1E+10"), 1], sort="amount"))  # NUMERIC(12, 2) holds < 1E+10
    with pytest.raises(InvalidCursor, match="does not fit"):
        LIBRARY_SORTS["amount"].check(too_big, direction=AFTER, filters=filters_fingerprint(None))
    long_name = codec.decode(make(["x" * 65, 1], sort="customer"))
    with pytest.raises(InvalidCursor, match="does not fit"):
        LIBRARY_SORTS["customer"].check(long_name, direction=AFTER, filters=filters_fingerprint(None))
