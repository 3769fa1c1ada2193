"""Throwaway databases on a PostgreSQL or MariaDB/MySQL server, by name."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def create_database(server_url: str, name: str) -> str:
    """Create the empty database `name` on the server of `server_url`; return its URL."""
    server = make_url(server_url)
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if server.get_backend_name() == "postgresql":
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            else:
                conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    finally:
        admin.dispose()
    return server.set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, name: str) -> None:
    """Drop `name` if it exists. PostgreSQL: WITH (FORCE), since a server process or export that
    died may still hold a connection."""
    server = make_url(server_url)
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if server.get_backend_name() == "postgresql":
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            else:
                conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
    finally:
        admin.dispose()
