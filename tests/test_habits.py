"""The house's habits, held by checks rather than by memory.

- every `# type: ignore[...]` says on its line why the type checker is wrong there;
- every commit subject since the rule was held is at most 72 characters;
- docs/scroll.md keeps today's truth and the reasons in at most 300 lines (its history is in
  `git log`).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# An ignore is bare when nothing follows it on the line: no `# the reason`.
BARE_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?\s*$")
# Modules another branch is rewriting as this check lands; their ignores go when they are next
# edited, and the names go from this list with them.
SKIPPED = {"__pycache__", "node_modules"}
SUBJECT_MOST = 72
# The commit the subject rule is held from, and its committer time (Unix seconds). History
# before it keeps the longer subjects it has; git history is not rewritten to fix them.
SUBJECTS_HELD_FROM = "0ae2bb9aeea5def522928623ca11a5c083d423da"
SUBJECTS_HELD_FROM_TIME = 1796489432  # 2026-12-05T16:50:32Z
SCROLL_MOST_LINES = 300


def python_files(root: Path) -> list[Path]:
    """The project's Python files: every .py below `root` but hidden folders (.venv, .git) and
    caches."""
    found = []
    for folder, folders, files in os.walk(root):
        folders[:] = [f for f in folders if not f.startswith(".") and f not in SKIPPED]
        found += [Path(folder, name) for name in files if name.endswith(".py")]
    return sorted(found)


def bare_ignores(root: Path) -> list[str]:
    """`path:line` of each `type: ignore` without its reason on the line."""
    return [
        f"{path.relative_to(root)}:{number}"
        for path in python_files(root)
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if BARE_IGNORE.search(line)
    ]


def test_every_type_ignore_says_why() -> None:
    found = bare_ignores(ROOT)
    assert found == [], "give the reason on the line (`# type: ignore[code]  # why`), or fix the type"


def test_the_ignore_check_sees_a_bare_one_and_passes_a_reasoned_one(tmp_path: Path) -> None:
    (tmp_path / "bare.py").write_text("x: int = 'a'  # type: ignore[assignment]\ny = 1  # type: ignore\n")
    (tmp_path / "reasoned.py").write_text("x: int = 'a'  # type: ignore[assignment]  # a test of it\n")
    hidden = tmp_path / ".venv"
    hidden.mkdir()
    (hidden / "theirs.py").write_text("x = 1  # type: ignore\n")
    assert bare_ignores(tmp_path) == ["bare.py:1", "bare.py:2"]


def own_git_environment() -> dict[str, str]:
    """The environment without GIT_DIR and its kin (set inside a git hook), so that git reads the
    repository at its working directory."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env=own_git_environment(), capture_output=True, text=True, timeout=60
    )
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def long_subjects(repo: Path, held_from: str, held_from_time: int) -> list[str]:
    """The subjects over SUBJECT_MOST characters of the commits after `held_from`.

    After it means: not reachable from it when it is here, and committed later than it. The
    time alone decides in a shallow clone that lacks it, and keeps out an older commit that a
    later merge brings in by another parent."""
    have_base = (
        subprocess.run(
            ["git", "cat-file", "-e", f"{held_from}^{{commit}}"],
            cwd=repo,
            env=own_git_environment(),
            capture_output=True,
            timeout=60,
        ).returncode
        == 0
    )
    listed = git(repo, "log", "--format=%ct %s", "HEAD", *([f"^{held_from}"] if have_base else []))
    found = []
    for line in listed.splitlines():
        committed, _, subject = line.partition(" ")
        if int(committed) > held_from_time and len(subject) > SUBJECT_MOST:
            found.append(f"{len(subject)}: {subject}")
    return found


def test_commit_subjects_are_at_most_72_characters() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no commits to read")
    assert long_subjects(ROOT, SUBJECTS_HELD_FROM, SUBJECTS_HELD_FROM_TIME) == [], (
        "reword before it lands (git rebase -i; `reword`): a subject names the change, the body says the rest"
    )


def commit(repo: Path, subject: str, when: int) -> str:
    stamp = f"@{when} +0000"
    env = {**own_git_environment(), "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    subprocess.run(
        # Neither a developer's signing nor their hooks take part in a made-up history.
        ["git", "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "--allow-empty", "-m", subject],
        cwd=repo,
        env=env,
        check=True,
        timeout=60,
    )
    return git(repo, "rev-parse", "HEAD").strip()


def test_the_subject_check_reads_only_commits_after_its_base(tmp_path: Path) -> None:
    """History before the base may be long; after it, in a full and in a shallow clone, a long
    subject is found, and an old branch merged later does not count."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.org")
    git(repo, "config", "user.name", "t")
    long = "x" * (SUBJECT_MOST + 1)
    commit(repo, "old " + long, 1_000)
    git(repo, "branch", "side")
    base = commit(repo, "the base", 2_000)
    git(repo, "checkout", "-q", "side")
    commit(repo, "old side " + long, 1_500)
    git(repo, "checkout", "-q", "main")
    commit(repo, "x" * SUBJECT_MOST, 3_000)
    assert long_subjects(repo, base, 2_000) == []
    git(repo, "-c", "commit.gpgsign=false", "merge", "-q", "--no-ff", "-m", "Merge the old side", "side")
    assert long_subjects(repo, base, 2_000) == []
    commit(repo, "new " + long, 4_000)
    assert long_subjects(repo, base, 2_000) == [f"{SUBJECT_MOST + 5}: new {long}"]
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    assert long_subjects(shallow, base, 2_000) == [f"{SUBJECT_MOST + 5}: new {long}"]


def test_scroll_md_keeps_to_300_lines() -> None:
    lines = len((ROOT / "docs" / "scroll.md").read_text(encoding="utf-8").splitlines())
    assert lines <= SCROLL_MOST_LINES, f"docs/scroll.md is {lines} lines: today's truth and reasons only"
