"""A request followed by its id: from the front, through the app's JSON log line, back to the
client (header, error page). And /metrics, hidden by the public front.

In process (each engine): the id given is kept when well formed and replaced when not (a forged
log line cannot get in), returned on every answer, shown on the error page, written in the
request's JSON line and in every line logged during the request. Through the shipped front and
gunicorn: the front replaces a client's id with its own, and its log, the app's log and the
answer all carry the same one; /metrics answers 404 through the front, 200 directly.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask
from sqlalchemy.engine import Engine

from devtools.front import front
from devtools.gunicorn import gunicorn
from orders.web.request_log import HEADER, json_logs

from .fixtures import clear
from .helpers import seed
from .logs import whole_lines

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_the_id_given_is_kept_returned_and_logged(app: Flask, engine: Engine) -> None:
    seed(engine, 30)
    with _captured(app) as found:
        answer = app.test_client().get("/orders?after=x", headers={HEADER: "req-42.a:b"})
        listed = app.test_client().get("/api/orders?limit=5")
    assert answer.headers[HEADER] == "req-42.a:b"
    assert answer.status_code == 400
    assert b"req-42.a:b" in answer.data  # the error page shows it, for the user to quote
    made = listed.headers[HEADER]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    by_id = {line["request_id"]: line for line in found if line["logger"] == "orders.request"}
    assert by_id["req-42.a:b"]["status"] == 400 and by_id["req-42.a:b"]["kind"] == "page"
    line = by_id[made]
    assert (line["status"], line["kind"], line["rows"], line["depth"], line["route"]) == (
        200, "api", 5, "first", "api.list_orders",
    )  # fmt: skip
    assert line["engine"] == engine.dialect.name and line["duration_ms"] > 0


@pytest.mark.parametrize("forged", ["a b", 'x" {"level": "error"}', "é", "z" * 65, ""])
def test_a_malformed_id_is_replaced(app: Flask, forged: str) -> None:
    answer = app.test_client().get("/healthz/nodes", headers={HEADER: forged})
    assert re.fullmatch(r"[0-9a-f]{32}", answer.headers[HEADER])


def test_lines_logged_during_a_request_carry_its_id(db_url: str, tmp_path: Path) -> None:
    from .fixtures import make_app

    if not db_url.startswith("postgresql"):
        pytest.skip("a database that refuses connections: a PostgreSQL URL to a closed port")
    app = make_app("postgresql+psycopg://postgres@127.0.0.1:9/none", DATABASE_CONNECT_TIMEOUT_S=2)
    with _captured(app) as found:
        answer = app.test_client().get("/orders", headers={HEADER: "outage-1"})
    assert answer.status_code == 503 and b"outage-1" in answer.data
    warned = [line for line in found if line["level"] == "warning"]
    assert warned and all(line["request_id"] == "outage-1" for line in warned)


class _captured:
    """The JSON lines of the `orders` loggers while the block runs, formatted as in production."""

    def __init__(self, app: Flask) -> None:
        self.stream = io.StringIO()
        self.found: list[dict[str, object]] = []

    def __enter__(self) -> list[dict[str, object]]:
        self.handler = logging.StreamHandler(self.stream)
        json_logs([self.handler], "json")
        self.logger = logging.getLogger("orders")
        self.level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)
        return self.found

    def __exit__(self, *exc: object) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)
        self.found.extend(json.loads(line) for line in self.stream.getvalue().splitlines())


@pytest.fixture
def behind_front(db_url: str, engine: Engine, tmp_path: Path) -> Iterator[tuple[str, str, Path, Path]]:
    clear(engine)
    seed(engine, 30)
    app_log, front_log = tmp_path / "gunicorn.log", tmp_path / "haproxy.log"
    env = {"LOG_FORMAT": "json", "TRUSTED_PROXIES": "1"}
    with gunicorn(db_url, log_path=app_log, workers=2, threads=4, env=env) as (base, _master):  # noqa: SIM117  # the front needs gunicorn's address
        with front(base.removeprefix("http://"), maxconn=8, log_path=front_log) as public:
            yield public, base, app_log, front_log


def test_the_fronts_id_reaches_the_log_lines_and_the_client(
    behind_front: tuple[str, str, Path, Path],
) -> None:
    public, direct, app_log, front_log = behind_front
    answer = requests.get(f"{public}/api/orders?limit=3", headers={HEADER: "client-chosen"}, timeout=30)
    rid = answer.headers[HEADER]
    assert answer.status_code == 200 and UUID.fullmatch(rid), rid  # the front's, not the client's
    refused = requests.get(f"{public}/api/orders?limit=x", timeout=30)
    assert refused.status_code == 400 and UUID.fullmatch(refused.headers[HEADER])
    for path in ("/metrics", "/%6detrics", "//metrics"):
        hidden = requests.get(public + path, timeout=30)
        assert hidden.status_code == 404, path
        assert UUID.fullmatch(hidden.headers[HEADER])  # the front's own answers carry one too
    assert requests.get(f"{direct}/metrics", timeout=30).status_code == 200
    logged = [json.loads(line) for line in whole_lines(app_log) if line.startswith("{")]
    mine = [line for line in logged if line.get("request_id") == rid]
    assert [(line["logger"], line["status"], line["rows"]) for line in mine] == [("orders.request", 200, 3)]
    # haproxy writes its line once the answer is sent: looked for a few seconds at most.
    deadline = time.monotonic() + 5
    while not any(line.rstrip().endswith(rid) for line in whole_lines(front_log)):
        assert time.monotonic() < deadline, "the front's log line has no request id"
        time.sleep(0.1)


def test_the_fronts_log_keeps_paths_and_masks_query_values(
    behind_front: tuple[str, str, Path, Path],
) -> None:
    """A token a client wrongly puts in the query (issue 58: it landed in the front's log whole):
    the front logs the path and the parameters' names, never a value; the app logs the path."""
    public, _direct, app_log, front_log = behind_front
    secret = "s3cr3t-t0ken-in-the-query"
    answer = requests.get(f"{public}/api/orders?limit=2&token={secret}&after", timeout=30)
    rid = answer.headers[HEADER]
    deadline = time.monotonic() + 5
    while not (mine := [line for line in whole_lines(front_log) if line.rstrip().endswith(rid)]):
        assert time.monotonic() < deadline, "the front's log line has no request id"
        time.sleep(0.1)
    assert '"GET /api/orders?limit=*&token=*&after HTTP/1.1"' in mine[0], mine[0]
    assert secret not in "\n".join(whole_lines(front_log) + whole_lines(app_log))
