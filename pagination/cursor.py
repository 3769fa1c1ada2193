"""Opaque, signed, versioned cursors: a page position that clients carry but never read.

A cursor is ``base64url(json payload) + "." + base64url(HMAC-SHA256)``, signed with
itsdangerous. The payload is a JSON array::

    [version, sort name, direction, filters fingerprint, inclusive, [[tag, text], ...]]

Key values are tagged text so they round-trip exactly: timestamps to the microsecond,
integers of any size, decimals digit for digit.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from itsdangerous import BadSignature, Signer

from .errors import InvalidCursor

CURSOR_VERSION = 1
MAX_CURSOR_LENGTH = 512
AFTER = "after"
BEFORE = "before"
_DIRECTION_CODES = {AFTER: "a", BEFORE: "b"}
_DIRECTIONS = {code: name for name, code in _DIRECTION_CODES.items()}
# base64url alphabet plus the "." between payload and signature; anything else is not ours.
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")


@dataclass(frozen=True)
class Position:
    """Where a page starts: the key values of a row, and which side of it to read."""

    sort: str
    direction: str  # AFTER or BEFORE
    filters: str  # fingerprint, see filters_fingerprint()
    keys: tuple[Any, ...]
    # An inclusive position also returns the row at `keys`. Only used to step back from an
    # empty page, whose edge is the cursor's own position rather than a row on the page.
    inclusive: bool = False


def filters_fingerprint(filters: dict[str, Any] | None) -> str:
    """A short, stable digest of the filters a walk was started with."""
    canonical = json.dumps(
        {k: str(v) for k, v in (filters or {}).items() if v is not None},
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(canonical.encode()).digest()[:9]
    return base64.urlsafe_b64encode(digest).decode()


def _encode_value(value: Any) -> list[str]:
    # bool before int: bool is a subclass of int.
    if isinstance(value, bool):
        return ["b", "1" if value else "0"]
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, Decimal):
        return ["d", str(value)]
    if isinstance(value, str):
        return ["s", value]
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return ["n", value.isoformat(timespec="microseconds")]
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        return ["t", utc.isoformat(timespec="microseconds") + "Z"]
    if isinstance(value, dt.date):
        return ["D", value.isoformat()]
    if isinstance(value, float):
        return ["f", repr(value)]
    if isinstance(value, uuid.UUID):
        return ["u", str(value)]
    raise TypeError(f"cannot put a {type(value).__name__} in a cursor")


def _decode_value(tag: str, text: str) -> Any:
    if tag == "b":
        return {"1": True, "0": False}[text]
    if tag == "i":
        if not re.fullmatch(r"-?[0-9]+", text):
            raise ValueError(text)
        return int(text)
    if tag == "d":
        value = Decimal(text)
        if not value.is_finite():
            raise ValueError(text)
        return value
    if tag == "s":
        return text
    if tag == "t":
        if not text.endswith("Z"):
            raise ValueError(text)
        return dt.datetime.fromisoformat(text[:-1]).replace(tzinfo=dt.UTC)
    if tag == "n":
        return dt.datetime.fromisoformat(text)
    if tag == "D":
        return dt.date.fromisoformat(text)
    if tag == "f":
        return float(text)
    if tag == "u":
        return uuid.UUID(text)
    raise ValueError(tag)


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _canonical_base64(text: str) -> bool:
    try:
        return _b64encode(_b64decode(text)) == text
    except (binascii.Error, ValueError):
        return False


class CursorCodec:
    """Turns positions into signed cursor strings and back, rejecting anything not ours."""

    def __init__(self, secret: str | bytes, *, max_length: int = MAX_CURSOR_LENGTH):
        if not secret:
            raise ValueError("a cursor secret is required")
        self.max_length = max_length
        self._signer = Signer(secret, salt="pagination.cursor", digest_method=hashlib.sha256, sep=".")

    def encode(self, position: Position) -> str:
        payload = [
            CURSOR_VERSION,
            position.sort,
            _DIRECTION_CODES[position.direction],
            position.filters,
            int(position.inclusive),
            [_encode_value(v) for v in position.keys],
        ]
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        cursor = self._signer.sign(_b64encode(data)).decode()
        if len(cursor) > self.max_length:
            # Only long text keys get here; the app bounds the columns it sorts by.
            raise ValueError(f"cursor would be {len(cursor)} characters, over the {self.max_length} limit")
        return cursor

    def decode(self, cursor: str) -> Position:
        if not cursor:
            raise InvalidCursor("cursor is empty")
        if len(cursor) > self.max_length:
            raise InvalidCursor(f"cursor is longer than {self.max_length} characters")
        if not _CURSOR_CHARS.fullmatch(cursor):
            raise InvalidCursor("cursor is malformed: use it exactly as the server sent it")
        signature = cursor.rpartition(".")[2]
        if not _canonical_base64(signature):
            # Base64's last character has spare bits: refuse the aliases of a real signature,
            # so that every altered character makes the cursor invalid.
            raise InvalidCursor("cursor is malformed: use it exactly as the server sent it")
        try:
            encoded = self._signer.unsign(cursor).decode()
        except BadSignature:
            raise InvalidCursor(
                "cursor signature does not match: it was altered or issued by another server"
            ) from None
        try:
            payload = json.loads(_b64decode(encoded))
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise InvalidCursor("cursor is malformed: use it exactly as the server sent it") from None
        if not isinstance(payload, list) or not payload or payload[0] != CURSOR_VERSION:
            raise InvalidCursor("cursor is from an older version: start again from the first page")
        try:
            _, sort, direction, filters, inclusive, keys = payload
            return Position(
                sort=str(sort),
                direction=_DIRECTIONS[direction],
                filters=str(filters),
                keys=tuple(_decode_value(tag, text) for tag, text in keys),
                inclusive=bool(inclusive),
            )
        except (KeyError, TypeError, ValueError, InvalidOperation):
            raise InvalidCursor("cursor is malformed: use it exactly as the server sent it") from None
