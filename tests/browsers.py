"""The engines the browser tests run in: Chromium (Blink), Firefox (Gecko) and WebKit.

Chromium and Firefox are driven by Playwright (pytest-playwright's `page`, `browser`, ...); WebKit
by its own WebDriver through a thin adapter (tests/webkit.py), as Playwright's WebKit is a build of
its own that only its download has, while Debian ships WebKitGTK's WebDriver. All three are
Debian's packages (scripts/ensure-browsers).

Every browser test runs in Chromium. A test runs in the other engines too where what it checks
is what engines do differently: layout and scroll arithmetic (fractional row heights against
whole-pixel scroll positions, scroll anchoring, scrollbars), keys and focus, and the row promises
(no duplicate, no gap, a bounded page) that rest on them. Marked `@EVERY_ENGINE` (or
`@GECKO_TOO` where the test needs what the WebKit adapter lacks: a browser context of its own,
phone emulation, request interception). What is the same in every engine (the server's answers,
htmx's requests, the markup axe reads, the CSP) runs in Chromium alone: another engine would
spend minutes finding nothing new (docs/testing.md, "Engines").
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from devtools.chromium import chromium_executable
from devtools.firefox_bidi import FIREFOX, FIREFOX_PREFS

from .databases import unavailable

ENGINES = ("chromium", "firefox", "webkit")
EVERY_ENGINE = pytest.mark.engines("firefox", "webkit")
GECKO_TOO = pytest.mark.engines("firefox")
WEBKIT_DRIVER = "WebKitWebDriver"
XVFB = "Xvfb"
ROOT = Path(__file__).resolve().parent.parent


def engines_of(item: pytest.Item) -> set[str]:
    """The engines a test runs in: Chromium, and those its `engines` mark adds."""
    marker = item.get_closest_marker("engines")
    return {"chromium", *(marker.args if marker else ())}


def engine_of(item: pytest.Item) -> str | None:
    """The engine a collected browser test runs in (pytest-playwright's browser_name parameter)."""
    return getattr(getattr(item, "callspec", None), "params", {}).get("browser_name")


def launch_args(browser_name: str, args: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Playwright's launch arguments for Debian's build of the engine."""
    args = dict(args)
    if browser_name == "firefox":
        if not shutil.which(FIREFOX):
            unavailable("Firefox", "install Debian's 'firefox-esr' package (make test does it as root)")
        args["channel"] = "moz-firefox"  # Playwright's WebDriver BiDi mode: a stock Firefox
        args["executable_path"] = str(_firefox_relay(tmp))
        # Classic scrollbars, which take width from the page as on Windows (GTK's default overlay
        # ones take none): the phone layout has to hold with them.
        args["firefox_user_prefs"] = {**FIREFOX_PREFS, "widget.gtk.overlay-scrollbars.enabled": False}
        return args
    chromium = chromium_executable(headless=args.get("headless", True))
    if chromium:
        args["executable_path"] = chromium
    elif not list(Path.home().glob(".cache/ms-playwright/chromium-*")):
        unavailable("Chromium", "install Debian's 'chromium' package (make test does it as root)")
    args["args"] = [
        *args.get("args", []),
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    return args


def _firefox_relay(tmp: Path) -> Path:
    """An executable Playwright launches as Firefox: devtools/firefox_bidi.py in this Python."""
    script = tmp / "firefox-esr-bidi"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "devtools" / "firefox_bidi.py"}" "$@"\n')
    script.chmod(0o755)
    return script


def known_bug(
    request: pytest.FixtureRequest, engine: str, engines: tuple[str, ...], what: str, *, strict: bool = True
) -> None:
    """A failure the app still has in these engines: an expected failure, never counted as passed.
    Strict by default (a pass fails the run, so the mark goes when the bug does); `strict=False`
    only for a bug that depends on timing and so shows in some runs, where a strict mark would
    make the run flaky (its passes are reported as XPASS, still not as passed)."""
    if engine in engines:
        request.node.add_marker(pytest.mark.xfail(strict=strict, reason=f"KNOWN BUG in {engine}: {what}"))


def expect(target: Any) -> Any:
    """Playwright's `expect`, or the WebKit adapter's for a WebKit page or locator: the one a test
    marked for every engine imports."""
    from playwright.sync_api import expect as playwright_expect

    from . import webkit

    if isinstance(target, webkit.Page | webkit.Locator):
        return webkit.Expectation(target)
    return playwright_expect(target)


def require_webkit() -> None:
    for program, package in ((WEBKIT_DRIVER, "webkit2gtk-driver"), (XVFB, "xvfb")):
        if not shutil.which(program):
            unavailable("WebKit", f"install Debian's '{package}' package (make test does it as root)")
    if not os.path.exists(MINIBROWSER):
        unavailable("WebKit", f"{MINIBROWSER} is missing: install Debian's 'webkit2gtk-driver' package")


# The browser WebKitGTK's WebDriver drives (Debian's libwebkit2gtk-4.1-0 ships it).
MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"
