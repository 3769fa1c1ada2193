"""A new order's fields, checked: every field that is wrong is named in one 422."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from flask import current_app

from orders.core.errors import ApiError
from orders.data.models import STATUSES
from orders.writing import grammar


def validate_order(body: Any, *, now: dt.datetime | None = None) -> dict[str, Any]:
    """The fields of a new order, or ApiError 422 listing every field that is wrong."""
    if not isinstance(body, dict):
        raise ApiError("invalid_order", "the body must be a JSON object", {"body": "not an object"})
    now = now or dt.datetime.now(dt.UTC)
    errors: dict[str, str] = {}
    values: dict[str, Any] = {}
    unknown = sorted(set(body) - {"customer", "amount", "status", "created_at"})
    for name in unknown:
        errors[name] = "unknown field"

    for name, parse in (("customer", grammar.customer_name), ("amount", grammar.amount)):
        try:
            values[name] = parse(body.get(name))
        except grammar.GrammarError as err:
            errors[name] = str(err)

    status = body.get("status", "pending")
    if not isinstance(status, str) or status not in STATUSES:
        errors["status"] = f"must be one of {', '.join(STATUSES)}"
    else:
        values["status"] = status

    try:
        # Left out, it is now; null is refused like a null status or amount (it was now, while
        # the description said a string: random examples found it).
        values["created_at"] = created_at(body["created_at"], now) if "created_at" in body else now
    except ValueError as err:
        errors["created_at"] = str(err)
    if errors:
        raise ApiError("invalid_order", "the order has invalid fields", errors)
    return values


def created_at(value: Any, now: dt.datetime) -> dt.datetime:
    """When the order was made: now, or a client's timestamp (with a timezone) from 1970 up to
    CREATED_AT_MAX_SKEW_SECONDS after the server's clock. Backdating is allowed (imports, offline
    tills): such an order appears in its place, below what a reader has seen. Future dates are
    not: an order dated 9998 would sit above every new order in "newest", and the "N new orders"
    banner, which counts orders above the first row shown, would never count one again."""
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 timestamp with a timezone, or left out (now)")
    # fromisoformat is lenient where a timestamp is not: it dropped a NUL, took "10:00:00.Z" and
    # a zone with seconds (+02:00:30). Printable ASCII only, digits after a decimal point.
    if not (value.isascii() and value.isprintable()) or _EMPTY_FRACTION.search(value):
        raise ValueError("must be an ISO 8601 timestamp with a timezone")
    # RFC 3339, the description's date-time, allows a lowercase t and z; fromisoformat takes the
    # t and refused the z (a valid timestamp answered 422).
    text = value[:-1] + "Z" if value.endswith("z") else value
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(_why_not(text)) from None
    offset = parsed.utcoffset()
    if offset is None:
        raise ValueError("needs a timezone, e.g. 2026-03-11T10:39:00.123456Z")
    if offset % dt.timedelta(minutes=1):
        raise ValueError("needs a timezone of whole minutes (Z or ±hh:mm)")
    skew = current_app.config["CREATED_AT_MAX_SKEW_SECONDS"]
    future = f"must not be in the future (at most {skew} s ahead of the server's clock)"
    try:
        utc = parsed.astimezone(dt.UTC)
    except (
        OverflowError
    ):  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC, 9999-12-31T23:59-01:00 after 9999
        raise ValueError(future if parsed.year > 1970 else "must be a date from 1970 on") from None
    if utc.year < 1970:
        raise ValueError("must be a date from 1970 on")
    if utc > now + dt.timedelta(seconds=skew):
        raise ValueError(future)
    return utc


_EMPTY_FRACTION = re.compile(r"[.,](?![0-9])")
_PARTS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[Tt ]([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?)?")


def _why_not(text: str) -> str:
    """What is wrong with a timestamp fromisoformat refused, where it can be said: a day the
    month does not have, a leap second, hour 24; else what a timestamp must be."""
    found = _PARTS.match(text)
    if found:
        year, month, day, hour, _minute, second = found.groups()
        try:
            dt.date(int(year), int(month), int(day))
        except ValueError:
            return f"{year}-{month}-{day} is not a date"
        if second == "60":
            return "a leap second (:60) cannot be stored: give :59.999999"
        if hour == "24":
            return "24:00 is not a time of day: give 00:00 of the next day"
    return "must be an ISO 8601 timestamp with a timezone"
