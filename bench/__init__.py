"""Benchmarks of keyset pagination against OFFSET and sqlakeyset, on SQLite, PostgreSQL and MariaDB.

Run ``python -m bench.run`` (full: about 7 minutes on 2 cores, longer if it has to wait for other
work on the machine to stop) or ``python -m bench.run --quick`` (about 40 seconds) from the
repository root. Results go to ``bench/results/``: ``summary.json`` (raw/results.json untracked),
``report.md`` and ``latency.png`` (the quick run into ``bench/results/quick/``, untracked).

Modules, one per level of the measurement:

- ``run``: command line, orchestration, the plan (table sizes, depths, repetitions)
- ``databases``: throwaway databases per engine, seeding, ANALYZE, server versions
- ``common``: the query under test, positions and cursors, SQL capture, interleaved timing
- ``db_level``: the SQL each method sends, re-run raw with its plan and rows read
- ``py_level``: ``paginate()`` against ``sqlakeyset.select_page()`` and a plain OFFSET query
- ``http_level``: the app under gunicorn with wrk, and an in-process pyinstrument profile
- ``metrics_level``: the fragment's req/s and CPU per request with METRICS on and off, interleaved
- ``export_level``: ``flask export`` rows per second and peak memory
- ``targets``: the targets of issue 4 as PASS/MISS, with the measured values
- ``report``: Markdown tables and the files; ``plot``: latency.png; ``formatting``: helpers
- ``readme``: the README's Performance numbers, generated from summary.json
"""
