"""Benchmarks of keyset pagination against OFFSET and sqlakeyset, on SQLite, PostgreSQL and MariaDB.

Run ``python -m bench.run`` (full, about 15 minutes) or ``python -m bench.run --quick`` (about a
minute) from the repository root. Results go to ``bench/results/``: ``results.json``,
``report.md`` and ``latency.png`` (``*-quick.*`` for the quick run).

Modules, one per level of the measurement:

- ``run``: command line, orchestration, the plan (table sizes, depths, repetitions)
- ``databases``: throwaway databases per engine, seeding, ANALYZE, server versions
- ``common``: the query under test, positions and cursors, SQL capture, interleaved timing
- ``db_level``: the SQL each method sends, re-run raw with its plan and rows read
- ``py_level``: ``paginate()`` against ``sqlakeyset.select_page()`` and a plain OFFSET query
- ``http_level``: the app under gunicorn with wrk, and an in-process pyinstrument profile
- ``export_level``: ``flask export`` rows per second and peak memory
- ``report``: targets (PASS/MISS), Markdown tables, the latency plot
"""
