"""What every page's templates may use: the registries for the controls, and the value filters."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from flask import Flask, current_app
from markupsafe import Markup

from orders.data.models import STATUSES
from orders.data.types import iso_utc
from orders.finding.jump import GOTO_FIELDS
from orders.finding.sorts import SORTS


def init_app(app: Flask) -> None:
    # The Sort and Status controls list what the registries hold (set once, not per render).
    app.jinja_env.globals.update(sorts=list(SORTS.values()), statuses=STATUSES)
    app.jinja_env.globals.update(goto_fields=GOTO_FIELDS)  # the go-to input, by kind
    app.add_template_filter(money, "money")
    app.add_template_filter(timestamp, "timestamp")
    app.jinja_env.globals.update(htmx_config=htmx_config)


# How long past the server's own bound htmx still waits: the server's answer, not htmx's timeout,
# is what ends a request (a gunicorn thread, haproxy's queue and the network come on top).
HTMX_TIMEOUT_MARGIN_MS = 10_000


def server_bound_ms(config: Any) -> int:
    """The longest a page waits on the database before the app answers 503 (docs/operations.md,
    "Hangs"): a pooled connection, a new one, then any answer of the database."""
    waits_s = config["DATABASE_POOL_TIMEOUT_S"] + config["DATABASE_CONNECT_TIMEOUT_S"]
    return int(waits_s * 1000 + config["DATABASE_READ_TIMEOUT_MS"])


def htmx_config() -> dict[str, Any]:
    """htmx's settings, the page's <meta name="htmx-config">.

    - No inline styles or eval: the Content-Security-Policy allows our own files only.
    - No history snapshot (historyCacheSize 0): Back asks the server for the address, which opens
      at the row it names (docs/scroll.md has the measurement that decided it).
    - A request's timeout outlasts the server's own bound: with the database frozen, an order
      opened from the list waited 15 s for htmx to give up silently while the server would have
      answered its 503 page after 20 (static/js/navigation.js shows that page).
    """
    return {
        "includeIndicatorStyles": False,
        "allowEval": False,
        "allowScriptTags": False,
        "timeout": server_bound_ms(current_app.config) + HTMX_TIMEOUT_MARGIN_MS,
        "historyCacheSize": 0,
        "scrollIntoViewOnBoost": False,
    }


def money(amount: Decimal) -> str:
    return f"{amount:,.2f}"


def timestamp(value: dt.datetime) -> Markup:
    """A <time> in UTC; static/js/enhance.js shows it in the reader's own timezone."""
    # Both parts are made from the datetime alone (digits, "-", ":", "T", "Z"), so nothing in them
    # needs escaping: an f-string is a tenth of the cost of Markup.format, twenty times a page.
    # The shown part is cut from the ISO text (strftime was a fifth of a row's rendering); below
    # year 1000 ISO pads the year and strftime does not, so those keep strftime.
    utc = value if value.tzinfo is dt.UTC else value.astimezone(dt.UTC)
    iso = iso_utc(utc)
    shown = f"{iso[:10]} {iso[11:16]}" if utc.year >= 1000 else f"{utc:%Y-%m-%d %H:%M}"
    return Markup(f'<time datetime="{iso}">{shown} UTC</time>')
