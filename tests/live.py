"""The app served for real on a free port in a background thread (for browser and HTTP tests)."""

from __future__ import annotations

import threading
from typing import Any

from flask import Flask
from werkzeug.serving import make_server


class LiveServer:
    """A threaded Werkzeug server on 127.0.0.1, port chosen by the OS."""

    def __init__(self, app: Flask):
        self.app = app
        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LiveServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)
