"""A bug is not an outage: 503 only for what retrying can fix, 500 (trace logged) for the rest.

Real errors from real servers, on PostgreSQL and MariaDB: a column the code reads but the
database lacks (a deploy that forgot its migration) is a 500 whose trace is in the log; a
read-only server, a lock wait that times out and a server that refuses connections are 503
`unavailable` with Retry-After. Also: the one error table is what docs/http-api.md lists.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import create_engine, event, text

from orders.core.errors import ERRORS
from orders.views.openapi import SPEC

from . import fixtures
from .databases import SERVERS, family, migrated_database
from .fixtures import AUTH, with_token

README = Path(__file__).resolve().parent.parent / "docs" / "http-api.md"  # the error table
ORDER = {"customer": "Ana", "amount": "1.00"}


@pytest.fixture(scope="module", params=SERVERS)
def server_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    with migrated_database(request.param, tmp_path_factory.mktemp("kinds"), "kinds") as url:
        yield family(request.param), url


@pytest.fixture
def new_app(server_db: tuple[str, str]) -> Iterator:
    made: list[Flask] = []

    def make(on_connect: str | None = None) -> Flask:
        app = with_token(fixtures.make_app(server_db[1]))
        if on_connect:
            # Every connection the app opens runs this first (the pool opens them lazily).
            @event.listens_for(app.extensions["engine"], "connect")
            def _setup(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute(on_connect)
                cur.close()
                dbapi_conn.commit()  # PostgreSQL undoes a SET whose transaction rolls back

        made.append(app)
        return app

    yield make
    for app in made:
        assert app.extensions["engine"].pool.checkedout() == 0
        app.extensions["engine"].dispose()


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.get_data()[:300]
    assert response.json["error"]["code"] == "unavailable"
    assert int(response.headers["Retry-After"]) > 0


def test_a_missing_column_is_a_500_with_its_trace_logged(server_db, new_app, caplog) -> None:
    _, url = server_db
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("ALTER TABLE orders RENAME COLUMN customer TO customer_renamed")
    try:
        client = new_app().test_client()
        with caplog.at_level(logging.ERROR, logger="orders.web.errors"):
            response = client.get("/api/orders")
            page = client.get("/orders")
        assert response.status_code == 500, response.get_data()[:300]
        assert response.json["error"]["code"] == "internal_error"
        assert "Retry-After" not in response.headers
        assert "customer" not in response.get_data(as_text=True)  # no SQL, no trace in the answer
        assert page.status_code == 500 and "SELECT" not in page.get_data(as_text=True)
        traced = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
        assert traced, "the trace of a bug must be logged"
        assert "customer" in str(traced[0].exc_info[1])  # the database's own words, in the log
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql("ALTER TABLE orders RENAME COLUMN customer_renamed TO customer")
        admin.dispose()


def test_a_read_only_server_is_unavailable(server_db, new_app) -> None:
    """What a standby in recovery, or a primary being failed over, answers to a write."""
    kind, _ = server_db
    read_only = (
        "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"
        if kind == "postgresql"
        else "SET SESSION TRANSACTION READ ONLY"
    )
    client = new_app(on_connect=read_only).test_client()
    assert_unavailable(client.post("/api/orders", json=ORDER, headers=AUTH))
    assert client.get("/api/orders").status_code == 200  # reads go on


def test_a_lock_wait_that_times_out_is_unavailable(server_db, new_app) -> None:
    kind, url = server_db
    writer = new_app().test_client()
    order_id = writer.post("/api/orders", json=ORDER, headers=AUTH).json["id"]
    short_wait = (
        "SET lock_timeout = '100ms'" if kind == "postgresql" else "SET SESSION innodb_lock_wait_timeout = 1"
    )
    client = new_app(on_connect=short_wait).test_client()
    holder = create_engine(url)
    with holder.connect() as conn:
        conn.execute(text("SELECT id FROM orders WHERE id = :id FOR UPDATE"), {"id": int(order_id)})
        assert_unavailable(client.delete(f"/api/orders/{order_id}", headers=AUTH))
        conn.rollback()
    holder.dispose()
    assert client.delete(f"/api/orders/{order_id}", headers=AUTH).status_code == 204


@pytest.mark.parametrize(
    "url",
    ["postgresql+psycopg://postgres@127.0.0.1:9/none", "mysql+pymysql://root@127.0.0.1:9/none"],
    ids=["postgresql", "mysql"],
)
def test_a_server_that_refuses_connections_is_unavailable(url: str) -> None:
    app = with_token(fixtures.make_app(url))
    client = app.test_client()
    for response in (
        client.get("/healthz"),
        client.get("/api/orders"),
        client.post("/api/orders", json=ORDER, headers=AUTH),
    ):
        assert_unavailable(response)
    app.extensions["engine"].dispose()


# --- One table: handlers, OpenAPI and README agree -------------------------------------------------


def test_the_readme_lists_every_error_code_with_its_status() -> None:
    """docs/http-api.md's table of codes is ERRORS: every code with its status, and nothing else."""
    listed = dict(re.findall(r"^\| `([a-z_]+)` \((\d{3})\) \|", README.read_text(), re.M))
    assert listed == {code: str(kind.status) for code, kind in ERRORS.items()}


def test_openapi_documents_every_code_a_client_of_the_api_can_get() -> None:
    responses = SPEC["components"]["responses"]
    in_spec = {
        code
        for response in responses.values()
        for code in response["content"]["application/json"]["schema"]["allOf"][1]["properties"]["error"][
            "properties"
        ]["code"]["enum"]
    }
    assert in_spec == {code for code, kind in ERRORS.items() if kind.status != 500}
    for status in ("401", "429", "503"):
        assert responses[f"Error{status}"]["headers"], status
