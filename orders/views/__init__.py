"""HTTP views, one module per audience and job; none imports another.

list_page   the HTML list: pages, htmx fragments, "Go to", the new-orders banner
order_page  one order's page (or the page that says it is gone)
exports     the CSV download
api         the JSON API: list, one order, create, delete
openapi     /openapi.json
health      /healthz (readiness), /healthz/live (liveness) and /healthz/nodes
stream      /orders/stream: the live stream that tells an open list of new orders
templating  the filters and globals every template may use
"""

from __future__ import annotations

from flask import Blueprint

from orders.views import api, exports, health, list_page, openapi, order_page, stream

BLUEPRINTS: tuple[Blueprint, ...] = (
    list_page.bp,
    order_page.bp,
    exports.bp,
    api.bp,
    openapi.bp,
    health.bp,
    stream.bp,
)
