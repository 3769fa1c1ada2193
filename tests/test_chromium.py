"""The browser tests launch Debian's headless shell when headless (devtools/chromium.py): the same
Blink at about 60% of the full browser's CPU, which the suite's time depends on. Under CI=true a
machine without it fails here rather than silently running every browser test slower."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from devtools.chromium import SHELL, chromium_executable

from .databases import IN_CI


def test_headless_tests_launch_the_shell_and_headed_ones_the_full_browser(
    browser_type_launch_args: dict[str, Any],
) -> None:
    if IN_CI or shutil.which(SHELL):
        assert Path(str(browser_type_launch_args.get("executable_path"))).name == SHELL
    full = chromium_executable(headless=False)
    assert full is None or Path(full).name != SHELL  # --headed needs a window: the full browser
