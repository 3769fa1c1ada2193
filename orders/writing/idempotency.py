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
- A key answers for IDEMPOTENCY_KEY_HOURS (24 by default), checked when it is read: an older key
  never replays, whether or not it was pruned yet; the same key then creates a new order. Older
  keys are deleted now and then (one keyed POST in PRUNE_EVERY).

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
from sqlalchemy import delete, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from orders.core.errors import ApiError
from orders.data.models import IdempotencyKey, Order

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
        if not _expired(known):
            return _replay(session, known, fingerprint)
        # Past its lifetime but not pruned yet: forgotten now, in this transaction. A Core
        # delete, bounded by the age: a concurrent request that replaced it meanwhile keeps its
        # new row (and ours then fails on the unique key and answers that one's 201).
        session.expunge(known)
        session.execute(
            delete(IdempotencyKey).where(
                IdempotencyKey.key_hash == key_hash, IdempotencyKey.created_at < _cutoff()
            )
        )
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
        return _replay(session, known, fingerprint)
    if next(_posts) % PRUNE_EVERY == 0:
        _prune(session)
    return response, status, headers


def _cutoff() -> dt.datetime:
    """Keys created before this are past their lifetime (IDEMPOTENCY_KEY_HOURS)."""
    hours = int(current_app.config["IDEMPOTENCY_KEY_HOURS"])
    return dt.datetime.now(dt.UTC) - dt.timedelta(hours=hours)


def _expired(known: IdempotencyKey) -> bool:
    created = known.created_at
    if created.tzinfo is None:  # a driver that hands back naive UTC
        created = created.replace(tzinfo=dt.UTC)
    return created < _cutoff()


def _replay(session: Session, known: IdempotencyKey, fingerprint: str) -> Answer:
    if known.fingerprint != fingerprint:
        raise ApiError(
            "invalid_order",
            f"this {HEADER} was used for another order",
            {HEADER: "already used with another body: send a new key for a new order"},
        )
    _durable(session, known)
    from flask import url_for

    response = current_app.response_class(known.response, mimetype="application/json")
    location = url_for("api.get_order", order_id=known.order_id)
    return response, 201, {"Location": location, REPLAYED: "true"}


def _durable(session: Session, known: IdempotencyKey) -> None:
    """A replayed 201 promises what a first one does: the order survives a failover.

    The first request's commit may have been reported done although its wait for the synchronous
    standby was cancelled (PostgreSQL commits locally with only a warning; orders/data/db.py made
    that request a 503): the order is then on the primary alone. So the replay writes: the key's
    row rewritten as it is (PostgreSQL waits for the standby only at the COMMIT of a transaction
    that wrote WAL; an id alone writes none, tried), and that COMMIT waits until the standby has
    everything up to it, the first order included. A standby that does not answer makes this
    replay a 503 too (the read timeout, or a cancelled wait), never a 201. Without synchronous
    replication (or on SQLite and MariaDB) it costs a round trip and waits for nothing."""
    if session.get_bind().dialect.name == "postgresql":
        same = update(IdempotencyKey).where(IdempotencyKey.key_hash == known.key_hash)
        session.execute(same.values(created_at=IdempotencyKey.created_at))
        session.commit()


def _prune(session: Session) -> None:
    """Delete keys older than IDEMPOTENCY_KEY_HOURS. Never fails the request that runs it."""
    try:
        session.execute(delete(IdempotencyKey).where(IdempotencyKey.created_at < _cutoff()))
        session.commit()
    except DBAPIError as err:  # a deadlock with another pruner, a timeout: next time
        session.rollback()
        log.warning("idempotency keys not pruned: %s", str(err).splitlines()[0][:200])
