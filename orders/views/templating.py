"""What every page's templates may use: the registries for the controls, and the value filters."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from flask import Flask
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
