"""Cursors: every key type round-trips exactly; anything altered, foreign or oversized is refused."""

from __future__ import annotations

import base64
import datetime as dt
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orders.models import SORTS, Order
from pagination import (
    AFTER,
    BEFORE,
    MAX_CURSOR_LENGTH,
    CursorCodec,
    CursorMismatch,
    InvalidCursor,
    Keyset,
    KeysetError,
    PaginationError,
    Position,
    filters_fingerprint,
)

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
]


def make(keys, sort="newest", direction=AFTER, filters=None, inclusive=False):
    return codec.encode(Position(sort, direction, filters_fingerprint(filters), tuple(keys), inclusive))


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
    cursor = make(
        [VALUES[0], 2**63 - 1], sort="amount", direction=BEFORE, filters={"status": "paid"}, inclusive=True
    )
    assert len(cursor) <= MAX_CURSOR_LENGTH
    assert set(cursor) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    position = codec.decode(cursor)
    assert position == Position(
        "amount", BEFORE, filters_fingerprint({"status": "paid"}), (VALUES[0], 2**63 - 1), True
    )


def test_longest_customer_cursor_fits_in_512_characters():
    # The customer column holds at most 64 characters; 4-byte characters are the worst case.
    cursor = make(["🎉" * 64, 2**63 - 1], sort="customer", filters={"status": "cancelled"})
    assert len(cursor) <= MAX_CURSOR_LENGTH


def test_every_single_character_change_is_refused():
    cursor = make([VALUES[0], 123456])
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
        "WzEsIm5ld2VzdCJd",  # a payload without a signature
    ],
    ids=repr,
)
def test_garbage_is_refused_with_invalid_cursor(garbage):
    with pytest.raises(InvalidCursor):
        codec.decode(garbage)


def test_reencoded_cursor_is_refused():
    cursor = make([VALUES[0], 1])
    payload, signature = cursor.split(".")
    padded = payload + "=" * (-len(payload) % 4) + "." + signature
    standard = base64.b64encode(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))).decode()
    for variant in (padded, standard + "." + signature, cursor.replace("-", "%2D"), cursor + "\n"):
        if variant != cursor:
            with pytest.raises(InvalidCursor):
                codec.decode(variant)


def test_cursor_signed_with_another_secret_is_refused():
    foreign = CursorCodec("another-secret-another-secret-0000").encode(
        Position("newest", AFTER, filters_fingerprint(None), (VALUES[0], 1))
    )
    with pytest.raises(InvalidCursor, match="signature"):
        codec.decode(foreign)


def test_cursor_of_another_version_is_refused():
    import json

    from pagination.cursor import _b64encode

    payload = _b64encode(json.dumps([99, "newest", "a", "x", 0, []]).encode())
    forged = codec._signer.sign(payload).decode()  # validly signed, wrong version
    with pytest.raises(InvalidCursor, match="version"):
        codec.decode(forged)


def test_signed_but_malformed_payloads_are_refused():
    import json

    from pagination.cursor import _b64encode

    for payload in (
        [1, "newest", "a", "x", 0, [["i", "1.5"]]],
        [1, "newest", "a", "x", 0, [["t", "yesterday"]]],
        [1, "newest", "a", "x", 0, [["d", "NaN"]]],
        [1, "newest", "q", "x", 0, []],
        [1, "newest"],
        {"v": 1},
        "text",
    ):
        forged = codec._signer.sign(_b64encode(json.dumps(payload).encode())).decode()
        with pytest.raises(InvalidCursor):
            codec.decode(forged)


@settings(max_examples=500)
@given(st.text(max_size=600) | st.binary(max_size=600).map(lambda b: b.decode("latin-1")))
def test_any_text_is_refused_with_invalid_cursor_only(text):
    with pytest.raises(InvalidCursor):
        codec.decode(text)


# --- Binding a cursor to its sort, direction and filters -----------------------------------


def test_cursor_for_another_sort_direction_or_filters_is_a_mismatch():
    keyset = SORTS["newest"]
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
    keyset = SORTS["newest"]
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


def test_keyset_refuses_a_sort_that_does_not_end_in_a_unique_column():
    with pytest.raises(KeysetError, match="unique"):
        Keyset("bad", Order.created_at.desc())
    with pytest.raises(KeysetError, match="unique"):
        Keyset("bad", Order.id.desc(), Order.created_at.desc())


def test_keyset_refuses_nullable_columns():
    from sqlalchemy import Column, Integer, MetaData, String, Table

    table = Table(
        "t", MetaData(), Column("id", Integer, primary_key=True), Column("note", String, nullable=True)
    )
    with pytest.raises(KeysetError, match="nullable"):
        Keyset("bad", table.c.note.asc(), table.c.id.asc())
    with pytest.raises(KeysetError, match="NULLS"):
        Keyset("bad", table.c.id.asc().nulls_first())


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
        SORTS["newest"].check(position, direction=AFTER, filters=filters_fingerprint(None))
    too_big = codec.decode(make([Decimal("1E+10"), 1], sort="amount"))  # NUMERIC(12, 2) holds < 1E+10
    with pytest.raises(InvalidCursor, match="does not fit"):
        SORTS["amount"].check(too_big, direction=AFTER, filters=filters_fingerprint(None))
    long_name = codec.decode(make(["x" * 65, 1], sort="customer"))
    with pytest.raises(InvalidCursor, match="does not fit"):
        SORTS["customer"].check(long_name, direction=AFTER, filters=filters_fingerprint(None))
