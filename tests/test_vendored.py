"""The vendored htmx is the file the npm registry ships (docs/security.md records its checksum)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HTMX = ROOT / "static/htmx-4.0.1.min.js"


def test_the_vendored_htmx_is_the_registrys_file_with_the_recorded_checksum():
    doc = (ROOT / "docs/security.md").read_text()
    recorded = re.search(r"htmx-4\.0\.1\.min\.js`.*?sha256\s+`([0-9a-f]{64})`", doc, re.S)
    assert recorded, "docs/security.md records no sha256 for static/htmx-4.0.1.min.js"
    assert hashlib.sha256(HTMX.read_bytes()).hexdigest() == recorded.group(1)
    assert 'version="4.0.1"' in HTMX.read_text()
