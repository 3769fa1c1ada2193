"""Export: ``flask --app app export --output <file>`` as a separate process, as an operator runs it.

Reported per table size: wall time (Python start-up and imports included), rows per second,
and peak memory. The peak is "Maximum resident set size" from ``/usr/bin/time`` (the child's
rusage, so no polling can miss a short peak). Not ``os.wait4`` from this process: a forked
child starts with its parent's high-water mark, and this process is over 100 MB by then.
Without /usr/bin/time, psutil polls the child every 10 ms instead.
Comparing a 300k export with a 30k one shows whether memory stays flat (one keyset batch
at a time) or grows with the table. The marginal rate between the two sizes removes start-up time.

Then the download, GET /orders/export.csv streamed in-process, side by side with the engine's own
fastest dump of the same columns in the same order (dump_seconds): the share of that speed the
export reaches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from orders.export import EXPORT_BATCH_SIZE

from .common import SECRET, log

ROOT = Path(__file__).resolve().parent.parent
FLASK = ROOT / ".venv" / "bin" / "flask"
TIME = "/usr/bin/time"


def _poll_peak_rss(process: subprocess.Popen[bytes], peak: list[int]) -> None:
    try:
        child = psutil.Process(process.pid)
        while process.poll() is None:
            peak[0] = max(peak[0], child.memory_info().rss)
            time.sleep(0.01)
    except psutil.NoSuchProcess:
        pass


def run_export(url: str, rows: int, tmp_dir: Path, label: str) -> dict[str, Any]:
    output = tmp_dir / f"export-{label}-{rows}.csv"
    env = {**os.environ, "DATABASE_URL": url, "SECRET_KEY": SECRET}
    stderr_path = tmp_dir / f"export-{label}-{rows}.log"
    usage_path = tmp_dir / f"export-{label}-{rows}.time"
    command = [str(FLASK), "--app", "app", "export", "--output", str(output)]
    timed = shutil.which(TIME) is not None
    if timed:
        # %M: peak RSS in KiB; %U/%S: CPU seconds. Written to a file, apart from the app's stderr.
        command = [TIME, "-f", "%M %U %S", "-o", str(usage_path), *command]
    peak = [0]
    try:
        with stderr_path.open("w") as stderr:
            t0 = time.perf_counter()
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
            if not timed:
                threading.Thread(target=_poll_peak_rss, args=(process, peak), daemon=True).start()
            process.wait()
            seconds = time.perf_counter() - t0
        if process.returncode != 0:
            raise RuntimeError(f"export exited with {process.returncode}: {stderr_path.read_text()[-1500:]}")
        if timed:
            max_kib, user, system = usage_path.read_text().split()[-3:]
            max_rss_mb, cpu_seconds = int(max_kib) / 1024, float(user) + float(system)
        else:
            max_rss_mb, cpu_seconds = peak[0] / 2**20, None
        with output.open("rb") as f:
            lines = sum(1 for _ in f)
        result = {
            "engine": label,
            "rows": rows,
            "exported_rows": lines - 1,  # the header line
            "seconds": seconds,
            "rows_per_second": rows / seconds,
            "max_rss_mb": max_rss_mb,
            "cpu_seconds": cpu_seconds,
            "memory_source": "/usr/bin/time %M" if timed else "psutil polling every 10 ms",
            "batch_size": EXPORT_BATCH_SIZE,  # the command's default, which it runs with here
            "file_mb": output.stat().st_size / 1e6,
        }
        rate = result["rows_per_second"]
        log(
            f"  export {label:>14} {rows:>9,} rows: {seconds:6.2f} s  {rate:9,.0f} rows/s  "
            f"peak RSS {max_rss_mb:.1f} MB"
        )
        # The download, as a client streams it (no process start-up), against the engine's own
        # fastest way to write the same columns in the same order, side by side: best of three each.
        stream = min(stream_seconds(url) for _ in range(3))
        tool, dump = dump_seconds(url, tmp_dir)
        result.update(
            stream_seconds=stream,
            stream_rows_per_second=rows / stream,
            dump_tool=tool,
            dump_seconds=dump,
            stream_of_dump=dump / stream,
        )
        log(
            f"  download {label:>12} {rows:>9,} rows: {stream:6.2f} s  {rows / stream:9,.0f} rows/s"
            f"  | {tool}: {dump:6.2f} s  (download: {dump / stream:.2f} of it)"
        )
        return result
    finally:
        output.unlink(missing_ok=True)
        stderr_path.unlink(missing_ok=True)
        usage_path.unlink(missing_ok=True)


def _dump_query(dialect: Any) -> str:
    """SELECT the CSV's columns in the export's (default) order, as SQL for `dialect`."""
    from sqlalchemy import select

    from orders.models import Order
    from orders.serialize import CSV_COLUMNS
    from orders.sorts import DEFAULT_SORT, KEYSETS

    query = select(*[Order.__table__.c[name] for name in CSV_COLUMNS]).order_by(
        *KEYSETS[DEFAULT_SORT].order_by()
    )
    return str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def stream_seconds(url: str) -> float:
    """GET /orders/export.csv read to its end through the app's WSGI interface in this process:
    what a client downloading it waits for, without the network and without a process start."""
    from orders.app import create_app

    app = create_app({"DATABASE_URL": url, "SECRET_KEY": SECRET})
    try:
        client = app.test_client()
        started = time.perf_counter()
        response = client.get("/orders/export.csv", buffered=False)
        size = sum(len(chunk) for chunk in response.response)
        response.close()
        seconds = time.perf_counter() - started
        if response.status_code != 200 or size == 0:
            raise RuntimeError(f"export download: {response.status_code}, {size} bytes")
        return seconds
    finally:
        app.extensions["engine"].dispose()


def dump_seconds(url: str, tmp_dir: Path) -> tuple[str, float]:
    """The engine's own fastest way to write the export's columns in its order, timed here:
    PostgreSQL's `COPY (SELECT ...) TO STDOUT` read through psycopg in this process; MariaDB's
    `mariadb --batch` client and SQLite's `sqlite3 -csv` shell writing to a file (both are
    child processes: their start-up, a few milliseconds, is in the time)."""
    from sqlalchemy.engine import make_url

    from orders.db import make_engine

    engine = make_engine(url)
    try:
        sql = _dump_query(engine.dialect)
        if engine.dialect.name == "postgresql":
            connection = engine.raw_connection()
            try:
                cursor = connection.cursor()
                started = time.perf_counter()
                with cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)") as copy:  # type: ignore[attr-defined]
                    for _ in copy:
                        pass
                return "COPY TO STDOUT", time.perf_counter() - started
            finally:
                connection.close()
    finally:
        engine.dispose()
    parts = make_url(url)
    if parts.get_backend_name() == "sqlite":
        tool, command = "sqlite3 -csv", ["sqlite3", "-csv", str(parts.database), sql]
    else:
        tool = "mariadb --batch"
        server = ["-h", str(parts.host), "-P", str(parts.port or 3306), "-u", str(parts.username)]
        command = [
            "mariadb",
            "--batch",
            "--quick",
            "--skip-column-names",
            *server,
            str(parts.database),
            "-e",
            sql,
        ]
        if parts.password:
            command.insert(1, f"--password={parts.password}")
    output = tmp_dir / "dump.out"
    with output.open("wb") as out:
        started = time.perf_counter()
        subprocess.run(command, stdout=out, check=True)
        seconds = time.perf_counter() - started
    output.unlink()
    return tool, seconds


def marginal_rate(small: dict[str, Any], large: dict[str, Any]) -> float | None:
    """Rows per second once the process is running: the difference between two export sizes."""
    extra_seconds = large["seconds"] - small["seconds"]
    if extra_seconds <= 0:
        return None
    return (large["rows"] - small["rows"]) / extra_seconds
