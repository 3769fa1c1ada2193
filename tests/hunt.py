"""How many examples the Hypothesis tests draw, and whether a run draws the same ones again.

A run of the suite draws each test's own budget: the same examples every run where the test says
`derandomize=DERANDOMIZE` (the fuzzers of the HTTP surface: a run's answer is its code's), new
ones each run elsewhere. `HUNT=N` (`make hunt`) multiplies every budget by N and draws new
examples everywhere, to reach what the fixed budgets never do. On 5 December 2026 random
examples beyond the budgets found a MariaDB DISTINCT that dropped rows under the library, a
MariaDB export that left a formula unneutralized, an OpenAPI description that refused what the
API accepts, and two checks in the tests that were wrong (docs/testing.md, "Hunting").
"""

from __future__ import annotations

import os

HUNT = int(os.environ.get("HUNT") or 0)
DERANDOMIZE = not HUNT  # for the tests that fix their examples in an ordinary run


def examples(budget: int) -> int:
    """A test's number of examples: its own budget, times HUNT when hunting."""
    return budget * HUNT if HUNT > 0 else budget
