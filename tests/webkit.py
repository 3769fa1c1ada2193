"""WebKit for the browser tests: Debian's WebKitGTK through its WebDriver, under Xvfb, behind the
part of Playwright's `Page`, `Locator` and `expect` the tests marked for every engine use.

Playwright drives only its own WebKit build (a download not reachable from every machine);
Debian's `webkit2gtk-driver` speaks W3C WebDriver, spoken here over HTTP with `requests`: about
fifteen endpoints. A test written against Playwright's page runs here unchanged as long as it
keeps to what is below; anything else is an AttributeError naming what is missing, never a
silent pass. Waits poll their condition once a frame in the page (requestAnimationFrame), as
Playwright's `polling="raf"` does.

Practicalities of WebKitGTK's driver met here: a wheel input source whose id repeats scrolls once
per session (so each action has a fresh id); without a window manager an unfocused window has
no `:focus` and takes no keys (the window is focused once at the start); the window's size
includes MiniBrowser's own toolbar (the viewport is measured and the window sized to fit).
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import requests

from .browsers import MINIBROWSER, WEBKIT_DRIVER, XVFB

TIMEOUT_S = 30  # Playwright's default for waits and expectations
_ids = itertools.count()

# Playwright's key names as WebDriver's code points (the W3C spec's table).
KEYS = {
    "Tab": "\ue004",
    "Enter": "\ue007",
    "Shift": "\ue008",
    "Control": "\ue009",
    "Alt": "\ue00a",
    "Escape": "\ue00c",
    "Space": " ",
    "PageUp": "\ue00e",
    "PageDown": "\ue00f",
    "End": "\ue010",
    "Home": "\ue011",
    "ArrowLeft": "\ue012",
    "ArrowUp": "\ue013",
    "ArrowRight": "\ue014",
    "ArrowDown": "\ue015",
    "Backspace": "\ue003",
}

# A JS function or arrow function (Playwright calls it with the argument), else an expression.
_FUNCTION = re.compile(r"^\s*(async\s*)?(function\b|\([^()]*\)\s*=>|[A-Za-z_$][\w$]*\s*=>)")


def _as_function(source: str) -> str:
    return source if _FUNCTION.match(source) else f"() => ({source})"


# A locator's elements: CSS steps, role steps (the roles and names our markup uses), an index.
_RESOLVE = """
const resolve = (steps) => {
  let found = [document];
  const name = (e) => (e.getAttribute('aria-label') || e.innerText || e.value || '')
    .replace(/\\s+/g, ' ').trim();
  const ROLES = {button: 'button, input[type=button], input[type=submit], [role=button]',
                 link: 'a[href], [role=link]', table: 'table, [role=table]',
                 heading: 'h1, h2, h3, h4, h5, h6, [role=heading]'};
  for (const [kind, a, b, c] of steps) {
    if (kind === 'css') found = found.flatMap(root => [...root.querySelectorAll(a)]);
    else if (kind === 'role') found = found.flatMap(root => [...root.querySelectorAll(ROLES[a])])
      .filter(e => b === null || (c ? name(e) === b : name(e).toLowerCase().includes(b.toLowerCase())));
    else if (kind === 'nth') found = a < 0 ? found.slice(a).slice(0, 1) : found.slice(a, a + 1);
  }
  return found.filter(e => e !== document);
};
"""


class WebDriverError(AssertionError):
    pass


class Driver:
    """One WebKitWebDriver and one Xvfb display for the session; a browser session per test."""

    def __init__(self) -> None:
        self.xvfb = subprocess.Popen(
            [XVFB, "-displayfd", "1", "-screen", "0", "1920x1200x24", "-nolisten", "tcp"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.xvfb.stdout is not None
        self.display = f":{self.xvfb.stdout.readline().decode().strip()}"
        self.xvfb.stdout.close()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.driver = subprocess.Popen(
            [WEBKIT_DRIVER, f"--port={port}", "--host=127.0.0.1"],
            env={**os.environ, "DISPLAY": self.display},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"{self.url}/status", timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, f"{WEBKIT_DRIVER} did not answer within 20 s"
                time.sleep(0.1)

    def close(self) -> None:
        for process in (self.driver, self.xvfb):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    @contextmanager
    def page(self) -> Iterator[Page]:
        capabilities: dict[str, Any] = {
            "browserName": "MiniBrowser",
            "webkitgtk:browserOptions": {"binary": MINIBROWSER, "args": ["--automation"]},
        }
        # The start is tried twice: a failed start is the machine's, not the app's (WebKit's web
        # process crashed in Mesa's software renderer about once in seven sessions when this was
        # first tried by hand). The test itself is never retried.
        for _ in range(2):
            answer = requests.post(
                f"{self.url}/session", json={"capabilities": {"alwaysMatch": capabilities}}, timeout=60
            ).json()["value"]
            if "sessionId" in answer:
                break
        else:
            raise WebDriverError(f"WebKit did not start: {answer}")
        page = Page(f"{self.url}/session/{answer['sessionId']}")
        try:
            page.set_viewport_size({"width": 1280, "height": 720})  # Playwright's default
            # The view focused: a key action goes to MiniBrowser's focused widget, which is not
            # always its web view (a full run's key test once pressed "j" for 30 s into nothing).
            page.bring_to_front()
            yield page
        finally:
            requests.delete(page.session, timeout=30)


class Page:
    def __init__(self, session: str):
        self.session = session
        self.size = {"width": 1280, "height": 720}
        self.mouse = _Mouse(self)
        self.keyboard = _Keyboard(self)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 60) -> Any:
        answer = requests.request(method, self.session + path, json=body, timeout=timeout).json()["value"]
        if isinstance(answer, dict) and "error" in answer:
            raise WebDriverError(f"WebKit: {path}: {answer['error']}: {answer.get('message', '')[:500]}")
        return answer

    # Navigation
    def goto(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    def reload(self) -> None:
        self._call("POST", "/refresh", {})

    def go_back(self) -> None:
        self._call("POST", "/back", {})

    @property
    def url(self) -> str:
        return str(self._call("GET", "/url"))

    @property
    def viewport_size(self) -> dict[str, int]:
        return dict(self.size)

    def bring_to_front(self) -> None:
        """The window focused (without a window manager an unfocused window has no `:focus`)."""
        self._call("POST", "/window", {"handle": self._call("GET", "/window")})

    def on(self, event: str, handler: Any) -> None:
        raise NotImplementedError(
            f"WebKit's WebDriver sees no {event!r} events: read performance.getEntriesByType('resource')"
        )

    def set_viewport_size(self, size: dict[str, int]) -> None:
        """The window sized so that the page's viewport is `size` (the toolbar measured off)."""
        self.size = dict(size)
        width, height = size["width"], size["height"]
        for _ in range(5):
            self._call("POST", "/window/rect", {"width": width, "height": height})
            inner = self._settled_viewport(width, height)
            if inner == [size["width"], size["height"]]:
                return
            width += size["width"] - inner[0]
            height += size["height"] - inner[1]
        raise WebDriverError(f"WebKit's viewport stays {inner}, not {size}")

    def _settled_viewport(self, width: int, height: int) -> list[int]:
        """The viewport once a window's resize to `width` x `height` has landed. The driver may
        answer before X and GTK have applied it: a full run once read the old viewport three
        times over (1280 x 758 for 720) while every worker started its browsers, and a resize
        landing later would move the page under a test. So: until the window has the size
        (at most 3 s), then until two reads of the viewport 100 ms apart agree (at most 3 s)."""
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            rect = self._call("GET", "/window/rect")
            if [rect["width"], rect["height"]] == [width, height]:
                break
            time.sleep(0.05)
        last = self.evaluate("[innerWidth, innerHeight]")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.evaluate("[innerWidth, innerHeight]")
            if now == last:
                break
            last = now
        return list(last)

    # Scripts
    def evaluate(self, source: str, arg: Any = None) -> Any:
        if not _FUNCTION.match(source) and ("\n" in source.strip() or source.rstrip().endswith(";")):
            # A script of statements (a library's source, as axe's): run, its value not kept.
            return self._call("POST", "/execute/sync", {"script": source, "args": []})
        script = f"return ({_as_function(source)})(arguments[0]);"
        return self._call("POST", "/execute/sync", {"script": script, "args": [arg]})

    def eval_on_selector_all(self, selector: str, source: str, arg: Any = None) -> Any:
        script = f"return ({source})([...document.querySelectorAll(arguments[0])], arguments[1]);"
        return self._call("POST", "/execute/sync", {"script": script, "args": [selector, arg]})

    def wait_for_function(
        self, source: str, arg: Any = None, polling: Any = "raf", timeout: float | None = None
    ) -> Any:
        """Until the function returns something truthy, checked once a frame in the page (bounded)."""
        bound = (timeout / 1000 if timeout else TIMEOUT_S) + time.monotonic()
        script = (
            "const [arg, ms, done] = arguments; const f = " + _as_function(source) + ";"
            " const end = performance.now() + ms;"
            " const tick = () => { let v; try { v = f(arg); } catch (e) { done({error: String(e)}); return; }"
            " if (v) done({value: v}); else if (performance.now() > end) done(null);"
            " else requestAnimationFrame(tick); }; tick();"
        )
        while True:
            found = self._call("POST", "/execute/async", {"script": script, "args": [arg, 2000]})
            if found and "error" in found:
                raise WebDriverError(f"WebKit: {found['error']} in {source[:200]}")
            if found:
                return found["value"]
            if time.monotonic() > bound:
                raise AssertionError(f"WebKit: not true within {TIMEOUT_S} s: {source[:300]} ({arg!r})")

    def wait_for_timeout(self, ms: float) -> None:
        time.sleep(ms / 1000)

    # Elements
    def locator(self, selector: str) -> Locator:
        return Locator(self, [["css", selector]])

    def get_by_role(self, role: str, name: str | None = None, exact: bool = False) -> Locator:
        return Locator(self, [["role", role, name, exact]])


class Locator:
    def __init__(self, page: Page, steps: list[list[Any]]):
        self.page = page
        self.steps = steps

    def _js(self, body: str, *args: Any) -> Any:
        script = _RESOLVE + "const found = resolve(arguments[0]); const args = arguments[1];" + body
        return self.page._call("POST", "/execute/sync", {"script": script, "args": [self.steps, list(args)]})

    def _one(self) -> dict[str, str]:
        """The first element as WebDriver's element reference (for clicks and typing)."""
        element = self._js("if (!found.length) return null; return found[0];")
        if element is None:
            raise AssertionError(f"WebKit: no element for {self.steps}")
        return element  # type: ignore[no-any-return]  # WebDriver answers JSON: Any

    def _wait(self, what: str, predicate: str, *args: Any) -> None:
        """Until `predicate` (JS over `found`, `args`) holds, once a frame (bounded)."""
        source = (
            "([steps, args]) => { "
            + _RESOLVE
            + " const found = resolve(steps); return ("
            + predicate
            + "); }"
        )
        try:
            self.page.wait_for_function(source, arg=[self.steps, list(args)])
        except AssertionError:
            raise AssertionError(f"WebKit: {self.steps} {what} {args!r}: not within {TIMEOUT_S} s") from None

    def locator(self, selector: str) -> Locator:
        return Locator(self.page, [*self.steps, ["css", selector]])

    def get_by_role(self, role: str, name: str | None = None, exact: bool = False) -> Locator:
        return Locator(self.page, [*self.steps, ["role", role, name, exact]])

    def nth(self, index: int) -> Locator:
        return Locator(self.page, [*self.steps, ["nth", index]])

    @property
    def first(self) -> Locator:
        return self.nth(0)

    @property
    def last(self) -> Locator:
        return self.nth(-1)

    def count(self) -> int:
        return int(self._js("return found.length;"))

    def get_attribute(self, name: str) -> str | None:
        self._wait("attached", "found.length > 0")
        return self._js("return found[0].getAttribute(args[0]);", name)  # type: ignore[no-any-return]  # WebDriver answers JSON: Any

    def is_visible(self) -> bool:
        return bool(self._js("return found.length > 0 && found[0].checkVisibility();"))

    def evaluate(self, source: str, arg: Any = None) -> Any:
        self._wait("attached", "found.length > 0")
        return self._js(f"return ({source})(found[0], args[0]);", arg)

    def evaluate_all(self, source: str, arg: Any = None) -> Any:
        return self._js(f"return ({source})(found, args[0]);", arg)

    def all_text_contents(self) -> list[str]:
        return self._js("return found.map(e => e.textContent);")  # type: ignore[no-any-return]  # WebDriver answers JSON: Any

    def focus(self) -> None:
        self._wait("attached", "found.length > 0")
        self._js("found[0].focus();")

    def scroll_into_view_if_needed(self) -> None:
        self._js("found[0].scrollIntoView({block: 'nearest'});")

    def click(self) -> None:
        """As Playwright clicks: scrolled into view if needed, the mouse pressed at its centre."""
        self._wait("visible", "found.length > 0 && found[0].checkVisibility()")
        x, y = self._js(
            "const e = found[0]; const r0 = e.getBoundingClientRect();"
            " if (r0.top < 0 || r0.bottom > innerHeight) e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2];"
        )
        self.page.mouse.click(x, y)

    def fill(self, text: str) -> None:
        element = next(iter(self._one().values()))
        self.page._call("POST", f"/element/{element}/clear", {})
        self.page._call("POST", f"/element/{element}/value", {"text": text})


class _Mouse:
    def __init__(self, page: Page):
        self.page = page
        self.at: tuple[float, float] | None = None  # None: the viewport's centre

    def move(self, x: float, y: float) -> None:
        self.at = (x, y)
        step = {"type": "pointerMove", "x": int(x), "y": int(y), "origin": "viewport"}
        action = {"type": "pointer", "id": f"mouse{next(_ids)}", "parameters": {"pointerType": "mouse"}}
        self.page._call("POST", "/actions", {"actions": [{**action, "actions": [step]}]})

    def click(self, x: float, y: float) -> None:
        """Pressed and released at (x, y) of the viewport, as Playwright's mouse.click: no scroll."""
        self.at = (x, y)
        steps = [
            {"type": "pointerMove", "x": int(x), "y": int(y), "origin": "viewport"},
            {"type": "pointerDown", "button": 0},
            {"type": "pointerUp", "button": 0},
        ]
        action = {"type": "pointer", "id": f"mouse{next(_ids)}", "parameters": {"pointerType": "mouse"}}
        self.page._call("POST", "/actions", {"actions": [{**action, "actions": steps}]})

    def wheel(self, delta_x: float, delta_y: float) -> None:
        # A fresh input source id each time: WebKitGTK's driver scrolls a repeated id only once.
        x, y = self.at or (self.page.size["width"] // 2, self.page.size["height"] // 2)
        step = {"type": "scroll", "x": int(x), "y": int(y), "deltaX": int(delta_x), "deltaY": int(delta_y)}
        action = {"type": "wheel", "id": f"wheel{next(_ids)}", "actions": [{**step, "origin": "viewport"}]}
        self.page._call("POST", "/actions", {"actions": [action]})


class _Keyboard:
    def __init__(self, page: Page):
        self.page = page

    def press(self, keys: str) -> None:
        """A key or a chord ("Shift+Tab"), by Playwright's names."""
        names = keys.split("+") if len(keys) > 1 else [keys]
        codes = [KEYS.get(name, name) for name in names]
        steps = [{"type": "keyDown", "value": c} for c in codes]
        steps += [{"type": "keyUp", "value": c} for c in reversed(codes)]
        self.page._call(
            "POST", "/actions", {"actions": [{"type": "key", "id": f"keys{next(_ids)}", "actions": steps}]}
        )

    def type(self, text: str) -> None:
        for character in text:
            self.press(character)


class Expectation:
    """Playwright's web-first assertions that the marked tests use, for a WebKit page or locator."""

    def __init__(self, target: Page | Locator):
        self.target = target

    def _locator(self) -> Locator:
        assert isinstance(self.target, Locator), "an element's expectation on a page"
        return self.target

    def to_have_url(self, pattern: str | re.Pattern[str], matches: bool = True) -> None:
        page = self.target
        assert isinstance(page, Page)
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern) + "$")
        deadline = time.monotonic() + TIMEOUT_S
        while bool(regex.search(page.url)) != matches:
            assert time.monotonic() < deadline, (
                f"WebKit: the address {page.url}, {matches} for {regex.pattern}"
            )
            time.sleep(0.05)

    def not_to_have_url(self, pattern: str | re.Pattern[str]) -> None:
        self.to_have_url(pattern, matches=False)

    def to_be_attached(self) -> None:
        self._locator()._wait("attached", "found.length > 0")

    def to_have_count(self, count: int) -> None:
        self._locator()._wait("count", "found.length === args[0]", count)

    def not_to_have_count(self, count: int) -> None:
        self._locator()._wait("count", "found.length !== args[0]", count)

    def to_be_visible(self) -> None:
        self._locator()._wait("visible", "found.length > 0 && found[0].checkVisibility()")

    def to_be_in_viewport(self, ratio: float = 0) -> None:
        """Playwright's: the share of the element's area inside the viewport is above `ratio`."""
        in_view = (
            "found.length > 0 && (r => { const w = Math.min(r.right, innerWidth) - Math.max(r.left, 0);"
            " const h = Math.min(r.bottom, innerHeight) - Math.max(r.top, 0);"
            " return w > 0 && h > 0 && (w * h) / (r.width * r.height) >= args[0]; })"
            "(found[0].getBoundingClientRect())"
        )
        self._locator()._wait("in the viewport", in_view, ratio)

    def not_to_have_attribute(self, name: str, value: str) -> None:
        self._locator()._wait(
            "not attribute", "found.length > 0 && found[0].getAttribute(args[0]) !== args[1]", name, value
        )

    def to_be_empty(self) -> None:
        self._locator()._wait("empty", "found.length > 0 && found[0].textContent.trim() === ''")

    def to_be_focused(self) -> None:
        self._locator()._wait("focused", "found.length > 0 && document.activeElement === found[0]")

    def to_have_attribute(self, name: str, value: str) -> None:
        self._locator()._wait(
            "attribute", "found.length > 0 && found[0].getAttribute(args[0]) === args[1]", name, value
        )

    def to_contain_text(self, text: str) -> None:
        self._locator()._wait("contains", "found.length > 0 && found[0].textContent.includes(args[0])", text)

    def to_have_text(self, text: str) -> None:
        self._locator()._wait(
            "text", "found.length > 0 && found[0].textContent.replace(/\\s+/g, ' ').trim() === args[0]", text
        )

    def to_have_value(self, value: str) -> None:
        self._locator()._wait("value", "found.length > 0 && found[0].value === args[0]", value)

    def to_have_class(self, pattern: re.Pattern[str]) -> None:
        self._locator()._wait(
            "class", "found.length > 0 && new RegExp(args[0]).test(found[0].className)", pattern.pattern
        )
