"""Opaque, sealed, versioned cursors: a page position that clients carry but can neither read
nor change.

A cursor is ``base64url(version byte + nonce + AES-GCM-SIV ciphertext and tag)``. The plaintext is
a JSON array::

    [sort name, direction, filters fingerprint, [tag, text, tag, text, ...], {meta}, terms]

`terms` is the sort's fingerprint (its terms, directions and NULL placements, `Keyset.terms`):
a cursor opens only the sort it was made for, not another of the same name. A cursor sealed
before it was added (five elements) decodes with ``terms=""`` and is a CursorMismatch.

The direction is "a"/"b" (after/before), upper case when inclusive; the flat key list and the
one-letter codes keep the app's longest cursor (64 four-byte characters) under 512 characters.

Key values are tagged text so they round-trip exactly: timestamps to the microsecond,
integers of any size, decimals digit for digit. Sealing (authenticated encryption) rather
than signing keeps them private too: a cursor in a log, a proxy or a Referer header does not
show a customer's name. The AES key is derived from the secret with HKDF, so the app's
``SECRET_KEY`` is never used as a cipher key directly; fallback secrets open (never make)
cursors during a key rotation. The nonce is synthetic, an HMAC of the plaintext: the same
position always gives the same cursor (stable URLs, reproducible tests), which reveals only that
two cursors are equal; AES-GCM-SIV stays safe if two plaintexts ever shared a nonce.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import functools
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import CursorTooLong, InvalidCursor

# 1 was base64(JSON).HMAC (itsdangerous): signed, readable by anyone. 2 is sealed.
CURSOR_VERSION = 2
# Long enough for a String(255) key of 4-byte characters (about 1,500 characters sealed);
# a URL of this length passes every browser and server default we know of (8 KB and up).
MAX_CURSOR_LENGTH = 2048
AFTER = "after"
BEFORE = "before"
_DIRECTION_CODES = {AFTER: "a", BEFORE: "b"}
_DIRECTIONS = {code: name for name, code in _DIRECTION_CODES.items()}
_DIRECTIONS.update({code.upper(): name for code, name in _DIRECTIONS.items()})
_CURSOR_CHARS = re.compile(r"[A-Za-z0-9_\-]+")
# Version 1's shape: base64url payload "." base64url signature.
_SIGNED_CURSOR = re.compile(r"[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+")
_NONCE_BYTES = 12  # AES-GCM-SIV's nonce
_TAG_BYTES = 16
_HEADER = bytes([CURSOR_VERSION])
_NOT_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})
_MALFORMED = "cursor is malformed: use it exactly as the server sent it"
_OLDER = "cursor is from an older version: start again from the first page"
_NEWER = "cursor is of an unknown version (altered, or from a newer server): start again from the first page"


@dataclass(frozen=True)
class Position:
    """Where a page starts: the key values of a row, and which side of it to read."""

    sort: str
    direction: str  # AFTER or BEFORE
    filters: str  # fingerprint, see filters_fingerprint()
    keys: tuple[Any, ...]
    # An inclusive position also returns the row at `keys`: the way back from an empty page,
    # and start_at(), whose `keys` may be a prefix of the sort's columns.
    inclusive: bool = False
    # What the caller stamped on the page (e.g. the WAL position it was read at); opaque here.
    meta: Mapping[str, str] = field(default_factory=dict, hash=False)
    # The fingerprint of the sort's terms it was made for (Keyset.terms); None: a position the
    # server's own code built without one (checked by the sort's name alone); "": a cursor
    # sealed before cursors carried it (refused).
    terms: str | None = None


def filters_fingerprint(filters: Mapping[str, Any] | None) -> str:
    """A short, stable digest of the filters a walk was started with."""
    return _fingerprint(tuple(sorted((k, str(v)) for k, v in (filters or {}).items() if v is not None)))


@functools.lru_cache(maxsize=1024)
def _fingerprint(filters: tuple[tuple[str, str], ...]) -> str:
    # Remembered: the JSON and the digest were 4% of a page's time (profiled), for the few
    # filter combinations an app has.
    canonical = json.dumps(dict(filters), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).digest()[:9]
    return base64.urlsafe_b64encode(digest).decode()


def _encode_value(value: Any) -> list[str]:
    if value is None:  # the NULL of a nullable first term
        return ["N", ""]
    # bool before int: bool is a subclass of int.
    if isinstance(value, bool):
        return ["b", "1" if value else "0"]
    if isinstance(value, int):
        return ["i", str(int(value))]  # int(): an IntEnum member is written as its number
    if isinstance(value, Decimal):
        return ["d", str(value)]
    if isinstance(value, str):
        return ["s", str.__str__(value)]  # a StrEnum member is written as its text
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return ["n", value.isoformat(timespec="microseconds")]
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        return ["t", utc.isoformat(timespec="microseconds") + "Z"]
    if isinstance(value, dt.date):
        return ["D", value.isoformat()]
    if isinstance(value, dt.time):  # an aware time keeps its offset
        return ["T", value.isoformat(timespec="microseconds")]
    if isinstance(value, dt.timedelta):  # an Interval, exactly: days, seconds, microseconds
        return ["I", f"{value.days},{value.seconds},{value.microseconds}"]
    if isinstance(value, float):
        return ["f", repr(value)]
    if isinstance(value, uuid.UUID):
        return ["u", str(value)]
    if isinstance(value, bytes):
        return ["x", value.hex()]
    raise TypeError(
        f"cannot put a {type(value).__name__} in a cursor: teach it to the codec, "
        f"CursorCodec(secret, types={{name: ({type(value).__name__}, to_text, from_text)}})"
    )


def _decode_value(tag: str, text: str) -> Any:
    if tag == "N" and text == "":
        return None
    if tag == "b":
        return {"1": True, "0": False}[text]
    if tag == "i":
        if not re.fullmatch(r"-?[0-9]+", text):
            raise ValueError(text)
        return int(text)
    if tag == "d":
        value = Decimal(text)
        # PostgreSQL's NUMERIC holds NaN and +-Infinity (str() writes them so); no sNaN, no -NaN.
        if not value.is_finite() and text not in _NOT_FINITE:
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
    if tag == "T":
        return dt.time.fromisoformat(text)
    if tag == "I":
        days, seconds, microseconds = (int(part) for part in text.split(","))
        return dt.timedelta(days=days, seconds=seconds, microseconds=microseconds)
    if tag == "f":
        return float(text)
    if tag == "u":
        return uuid.UUID(text)
    if tag == "x":
        return bytes.fromhex(text)
    raise ValueError(tag)


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class _Key:
    """The keys derived from one secret: one to seal, one to derive nonces."""

    aead: AESGCMSIV
    nonce_key: bytes

    @classmethod
    def derive(cls, secret: str | bytes) -> _Key:
        if not secret:
            raise ValueError("a cursor secret is required (and every fallback must be non-empty)")
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        hkdf = HKDF(algorithm=hashes.SHA256(), length=64, salt=b"pagination.cursor", info=b"seal v2")
        keys = hkdf.derive(raw)
        return cls(AESGCMSIV(keys[:32]), keys[32:])

    def nonce(self, plain: bytes) -> bytes:
        mac = hmac.HMAC(self.nonce_key, hashes.SHA256())
        mac.update(plain)
        return mac.finalize()[:_NONCE_BYTES]


def _meta(meta: Any) -> dict[str, str]:
    if not isinstance(meta, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise TypeError("cursor meta must map text to text")
    return dict(meta)


class CursorCodec:
    """Turns positions into sealed cursor strings and back, refusing anything not ours.

    New cursors are sealed with `secret`; `decode` also opens cursors sealed with any of
    `fallbacks` (older secrets, newest first), so rotating the secret loses no reader's place.
    """

    def __init__(
        self,
        secret: str | bytes,
        *,
        fallbacks: Sequence[str | bytes] = (),
        max_length: int = MAX_CURSOR_LENGTH,
        types: Mapping[str, tuple[type, Callable[[Any], str], Callable[[str], Any]]] | None = None,
    ):
        """`types` teaches the codec key values of other Python types, by a name that is written
        into cursors (keep it stable): ``{"colour": (Colour, lambda c: c.hex, Colour.from_hex)}``.
        The text must round-trip: ``from_text(to_text(v)) == v``."""
        if isinstance(fallbacks, (str, bytes)):
            raise TypeError("fallbacks is a sequence of secrets, not one secret")
        self.max_length = max_length
        self._types = {cls: (f"~{name}", to_text) for name, (cls, to_text, _) in (types or {}).items()}
        self._parsers = {f"~{name}": from_text for name, (_, _, from_text) in (types or {}).items()}
        self._key = _Key.derive(secret)
        self._sealer = self._key.aead
        self._openers = (self._sealer, *(_Key.derive(s).aead for s in fallbacks))

    def encode(self, position: Position) -> str:
        code = _DIRECTION_CODES[position.direction]
        payload = [
            position.sort,
            code.upper() if position.inclusive else code,
            position.filters,
            [part for v in position.keys for part in self._encode_value(v)],
            _meta(position.meta),
            position.terms,
        ]
        plain = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        nonce = self._key.nonce(plain)
        cursor = _b64encode(_HEADER + nonce + self._sealer.encrypt(nonce, plain, _HEADER))
        if len(cursor) > self.max_length:
            # A server-side limit, not the client's fault: the sort's key values are too long.
            raise CursorTooLong(
                f"cursor for sort {position.sort!r} would be {len(cursor)} characters, over the "
                f"{self.max_length} limit: its key values are too long (bound the sort's text "
                "columns, or give the CursorCodec a larger max_length)"
            )
        return cursor

    def decode(self, cursor: str) -> Position:
        if not cursor:
            raise InvalidCursor("cursor is empty")
        if len(cursor) > self.max_length:
            raise InvalidCursor(f"cursor is longer than {self.max_length} characters")
        if _SIGNED_CURSOR.fullmatch(cursor):
            raise InvalidCursor(_OLDER)
        if not _CURSOR_CHARS.fullmatch(cursor):
            raise InvalidCursor(_MALFORMED)
        try:
            raw = _b64decode(cursor)
        except (binascii.Error, ValueError):
            raise InvalidCursor(_MALFORMED) from None
        # Base64's last character has spare bits: refuse the aliases of a real cursor, so that
        # every altered character makes the cursor invalid.
        if _b64encode(raw) != cursor or len(raw) < 1 + _NONCE_BYTES + _TAG_BYTES:
            raise InvalidCursor(_MALFORMED)
        if raw[:1] != _HEADER:
            # Version 1 was the signed shape above; no binary cursor had a version below 2, so a
            # lower one is an altered cursor, not an old one.
            raise InvalidCursor(_NEWER if raw[0] > CURSOR_VERSION else _MALFORMED)
        nonce, sealed = raw[1 : 1 + _NONCE_BYTES], raw[1 + _NONCE_BYTES :]
        plain = self._open(nonce, sealed)
        try:
            parts = json.loads(plain)
            if not isinstance(parts, list) or len(parts) not in (5, 6):
                raise ValueError(parts)
            sort, direction, filters, keys, meta = parts[:5]
            terms = parts[5] if len(parts) == 6 else ""
            if not isinstance(keys, list) or len(keys) % 2 or not (terms is None or isinstance(terms, str)):
                raise ValueError(keys)
            return Position(
                sort=str(sort),
                direction=_DIRECTIONS[direction],
                filters=str(filters),
                keys=tuple(
                    self._decode_value(tag, text) for tag, text in zip(keys[::2], keys[1::2], strict=True)
                ),
                inclusive=direction.isupper(),
                meta=_meta(meta),
                terms=terms,
            )
        except (KeyError, TypeError, ValueError, InvalidOperation):
            raise InvalidCursor(_MALFORMED) from None

    def _encode_value(self, value: Any) -> list[str]:
        taught = self._types.get(type(value))
        if taught is not None:
            tag, to_text = taught
            return [tag, to_text(value)]
        return _encode_value(value)

    def _decode_value(self, tag: Any, text: Any) -> Any:
        if not isinstance(tag, str) or not isinstance(text, str):
            raise ValueError(tag)
        parse = self._parsers.get(tag)
        return parse(text) if parse is not None else _decode_value(tag, text)

    def _open(self, nonce: bytes, sealed: bytes) -> bytes:
        for cipher in self._openers:
            try:
                return cipher.decrypt(nonce, sealed, _HEADER)
            except InvalidTag:
                continue
        raise InvalidCursor("cursor seal does not match: it was altered or issued by another server")
