"""Debian's Firefox ESR for Playwright's WebDriver BiDi mode, with the one answer it lacks.

Playwright 1.65 (requirements-dev.txt pins it) sends `emulation.setMediaFeaturesOverride` for
every new browser context, to set `prefers-color-scheme`; Firefox ESR 153 (Debian's) does not know
that command yet and answers "unknown command", so no context could be made. Playwright launches
this module as Firefox (tests/browsers.py passes it as `executable_path`, through a script that
runs it with this Python): it starts Firefox with Playwright's arguments, and between the two
relays every BiDi message unchanged but that one, which it answers itself, with success, when
it asks for the light scheme or none, which is what the Firefox started here shows anyway
(FIREFOX_PREFS holds it light): the answer is true. Any other request of it (dark, say) goes
to Firefox, whose "unknown command" then fails that test, as it should.

Playwright reads the address to connect to from Firefox's stderr ("WebDriver BiDi listening on
ws://..."): this relay prints its own address in that line instead. When Firefox exits, so does
the relay.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection, serve

FIREFOX = "/usr/bin/firefox-esr"
LISTENING = "WebDriver BiDi listening on "
TOLERATED = "emulation.setMediaFeaturesOverride"
# The profile preference that holds the pages' prefers-color-scheme light (1), whatever the desktop
# says: what the relay's answer to TOLERATED claims. Passed by tests/browsers.py.
FIREFOX_PREFS = {"layout.css.prefers-color-scheme.content-override": 1}


def _answers_itself(message: dict[str, Any]) -> bool:
    if message.get("method") != TOLERATED:
        return False
    scheme = message.get("params", {}).get("features", {}).get("prefers-color-scheme")
    return scheme in (None, "light")


def _relay(client: ServerConnection, upstream_url: str) -> None:
    path = client.request.path if client.request else "/session"
    with connect(upstream_url + path, max_size=None, open_timeout=30) as firefox:

        def down() -> None:  # Firefox to Playwright
            try:
                for message in firefox:
                    client.send(message)
            except ConnectionClosed:
                pass
            finally:
                client.close()

        thread = threading.Thread(target=down, daemon=True)
        thread.start()
        try:
            for raw in client:
                message = json.loads(raw)
                if _answers_itself(message):
                    client.send(json.dumps({"type": "success", "id": message["id"], "result": {}}))
                else:
                    firefox.send(raw)
        except ConnectionClosed:
            pass
        finally:
            firefox.close()
            thread.join(10)


def main(args: list[str]) -> int:
    firefox = subprocess.Popen([FIREFOX, *args], stderr=subprocess.PIPE, text=True, bufsize=1)
    assert firefox.stderr is not None
    server = None
    for line in firefox.stderr:
        if line.startswith(LISTENING) and server is None:
            upstream = line[len(LISTENING) :].strip()
            server = serve(functools.partial(_relay, upstream_url=upstream), "127.0.0.1", 0, max_size=None)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            port = server.socket.getsockname()[1]
            line = f"{LISTENING}ws://127.0.0.1:{port}\n"
        sys.stderr.write(line)
        sys.stderr.flush()
    code = firefox.wait()
    if server is not None:
        server.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
