"""What a production SECRET_KEY must be, and the development key kept in instance/."""

from __future__ import annotations

import math
import secrets
from collections import Counter
from pathlib import Path

MIN_SECRET_LENGTH = 32
MIN_SECRET_DISTINCT = 8
MIN_SECRET_BITS = 64


def dev_secret(instance: Path) -> str:
    """A random key kept in instance/, so cursors survive restarts on a developer's machine."""
    path = instance / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
    return path.read_text().strip()


def secret_key_problem(key: str) -> str | None:
    """Why `key` is not fit for production, or None. A heuristic that catches placeholders
    ("changeme" four times, 32 spaces, a repeated pattern), not every weak key."""
    if len(key) < MIN_SECRET_LENGTH:
        return f"SECRET_KEY must be at least {MIN_SECRET_LENGTH} characters in production"
    counts = Counter(key)
    # The key's own character frequencies bound what it can hold: 32 spaces carry 0 bits.
    bits = -sum(n * math.log2(n / len(key)) for n in counts.values())
    repeats = any(key == (key[:p] * (len(key) // p + 1))[: len(key)] for p in range(1, len(key) // 2 + 1))
    if len(counts) < MIN_SECRET_DISTINCT or bits < MIN_SECRET_BITS or repeats:
        return (
            "SECRET_KEY does not look random (too few distinct characters, or a repeated pattern); "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'"
        )
    return None
