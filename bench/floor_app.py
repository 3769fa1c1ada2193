"""The app as gunicorn serves it, plus one trivial route: the honest floor for the fragment.

``/bench/trivial`` answers a few bytes with no database, no template and no cursor, through the
same Flask app, its hooks (security headers, rate limiter, Cache-Control) and the same gunicorn:
what any route of this app costs at least. It exists only in the benchmark's app, never in the
product's (``bench.floor_app:create()`` is what the benchmark's gunicorn loads).
"""

from __future__ import annotations

from flask import Flask

from orders.app import create_app

TRIVIAL_PATH = "/bench/trivial"


def create() -> Flask:
    app = create_app()
    app.add_url_rule(TRIVIAL_PATH, "bench_trivial", lambda: "ok")
    return app
