"""Tests that read what another process writes read whole lines only (tests/logs.py)."""

from __future__ import annotations

import re
from pathlib import Path

from .logs import whole_lines

TESTS = Path(__file__).resolve().parent


def test_a_line_still_being_written_is_left_out_until_it_is_whole(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b'{"a": 1}\n{"b": "caf\xc3')  # cut mid-line, and mid-character
    assert whole_lines(log) == ['{"a": 1}']
    with log.open("ab") as more:
        more.write(b'\xa9"}\n')
    assert whole_lines(log) == ['{"a": 1}', '{"b": "café"}']
    log.write_bytes(b"")
    assert whole_lines(log) == []


# A log (or pid file) read straight: `....log.read_text()`, `log_path.read_bytes()`, `(x / "a.log")...`
_STRAIGHT_READ = re.compile(r"(log\w*|\.log\"\)|\.pid\"\))\)?\.read_(text|bytes)\(")


def test_no_test_reads_a_log_but_through_whole_lines() -> None:
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(TESTS.glob("*.py"))
        if path.name not in {"logs.py", "test_logs.py"}
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _STRAIGHT_READ.search(line)
    ]
    assert found == [], "read it with tests/logs.py whole_lines:\n" + "\n".join(found)
