"""The floor for the fragment: a bare Flask app, one route answering "hello", nothing else.

No hooks, no database, no template, no session, no rate limiter, no headers added: what Flask
and gunicorn cost at least per request. The HTTP level serves it with the same gunicorn command
as the app (bench/http_level.py), so a fragment's share of its requests per second is what the
app's own work (hooks, query, cursor, template) leaves of the bare framework's speed.
``bench.floor_app:create()`` is what the benchmark's second gunicorn loads.
"""

from __future__ import annotations

from flask import Flask

FLOOR_PATH = "/hello"
# The floor's name in the results; results from before it was the bare app name "trivial Flask
# route" (a route inside the app, behind its hooks): reports read both, and say which.
FLOOR_NAMES = ("bare Flask app", "trivial Flask route")


def create() -> Flask:
    app = Flask(__name__)
    app.add_url_rule(FLOOR_PATH, "hello", lambda: "hello")
    return app
