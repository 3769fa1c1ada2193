"""create_app(): the settings (checked), the database, the views, the request path and the CLI, wired once.

`flask --app app` and gunicorn's `app:create_app()` reach this through the thin app.py at the
repository's root; tests and tools call it with a mapping of settings instead of the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask

from orders import cli
from orders.core import settings
from orders.core.secret_key import dev_secret
from orders.data import db
from orders.data.replicas import router as replicas
from orders.views import BLUEPRINTS, templating
from orders.web import request_path
from pagination import CursorCodec

ROOT = Path(__file__).resolve().parent.parent
# Larger bodies get 413 (chunked ones too); one home in orders/core/settings.py, as the front's.
MAX_CONTENT_LENGTH = settings.MAX_BODY_BYTES


class OrdersApp(Flask):
    """Flask, with views and hooks run as they are: Flask asks `inspect.iscoroutinefunction` of the
    view and of every hook on every request (about 1 us each, eight a list read) to run an async
    one through asgiref. The app has none (tests/test_cost_budget.py holds that); an async view
    would answer a coroutine, which Flask refuses loudly."""

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        return func


def create_app(test_config: dict[str, Any] | None = None) -> Flask:
    """The app, configured from the environment, or from `test_config` alone when given.
    Raises settings.SettingsError (one line naming the setting) on a bad value."""
    app = OrdersApp(
        __name__,
        instance_path=str(ROOT / "instance"),
        template_folder=str(ROOT / "templates"),
        static_folder=str(ROOT / "static"),
    )
    given = settings.from_environment() if test_config is None else dict(test_config)
    config = settings.resolve(given)
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    if config["DATABASE_URL"] is None:
        config["DATABASE_URL"] = f"sqlite:///{Path(app.instance_path) / 'orders.db'}"
    if not config.get("SECRET_KEY"):
        config["SECRET_KEY"] = dev_secret(Path(app.instance_path))
    # Host names are case-insensitive (RFC 9110, 7.2): compared lowercase (request_path's LowercaseHost).
    config["TRUSTED_HOSTS"] = [host.lower() for host in config["TRUSTED_HOSTS"]]
    config["SECRET_KEY_FALLBACKS"] = list(config["SECRET_KEY_FALLBACKS"])
    config["PRODUCTION"] = config["APP_ENV"] == settings.PRODUCTION
    config["MAX_CONTENT_LENGTH"] = MAX_CONTENT_LENGTH
    app.config.update(config)
    # Older keys open cursors, never seal them: a rolling key rotation loses no reader's place.
    app.extensions["cursor_codec"] = CursorCodec(
        app.config["SECRET_KEY"], fallbacks=app.config["SECRET_KEY_FALLBACKS"]
    )
    request_path.converters(app)
    db.init_app(app)
    replicas.init_app(app)
    templating.init_app(app)
    for blueprint in BLUEPRINTS:
        app.register_blueprint(blueprint)
    # After the blueprints: the read policy wraps their list views.
    request_path.install(app)
    cli.init_app(app)
    return app
