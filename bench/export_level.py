"""Export: ``flask --app app export --output <file>`` as a separate process, as an operator runs it.

Reported per table size: wall time (Python start-up and imports included), rows per second,
and peak memory. The peak is "Maximum resident set size" from ``/usr/bin/time`` (the child's
rusage, so no polling can miss a short peak). Not ``os.wait4`` from this process: a forked
child starts with its parent's high-water mark, and this process is over 100 MB by then.
Without /usr/bin/time, psutil polls the child every 10 ms instead.
Comparing a 300k export with a 30k one shows whether memory stays flat (one keyset batch
at a time) or grows with the table. The marginal rate between the two sizes removes start-up time.
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
        if url.startswith("postgresql"):
            copy_seconds = plain_copy_seconds(url)
            result.update(copy_seconds=copy_seconds, of_copy=copy_seconds / seconds)
            log(
                f"  plain COPY {label:>10} {rows:>9,} rows: {copy_seconds:6.2f} s  "
                f"{rows / copy_seconds:9,.0f} rows/s  (export: {copy_seconds / seconds:.2f} of COPY)"
            )
        return result
    finally:
        output.unlink(missing_ok=True)
        stderr_path.unlink(missing_ok=True)
        usage_path.unlink(missing_ok=True)


def plain_copy_seconds(url: str) -> float:
    """PostgreSQL's own `COPY (SELECT the CSV's columns in the export's order) TO STDOUT` of the
    same rows, read to the end through psycopg in this process: the floor the export is
    measured against, in the same run (no Python start-up in it, unlike the export's time)."""
    from sqlalchemy import select
    from sqlalchemy.dialects import postgresql

    from orders.db import make_engine
    from orders.models import Order
    from orders.serialize import CSV_COLUMNS
    from orders.sorts import DEFAULT_SORT, KEYSETS

    query = select(*[Order.__table__.c[name] for name in CSV_COLUMNS]).order_by(
        *KEYSETS[DEFAULT_SORT].order_by()
    )
    sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
    engine = make_engine(url)
    try:
        connection = engine.raw_connection()
        try:
            cursor = connection.cursor()
            started = time.perf_counter()
            size = 0
            with cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)") as copy:  # type: ignore[attr-defined]
                for data in copy:
                    size += len(data)
            return time.perf_counter() - started
        finally:
            connection.close()
    finally:
        engine.dispose()


def marginal_rate(small: dict[str, Any], large: dict[str, Any]) -> float | None:
    """Rows per second once the process is running: the difference between two export sizes."""
    extra_seconds = large["seconds"] - small["seconds"]
    if extra_seconds <= 0:
        return None
    return (large["rows"] - small["rows"]) / extra_seconds
