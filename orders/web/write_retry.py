"""A write refused by a read-only node (SQLSTATE 25006, a demoted primary) runs once more; a
write whose transaction the engine undid as a deadlock's victim runs again, up to
CONFLICT_ATTEMPTS times in all.

A deadlock is the engine's, not the client's: MariaDB's row triggers keep the counts
(order_counts, rail_counts) on rows every writer of a status, day or initial shares, and two
writers taking them in another order (a status changed one way and another the other way, two
new bucket rows in one index gap) are a deadlock InnoDB resolves by undoing one of them whole.
Sending the same writes again after a few milliseconds passes; the client sees a 201, not a 503.

orders/data/db.py treats 25006 as a lost connection: SQLAlchemy drops it and every pooled one
older than it, so the next checkout reaches the writable node. The refused write changed nothing
(its transaction was on the read-only node), so the view runs once more at once; refused again,
the answer is 503 with Retry-After.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, request
from sqlalchemy.exc import DBAPIError

from orders.core.errors import conflicted
from orders.data.db import READ_ONLY_TRANSACTION, get_session
from orders.web.limits import WRITE_METHODS

log = logging.getLogger(__name__)

# A write undone as a deadlock's victim is sent at most this many times in all, each after a
# pause of up to CONFLICT_PAUSE_S (random: two victims of one deadlock do not meet again).
CONFLICT_ATTEMPTS = 3
CONFLICT_PAUSE_S = 0.02


def install(app: Flask) -> None:
    """Every write view runs once more when the node refused its write as read-only (25006), and
    again when the engine undid it as a deadlock's victim (up to CONFLICT_ATTEMPTS in all)."""
    writes = {
        rule.endpoint for rule in app.url_map.iter_rules() if set(WRITE_METHODS) & set(rule.methods or ())
    }
    for endpoint in writes:
        app.view_functions[endpoint] = _retry_refused(app.view_functions[endpoint])


def _retry_refused(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapper(**kwargs: Any) -> Any:
        refused_once, conflicts = False, 0
        while True:
            try:
                return view(**kwargs)
            except DBAPIError as err:
                if request.method not in WRITE_METHODS:
                    raise
                if getattr(err.orig, "sqlstate", None) == READ_ONLY_TRANSACTION and not refused_once:
                    refused_once = True
                    log.warning("a write was refused by a read-only node (a demoted primary); sent once more")
                elif conflicted(err) and conflicts + 1 < CONFLICT_ATTEMPTS:
                    conflicts += 1
                    log.warning("a write was undone as a deadlock's victim; sent again (%d)", conflicts)
                    time.sleep(random.uniform(0, CONFLICT_PAUSE_S))
                else:
                    raise
                get_session().rollback()

    return wrapper
