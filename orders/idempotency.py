"""Idempotent POST /api/orders: the `Idempotency-Key` header, as Stripe's API has it.

A client that sends a POST and gets no answer (a timeout, a connection cut by an app server
dying, a 502 or a 503 during a database failover) cannot tell whether the order was created.
With a key (any 1 to 255 printable ASCII characters; a UUID is the usual choice) it sends the
same request again with the same key, as often as it needs:

- The first request that gets through creates the order and, in the same transaction, a row for
  the key holding the order's id and the 201's body. Both are committed or neither is.
- A request with a key already used for the same body answers that first 201 again (same order,
  same body, same Location), with `Idempotent-Replayed: true`, and creates nothing.
- The same key with another body is refused (422 `invalid_order`, an `Idempotency-Key` error):
  the client reused a key by mistake.
- Two requests with one key at the same moment: the database's unique key lets one commit; the
  other's insert fails and it answers the replay.
- A key is kept IDEMPOTENCY_KEY_HOURS (24 by default); older keys are deleted now and then, and
  the same key then creates a new order.

Without the header a POST is what it always was: each one creates an order.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

from flask import Response, current_app, request
from sqlalchemy import delete
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from .errors import ApiError
from .models import IdempotencyKey, Order

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
MAX_LENGTH = 255
# Expired keys are deleted by one keyed POST in this many (per process), after its commit.
PRUNE_EVERY = 100
_posts = itertools.count(1)

Answer = tuple[Response, int, dict[str, str]]


def _key() -> str | None:
    value = request.headers.get(HEADER)
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_LENGTH or not value.isascii() or not value.isprintable():
        raise ApiError(
            "invalid_order",
            f"the {HEADER} header is not valid",
            {HEADER: f"1 to {MAX_LENGTH} printable ASCII characters (a UUID, for example)"},
        )
    return value


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _fingerprint(body: Any) -> str:
    return _sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str))


def create(session: Session, order: Order, body: Any, answer: Callable[[Order], Answer]) -> Answer:
    """Add and commit `order` (made from the JSON `body`), answered by `answer(order)`; with an
    Idempotency-Key, at most once per key (see the module's docstring)."""
    key = _key()
    if key is None:
        session.add(order)
        session.commit()
        return answer(order)
    key_hash, fingerprint = _sha256(key), _fingerprint(body)
    if (known := session.get(IdempotencyKey, key_hash)) is not None:
        return _replay(known, fingerprint)
    session.add(order)
    session.flush()  # the order's id, for the answer
    response, status, headers = answer(order)
    session.add(
        IdempotencyKey(
            key_hash=key_hash,
            fingerprint=fingerprint,
            order_id=order.id,
            response=response.get_data(as_text=True),
            created_at=dt.datetime.now(dt.UTC),
        )
    )
    try:
        session.commit()
    except IntegrityError:
        # The same key committed by another request meanwhile (the unique key held us until it
        # did): nothing of ours was committed; answer what it answered.
        session.rollback()
        known = session.get(IdempotencyKey, key_hash, populate_existing=True)
        if known is None:
            raise
        return _replay(known, fingerprint)
    if next(_posts) % PRUNE_EVERY == 0:
        _prune(session)
    return response, status, headers


def _replay(known: IdempotencyKey, fingerprint: str) -> Answer:
    if known.fingerprint != fingerprint:
        raise ApiError(
            "invalid_order",
            f"this {HEADER} was used for another order",
            {HEADER: "already used with another body: send a new key for a new order"},
        )
    from flask import url_for

    response = current_app.response_class(known.response, mimetype="application/json")
    location = url_for("api.get_order", order_id=known.order_id)
    return response, 201, {"Location": location, REPLAYED: "true"}


def _prune(session: Session) -> None:
    """Delete keys older than IDEMPOTENCY_KEY_HOURS. Never fails the request that runs it."""
    hours = int(current_app.config["IDEMPOTENCY_KEY_HOURS"])
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours)
    try:
        session.execute(delete(IdempotencyKey).where(IdempotencyKey.created_at < cutoff))
        session.commit()
    except DBAPIError as err:  # a deadlock with another pruner, a timeout: next time
        session.rollback()
        log.warning("idempotency keys not pruned: %s", str(err).splitlines()[0][:200])
