"""The entry point that `flask --app app` and gunicorn's `app:create_app()` load. The app itself
is built by orders.app.create_app (the orders package installs like Flask's tutorial app); this
shell-facing wrapper turns a bad setting into one line on stderr and exit status 2, unless
FLASK_DEBUG=1 asks for the traceback, and refuses `flask run` in production the same way."""

from __future__ import annotations

import os
import sys

import click
from flask import Flask
from flask.cli import run_command

from orders.app import create_app as _create_app
from orders.core.settings import SettingsError
from serve import PRODUCTION_START


def create_app() -> Flask:
    try:
        app = _create_app()
    except SettingsError as err:
        if os.environ.get("FLASK_DEBUG", "").lower() in ("1", "true", "yes"):
            raise
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    # `flask run` loads the app inside its own command: Werkzeug's development server, one
    # process without serve.py's checks, and it served production. The other commands
    # (init-db, seed, export, fold-rail) are production's tools and go on.
    context = click.get_current_context(silent=True)
    if app.config["PRODUCTION"] and context is not None and context.command is run_command:
        print(f"Error: {PRODUCTION_START}; `flask run` is Werkzeug's development server", file=sys.stderr)
        raise SystemExit(2)
    return app
