"""The stream server as production runs it (deploy/gunicorn-streams.conf.py, deploy/haproxy.cfg):
the list's gunicorn refuses streams, the gevent server holds them and frees a gone client's place
by reading its socket, and the front routes /orders/stream there without buffering it.

Each starts gunicorn (and haproxy) of its own: left out of `make test-quick` (conftest.py).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devtools.gunicorn import gunicorn

from .test_stream import next_message, post_order, stream


@contextmanager
def servers(db_url: str, tmp_path: Path, env: dict[str, str], *, threads: int) -> Iterator[tuple[str, str]]:
    """The list's gunicorn (gthread, `threads`) and the stream server (gevent), one worker each."""
    with (
        gunicorn(db_url, log_path=tmp_path / "list.log", workers=1, threads=threads, env=env) as (
            list_url,
            _,
        ),
        gunicorn(
            db_url,
            log_path=tmp_path / "streams.log",
            workers=1,
            env=env,
            config="deploy/gunicorn-streams.conf.py",
        ) as (stream_url, _),
    ):
        yield list_url, stream_url


def test_the_production_recipe_list_refuses_and_the_gevent_server_streams(
    db_url: str, tmp_path: Path
) -> None:
    # One stream per process: a place freed when its client goes is seen by the next one's 200
    # (heartbeats too rare to find the gone client within the test: only its socket read can).
    env = {
        "STREAM_HEARTBEAT_SECONDS": "55",
        "RATELIMIT_READS": "100000 per minute",
        "STREAMS_PER_PROCESS": "1",
    }
    with servers(db_url, tmp_path, env, threads=2) as (list_url, stream_url):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(list_url + "/orders/stream", timeout=15)
        refused.value.close()
        assert refused.value.code == 503
        with stream(stream_url) as response:
            assert response.status == 200
            next_message(response)
            next_message(response)
            order_id = post_order(list_url)
            told = next_message(response)
            while "comment" in told:
                told = next_message(response)
            assert told["data"] == str(order_id)
            with stream(stream_url) as refused_stream:
                assert refused_stream.status == 503
        # Gone: the gevent worker sees the closed socket (gunicorn's environ hands it over).
        for _ in range(50):
            with stream(stream_url) as again:
                if again.status == 200:
                    break
            time.sleep(0.1)
        assert again.status == 200
        assert "Using worker: gevent" in (tmp_path / "streams.log").read_text()


def test_the_front_sends_streams_to_the_stream_server_and_passes_events_at_once(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/haproxy.cfg: /orders/stream to STREAM_SERVER, unbuffered; unset, to the list's
    gunicorn, which refuses it."""
    if not db_url.startswith("sqlite"):
        pytest.skip("the route is the front's, the same for every engine: SQLite shows it")
    from devtools.front import FrontUnavailable, front

    env = {"STREAM_HEARTBEAT_SECONDS": "55", "RATELIMIT_READS": "100000 per minute"}
    with servers(db_url, tmp_path, env, threads=4) as (list_url, stream_url):
        app_server = list_url.removeprefix("http://")
        try:
            with (
                front(app_server, maxconn=4, log_path=tmp_path / "front.log") as via_front,
                stream(via_front) as refused,
            ):
                assert refused.status == 503  # no STREAM_SERVER: the list's gunicorn refuses
            monkeypatch.setenv("STREAM_SERVER", stream_url.removeprefix("http://"))
            with (
                front(app_server, maxconn=4, log_path=tmp_path / "front2.log") as via_front,
                stream(via_front) as response,
            ):
                assert response.status == 200
                next_message(response)
                next_message(response)
                order_id = post_order(list_url)
                assert next_message(response)["data"] == str(order_id)
        except FrontUnavailable as err:
            pytest.skip(str(err))
