"""docs/performance.md's numbers are exactly what bench.readme generates from the committed results."""

from __future__ import annotations

import json

from bench import readme


def test_readme_numbers_come_from_the_committed_results() -> None:
    text = readme.PAGE.read_text()
    results = json.loads(readme.RESULTS.read_text())
    assert readme.render(text, results) == text, (
        "docs/performance.md's numbers differ from bench/results/summary.json: "
        "run `python -m bench.readme` (make bench does it after a full run)"
    )


def test_every_generated_number_depends_on_the_results() -> None:
    """A changed measurement changes the page (the block is not a constant)."""
    results = json.loads(readme.RESULTS.read_text())
    before = readme.summary(results)
    results["http"]["endpoints"][0]["rps"] *= 2
    results["export"][0]["rows_per_second"] += 1000
    after = readme.summary(results)
    assert before != after
