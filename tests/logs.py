"""Reading a file another process writes (a server's log, a pid file) while it may still write."""

from __future__ import annotations

import time
from pathlib import Path


def whole_lines(path: Path) -> list[str]:
    """The lines of `path` its writer has finished: a last line without its newline is still being
    written (a log read while it grows: json.loads of such a cut line failed a CI run) and is left
    out, to be read whole the next time. Bytes are decoded leniently, as a cut can split a
    character too."""
    return path.read_bytes().decode(errors="replace").split("\n")[:-1]


def log_tail(path: Path, chars: int = 1500) -> str:
    """The end of what `path`'s writer has finished, for a failing assertion's message."""
    return "\n".join(whole_lines(path))[-chars:]


def wait_for_line(path: Path, needle: str, *, within_s: float = 10.0) -> str:
    """The first whole line of `path` holding `needle`, waiting for its writer up to `within_s`
    (a server logs a request when it has ended, which may be after its client has the answer);
    AssertionError with the log's end if none comes."""
    deadline = time.monotonic() + within_s
    while True:
        found = next((line for line in whole_lines(path) if needle in line), None)
        if found is not None:
            return found
        assert time.monotonic() < deadline, (
            f"no line with {needle!r} in {path} within {within_s} s:\n{log_tail(path)}"
        )
        time.sleep(0.05)
