"""gunicorn settings for the stream server: the same app, serving only the live streams of new
orders (GET /orders/stream, orders/views/stream.py), which deploy/haproxy.cfg routes here.

    gunicorn -c deploy/gunicorn-streams.conf.py --bind 127.0.0.1:8001 'app:create_app()'

Why a server of its own: a stream waits for as long as its list is open (minutes). In the list's
gunicorn (gunicorn.conf.py: gthread, WEB_THREADS per worker) each would hold a request thread, and
a few dozen open lists would leave none for the list itself. Here a gevent worker holds each
stream as a greenlet: a few kilobytes and no thread (500 open streams measured in docs/scroll.md,
"New orders, pushed"). The list's gunicorn refuses the route (503), so a stream never lands
there by mistake.

One worker by default: each worker keeps one watcher (one LISTEN connection on PostgreSQL, one
check a second elsewhere) for up to STREAMS_PER_PROCESS streams; set WEB_CONCURRENCY for more.
Everything else (logs, metrics, control socket, limits) is gunicorn.conf.py's, read first.
"""

import os
import runpy
from pathlib import Path

# psycopg picks its way of waiting when first imported, which reading the settings does (the
# database URL's driver is loaded to check it) in the master, before gevent patches the worker:
# poll() is then looked up at each wait, and the patched one yields to the streams. Its C wait
# (the default) would stop every stream of the worker while the watcher waits for PostgreSQL.
os.environ.setdefault("PSYCOPG_WAIT_FUNC", "wait_poll")

_COMMON = Path(__file__).resolve().parent.parent / "gunicorn.conf.py"
globals().update(
    {name: value for name, value in runpy.run_path(str(_COMMON)).items() if not name.startswith("__")}
)
_settings = globals()["_settings"]

worker_class = "gevent"
workers = _settings["WEB_CONCURRENCY"] or 1
# Connections one worker serves at once: its streams, and a few requests refused beside them.
worker_connections = _settings["STREAMS_PER_PROCESS"] + 50
# gevent's worker answers gunicorn's heartbeat from its own loop, whatever the streams do.
timeout = 30
