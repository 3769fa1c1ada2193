"""What every page's templates may use: the registries for the controls, and the value filters."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from flask import Flask, current_app, url_for
from markupsafe import Markup

from orders.data.db import get_session
from orders.data.models import STATUSES
from orders.data.types import iso_utc
from orders.finding import rail
from orders.finding.estimates import rounded
from orders.finding.goto import GOTO_FIELDS
from orders.finding.request import ListRequest
from orders.finding.sorts import SORTS


def init_app(app: Flask) -> None:
    # The Sort and Status controls list what the registries hold (set once, not per render).
    app.jinja_env.globals.update(sorts=list(SORTS.values()), statuses=STATUSES)
    app.jinja_env.globals.update(goto_fields=GOTO_FIELDS)  # the go-to input, by kind
    app.add_template_filter(money, "money")
    app.add_template_filter(timestamp, "timestamp")
    app.jinja_env.globals.update(htmx_config=htmx_config)
    # The list page's rail (templates/_rail.html): read when the page renders, not per fragment.
    app.jinja_env.globals.update(page_rail=page_rail)
    env = app.jinja_env

    def sentinel(up: bool, url: str) -> Markup:
        """templates/_sentinel.html's macro, as a global rather than imported by the templates that
        draw it: an import costs every render Jinja's check of the page's globals against the
        imported template's (_get_default_module: a set difference over a ChainMap, 1.5% of a
        fragment). The template is looked up per call, so its edits reload as any template's."""
        drawn: Markup = env.get_template("_sentinel.html").module.sentinel(up, url)  # type: ignore[attr-defined]  # a macro of the module
        return drawn

    app.jinja_env.globals.update(sentinel=sentinel)


# How long past the server's own bound htmx still waits: the server's answer, not htmx's timeout,
# is what ends a request (a gunicorn thread, haproxy's queue and the network come on top).
HTMX_TIMEOUT_MARGIN_MS = 10_000


def server_bound_ms(config: Any) -> int:
    """The longest a page waits on the database before the app answers 503 (docs/operations.md,
    "Hangs"): a pooled connection, a new one, then any answer of the database."""
    waits_s = config["DATABASE_POOL_TIMEOUT_S"] + config["DATABASE_CONNECT_TIMEOUT_S"]
    return int(waits_s * 1000 + config["DATABASE_READ_TIMEOUT_MS"])


def htmx_config() -> dict[str, Any]:
    """htmx's settings, the page's <meta name="htmx-config"> (htmx 4: static/htmx-4.0.1.min.js).

    - No injected style: the Content-Security-Policy allows our own files only (app.css styles the
      loading rows itself). htmx 4 has no eval setting: it compiles code only for hx-on, `js:`
      values and trigger filters, none of which the templates use (the CSP would refuse them).
    - Only our own extension (static/js/scroll-window.js registers "scroll-window").
    - History by a full GET (htmx 4 keeps no snapshot): Back asks the server for the address,
      which opens at the row it names (docs/scroll.md has the measurement that decided it).
    - A request's timeout outlasts the server's own bound: with the database frozen, an order
      opened from the list waited 15 s for htmx to give up silently while the server would have
      answered its 503 page after 20 (static/js/navigation.js shows that page).
    """
    return {
        "includeIndicatorCSS": False,
        "extensions": "scroll-window",
        "defaultTimeout": server_bound_ms(current_app.config) + HTMX_TIMEOUT_MARGIN_MS,
    }


@dataclass(frozen=True)
class PageRail:
    """The rail as the list page shows it (templates/_rail.html)."""

    rail: rail.Rail
    links: list[str]  # one per bucket: the list opened at its first row
    list_url: str  # the list with its sort and status: the script adds a cursor it asked for again
    api_url: str  # GET /api/orders/rail of this sort and status (the script asks again by ETag)

    @staticmethod
    def about(n: int) -> str:
        shown = rounded(n)
        return f"{'about ' if shown != n else ''}{shown:,}"


def page_rail(listing: ListRequest) -> PageRail:
    """The rail of the list a full page shows (orders/finding/rail.py), read as the page renders
    (a fragment has none); no buckets for a search."""
    built = rail.build(listing, get_session().connection())
    args = listing.query_args()
    list_url = url_for("list_page.orders", **args)
    # Cursors are URL-safe base64: the link is the list's URL and `after`, as url_for makes it.
    joined = f"{list_url}{'&' if args else '?'}after="
    links = [joined + bucket.cursor for bucket in built.buckets]
    return PageRail(built, links, list_url, url_for("api.list_rail", **args))


def money(amount: Decimal) -> str:
    return f"{amount:,.2f}"


def timestamp(value: dt.datetime) -> Markup:
    """A <time> in UTC; static/js/enhance.js shows it in the reader's own timezone."""
    # Both parts are made from the datetime alone (digits, "-", ":", "T", "Z"), so nothing in them
    # needs escaping: an f-string, not Markup.format's escaping of each part, twenty times a page.
    # The shown part is cut from the ISO text already made rather than formatted again by
    # strftime; below year 1000 ISO pads the year and strftime does not, so those keep strftime.
    utc = value if value.tzinfo is dt.UTC else value.astimezone(dt.UTC)
    iso = iso_utc(utc)
    shown = f"{iso[:10]} {iso[11:16]}" if utc.year >= 1000 else f"{utc:%Y-%m-%d %H:%M}"
    return Markup(f'<time datetime="{iso}">{shown} UTC</time>')
