"""Which Chromium the browser tests, the soak and the frame bench launch: one answer, here.

Headless, Debian's `chromium-headless-shell` (the "old headless" build: the same Blink and V8
without the browser around them, no GPU process) is what Playwright itself launches for headless
runs when it has downloaded its browsers; Playwright's download is not reachable from every
machine, Debian's package is. Without the browser around it, a test run costs about 0.6x the CPU
of the full `chromium --headless` (docs/testing.md, "Where the time goes"). Headed (pytest's `--headed`, to
watch a test) needs the full browser. The frame bench (bench/browser_level.py) launches the full
browser on purpose (headless=False): it measures what a phone's browser draws, GPU process and all.
"""

from __future__ import annotations

import shutil

SHELL = "chromium-headless-shell"
FULL = ("chromium", "chromium-browser")


def chromium_executable(*, headless: bool = True) -> str | None:
    """The Chromium to launch: the headless shell when headless and installed, else Debian's full
    browser; None when neither is installed (Playwright then looks for its own download)."""
    names = ((SHELL,) if headless else ()) + FULL
    return next((path for path in map(shutil.which, names) if path), None)
