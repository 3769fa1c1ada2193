"""The schema has one source: the migrations. The models must describe exactly what they build,
and the commands `make run` uses work through Flask's own CLI runner."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orders.data.db import make_engine, migrate
from orders.data.models import Base, Order

from .databases import ENGINES, throwaway_database
from .fixtures import make_app


@pytest.fixture(params=ENGINES)
def empty_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    with throwaway_database(request.param, tmp_path, "schema") as url:
        yield url


def test_migrations_build_exactly_the_models(empty_url: str) -> None:
    """Alembic's autogenerate, the comparison `alembic revision --autogenerate` makes, finds
    nothing to add, drop or change between the migrated database and orders/data/models.py."""
    engine = make_engine(empty_url)
    migrate(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    engine.dispose()
    assert differences == [], differences


def test_init_db_and_seed_if_empty_through_the_cli_runner(empty_url: str) -> None:
    app: Flask = make_app(empty_url)
    runner = app.test_cli_runner()
    # Idempotent (make run calls it on every start), and each run says what it did.
    for said in ("created the database", "already at the newest migration"):
        result = runner.invoke(args=["init-db"])
        assert result.exit_code == 0, result.output
        assert said in result.output, result.output
    result = runner.invoke(args=["seed", "--rows", "30", "--if-empty"])
    assert result.exit_code == 0, result.output
    assert "seeded 30 orders" in result.output
    result = runner.invoke(args=["seed", "--rows", "30", "--if-empty"])
    assert result.exit_code == 0 and "not seeding" in result.output
    with Session(app.extensions["engine"]) as session:
        assert session.scalar(select(func.count()).select_from(Order)) == 30
    app.extensions["engine"].dispose()
