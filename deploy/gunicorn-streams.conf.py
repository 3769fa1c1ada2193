"""gunicorn settings for the stream server: the same app, serving only the live streams of new
orders (GET /orders/stream, orders/views/stream.py), which deploy/haproxy.cfg routes here.

    python serve.py --config deploy/gunicorn-streams.conf.py --bind 127.0.0.1:8002

Why a server of its own: a stream waits for as long as its list is open (minutes). In the list's
gunicorn (gunicorn.conf.py: gthread, WEB_THREADS per worker) each would hold a request thread, and
a few dozen open lists would leave none for the list itself. Here a gevent worker holds each
stream as a greenlet: about 25 KB and no thread (500 open streams measured in docs/scroll.md,
"New orders, pushed"). The list's gunicorn refuses the route (503), so a stream never lands
there by mistake.

One worker by default: each worker keeps one watcher (one LISTEN connection on PostgreSQL, one
check a second elsewhere) for up to STREAMS_PER_PROCESS streams; set WEB_CONCURRENCY for more.
Everything else (logs, metrics, control socket, limits) is gunicorn.conf.py's, read first.
"""

import importlib
import runpy
import sys
from pathlib import Path
from typing import Any

_COMMON = Path(__file__).resolve().parent.parent / "gunicorn.conf.py"
globals().update(
    {name: value for name, value in runpy.run_path(str(_COMMON)).items() if not name.startswith("__")}
)
_settings = globals()["_settings"]
_common_post_worker_init = globals()["post_worker_init"]


def post_worker_init(worker: Any) -> None:
    """gunicorn.conf.py's, and psycopg's waits chosen again now that gevent has patched.

    psycopg chooses how it waits for the server when first imported, which serve.py does in the
    master (it loads DATABASE_URL's driver to check it), before the worker is patched: its C wait
    for statements, the unpatched selector bound for connecting. Either stops every stream of the
    worker while PostgreSQL does not answer: each reconnect of the watcher held it for the whole
    connect timeout (tests/test_stream_server.py). psycopg supports gevent when imported after
    the patch: it sees it and waits on gevent's poll() and selector, which yield. So its module
    of waits is run again here, every choice in it psycopg's own."""
    _common_post_worker_init(worker)
    waiting = sys.modules.get("psycopg.waiting")
    if waiting is not None:  # psycopg calls waiting.wait(...) and waiting.wait_conn(...) each time
        importlib.reload(waiting)


worker_class = "gevent"
workers = _settings["WEB_CONCURRENCY"] or 1
# Connections one worker accepts at once: its streams, the refusals beside them (the front sends
# up to STREAMS_PER_PROCESS + 50 per worker, STREAM_MAXCONN in docs/operations.md, so one stream
# too many gets the app's 503 at once), and as many again for streams the front has already
# closed and this worker has not yet noticed (within changes.TICK_S): with fewer, a connection
# the front sent waited unaccepted in the backlog while gone clients' streams were let go.
worker_connections = 2 * (_settings["STREAMS_PER_PROCESS"] + 50)
# gevent's worker answers gunicorn's heartbeat from its own loop, whatever the streams do.
timeout = 30
# A stream has nothing to finish: on a restart its browser opens another within a second (and
# polls meanwhile), so the worker waits 5 s for open streams, not gunicorn.conf.py's 30.
graceful_timeout = 5
