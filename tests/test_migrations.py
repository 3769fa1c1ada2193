"""The schema has one source: the migrations. The models must describe exactly what they build,
and the commands `make run` uses work through Flask's own CLI runner."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask import Flask
from sqlalchemy import Engine, delete, func, inspect, select, text
from sqlalchemy.orm import Session

from orders.data.db import make_engine, migrate
from orders.data.models import Base, Order

from .databases import ENGINES, migrated_database, throwaway_database
from .fixtures import make_app
from .helpers import BASE


@pytest.fixture(params=ENGINES)
def empty_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
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


def schema_of(engine: Engine) -> dict[str, object]:
    """Every table's columns, indexes, keys and foreign keys, the triggers (name and definition),
    PostgreSQL's functions, and the migration the database is at."""
    triggers = {
        "sqlite": "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'",
        "postgresql": "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal",
        "mysql": "SELECT trigger_name, action_statement, action_order FROM information_schema.triggers "
        "WHERE trigger_schema = DATABASE()",
    }[engine.dialect.name]
    functions = "SELECT proname, prosrc FROM pg_proc WHERE pronamespace = CAST('public' AS regnamespace)"
    with engine.connect() as conn:
        insp = inspect(conn)
        return {
            "tables": {
                table: (
                    [
                        (c["name"], str(c["type"]), c["nullable"], c.get("default"))
                        for c in insp.get_columns(table)
                    ],
                    sorted(
                        (i["name"], tuple(i["column_names"]), i["unique"]) for i in insp.get_indexes(table)
                    ),
                    insp.get_pk_constraint(table)["constrained_columns"],
                    sorted(str(sorted(fk.items())) for fk in insp.get_foreign_keys(table)),
                )
                for table in insp.get_table_names()
            },
            "triggers": sorted(tuple(row) for row in conn.execute(text(triggers))),
            "functions": sorted(tuple(row) for row in conn.execute(text(functions)))
            if engine.dialect.name == "postgresql"
            else [],
            "revision": conn.scalar(text("SELECT version_num FROM alembic_version")),
        }


@pytest.mark.parametrize("kind", ENGINES)
def test_a_copy_of_the_migrated_template_is_the_migrated_schema(kind: str, tmp_path) -> None:
    """tests/databases.py migrated_database copies a template instead of migrating: the copy has
    what the migrations build, down to the triggers, and its triggers work."""
    with throwaway_database(kind, tmp_path, "original") as url:
        original = make_engine(url)
        migrate(original)
        expected = schema_of(original)
        original.dispose()
    with migrated_database(kind, tmp_path, "copy") as url:
        copy = make_engine(url)
        try:
            assert schema_of(copy) == expected
            with Session(copy) as session:
                session.add(Order(customer="Ana Souza", amount=1, status="paid", created_at=BASE))
                session.commit()
                counted = session.scalar(text("SELECT sum(n) FROM order_counts WHERE status = 'paid'"))
                words = session.scalar(text("SELECT count(*) FROM order_words"))
                assert (counted, words > 0) == (1, True)
                session.execute(delete(Order))
                session.commit()
                assert session.scalar(text("SELECT count(*) FROM order_words")) == 0
        finally:
            copy.dispose()
