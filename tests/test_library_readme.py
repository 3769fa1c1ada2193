"""The library's README example (pagination/README.md) runs as written, in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_library_example_runs_as_written(tmp_path: Path) -> None:
    text = (ROOT / "pagination" / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", text, re.S)
    assert example, "pagination/README.md has no Python example"
    script = tmp_path / "readme_example.py"
    script.write_text(example.group(1))
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
