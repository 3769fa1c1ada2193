"""Development helpers shared by the tests, the benchmark and the soak; not part of the app.

- ``databases``: create and drop uniquely named databases on a PostgreSQL or MariaDB server;
- ``gunicorn``: the app under gunicorn on a free loopback port, stopped with its workers.
"""
