"""Throwaway databases on a PostgreSQL or MariaDB/MySQL server, by name."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url


def _on_server(server_url: str, *, postgresql: str, mysql: str) -> URL:
    """Run the statement for the server's kind outside a transaction; return the server URL."""
    server = make_url(server_url)
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(postgresql if server.get_backend_name() == "postgresql" else mysql))
    finally:
        admin.dispose()
    return server


def create_database(server_url: str, name: str) -> str:
    """Create the empty database `name` on the server of `server_url`; return its URL."""
    server = _on_server(
        server_url,
        postgresql=f'CREATE DATABASE "{name}"',
        mysql=f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4",
    )
    return server.set(database=name).render_as_string(hide_password=False)


def drop_database(server_url: str, name: str) -> None:
    """Drop `name` if it exists. PostgreSQL: WITH (FORCE), since a server process or export that
    died may still hold a connection."""
    _on_server(
        server_url,
        postgresql=f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        mysql=f"DROP DATABASE IF EXISTS `{name}`",
    )
