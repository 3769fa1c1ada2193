"""The floors for the fragment: a bare Flask app, and the stack's own page.

`/hello` answers "hello": no hooks, no database, no template, no session, no rate limiter, no
headers added: what Flask and gunicorn cost at least per request.

`/page` is the least a page of rows can cost on the product's stack (Flask, SQLAlchemy 2 Core,
psycopg 3, Jinja2): the next 20 rows of the newest sort after the keys in its query (`at`, `id`:
plain values, no cursor to open or seal), read by one statement built once, on a pooled
connection (in autocommit on PostgreSQL, as the app's list reads: one round trip), rendered by
one Jinja template of the same row markup with the app's own `money` and `timestamp` filters.
No rate limit, hooks, links, session, log line or metrics. The app's fragment at the same
depth, over this page, is what the app's own work costs on top of its stack; this page over
`/hello` is what reading and rendering rows costs at least (docs/performance.md).

The HTTP level serves both with the same gunicorn command as the app (bench/http_level.py);
``bench.floor_app:create()`` is what the benchmark's second gunicorn loads; bench/stages.py
runs the same app in-process beside the app.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any
from urllib.parse import urlencode

from flask import Flask, request
from sqlalchemy import bindparam, select, tuple_

FLOOR_PATH = "/hello"
PAGE_PATH = "/page"
# The floor's name in the results; results from before it was the bare app name "trivial Flask
# route" (a route inside the app, behind its hooks): reports read both, and say which.
FLOOR_NAMES = ("bare Flask app", "trivial Flask route")
STACK_PAGE = "the stack's page"

ROWS = """{% for o in rows %}<tr id="order-{{ o.id }}" data-id="{{ o.id }}" role="row" tabindex="-1">
  <td class="id"><a href="/orders/{{ o.id }}">#{{ o.id }}</a></td>
  <td class="customer" title="{{ o.customer }}">{{ o.customer }}</td>
  <td class="amount">{{ o.amount|money }}</td>
  <td><span class="status status-{{ o.status }}">{{ o.status }}</span></td>
  <td class="created">{{ o.created_at|timestamp }}</td>
</tr>
{% endfor %}"""


def page_path(keys: tuple[Any, ...] | None) -> str:
    """The stack page's URL after `keys` (created_at, id), as bench/common.keys_before gives them."""
    if keys is None:
        return PAGE_PATH
    return f"{PAGE_PATH}?{urlencode({'at': keys[0].isoformat(), 'id': keys[1]})}"


def create(database_url: str | None = None) -> Flask:
    app = Flask(__name__)
    app.add_url_rule(FLOOR_PATH, "hello", lambda: "hello")
    url = database_url or os.environ.get("DATABASE_URL")
    if url:
        _add_page(app, url)
    return app


def _add_page(app: Flask, url: str) -> None:
    # Imported here: /hello alone loads neither the app's models nor SQLAlchemy.
    from orders.data.db import make_engine
    from orders.data.models import Order
    from orders.views.templating import money, timestamp

    engine = make_engine(url, pre_ping=False)
    app.extensions["engine"] = engine  # disposed by whoever made the app in-process (bench/stages.py)
    if engine.dialect.name == "postgresql":
        engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    table = Order.__table__
    at, key = table.c.created_at, table.c.id
    columns = (table.c.id, table.c.customer, table.c.amount, table.c.status, at)
    first = select(*columns).order_by(at.desc(), key.desc()).limit(21)
    # The row-value form: one index range on SQLite and PostgreSQL (the engines the floor runs on).
    after = first.where(tuple_(at, key) < tuple_(bindparam("at"), bindparam("id")))
    app.jinja_env.filters.update(money=money, timestamp=timestamp)
    rows_template = app.jinja_env.from_string(ROWS)

    def page() -> str:
        at_text = request.args.get("at")
        with engine.connect() as connection:
            if at_text is None:
                rows = connection.execute(first).all()
            else:
                keys = {"at": dt.datetime.fromisoformat(at_text), "id": int(request.args["id"])}
                rows = connection.execute(after, keys).all()
        return rows_template.render(rows=rows[:20])

    app.add_url_rule(PAGE_PATH, "page", page)
