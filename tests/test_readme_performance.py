"""docs/performance.md's numbers are exactly what bench.readme generates from the committed results."""

from __future__ import annotations

import json

from bench import browser_level, readme


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


def test_a_frame_gap_counts_in_whole_frames() -> None:
    """requestAnimationFrame's timestamps jitter by about 0.1 ms around 1/60 s: a gap of 16.8 ms is
    one frame (the goal at 1x), 33.4 ms two (4x); a gap of a frame and a half is two."""
    assert [browser_level.frames(ms) for ms in (16.6, 16.8, 24.9, 25.1, 33.4, 50.0, 83.3)] == [
        1, 1, 1, 2, 2, 3, 5,
    ]  # fmt: skip
    run = {"rate": 1, "frame_gap_p95_ms": 16.8, "longest_task_ms": 0.0}
    assert browser_level.wheel_goal(run)
    assert not browser_level.wheel_goal(run | {"frame_gap_p95_ms": 33.3})
    assert not browser_level.wheel_goal(run | {"longest_task_ms": 51.0})
    assert browser_level.wheel_goal(run | {"rate": 4, "frame_gap_p95_ms": 33.4})
    assert not browser_level.wheel_goal(run | {"rate": 4, "frame_gap_p95_ms": 50.0})
    assert browser_level.wheel_goal(run | {"rate": 6, "frame_gap_p95_ms": 50.0, "longest_task_ms": 120.0})
    assert not browser_level.wheel_goal(run | {"rate": 6, "frame_gap_p95_ms": 66.7})
