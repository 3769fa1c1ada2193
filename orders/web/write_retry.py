"""A write refused by a read-only node (SQLSTATE 25006, a demoted primary) runs once more.

orders/data/db.py treats 25006 as a lost connection: SQLAlchemy drops it and every pooled one
older than it, so the next checkout reaches the writable node. The refused write changed nothing
(its transaction was on the read-only node), so the view runs once more at once; refused again,
the answer is 503 with Retry-After.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, request
from sqlalchemy.exc import DBAPIError

from orders.data.db import READ_ONLY_TRANSACTION, get_session
from orders.web.limits import WRITE_METHODS

log = logging.getLogger(__name__)


def install(app: Flask) -> None:
    """Every write view runs once more when the node refused its write as read-only (25006)."""
    writes = {
        rule.endpoint for rule in app.url_map.iter_rules() if set(WRITE_METHODS) & set(rule.methods or ())
    }
    for endpoint in writes:
        app.view_functions[endpoint] = _retry_refused(app.view_functions[endpoint])


def _retry_refused(view: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(view)
    def wrapper(**kwargs: Any) -> Any:
        try:
            return view(**kwargs)
        except DBAPIError as err:
            refused = getattr(err.orig, "sqlstate", None) == READ_ONLY_TRANSACTION
            if not (refused and request.method in WRITE_METHODS):
                raise
            log.warning("a write was refused by a read-only node (a demoted primary); sent once more")
            get_session().rollback()
            return view(**kwargs)

    return wrapper
