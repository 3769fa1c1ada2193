"""The entry point that `flask --app app` and gunicorn's `app:create_app()` load. The app itself
is built by orders.app.create_app (the orders package installs like Flask's tutorial app); this
shell-facing wrapper turns a bad setting into one line on stderr and exit status 2, unless
FLASK_DEBUG=1 asks for the traceback."""

from __future__ import annotations

import os
import sys

from flask import Flask

from orders.app import create_app as _create_app
from orders.core.settings import SettingsError


def create_app() -> Flask:
    try:
        return _create_app()
    except SettingsError as err:
        if os.environ.get("FLASK_DEBUG", "").lower() in ("1", "true", "yes"):
            raise
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
