"""The library installs on its own: `pip install` of pagination/ (its own pyproject.toml) into a
fresh virtualenv, then its README's example runs there, away from the repository.

Offline: the fresh venv's own pip and setuptools build it (--no-build-isolation, --no-index).
Its two dependencies, SQLAlchemy and cryptography (with what they import), and the `wheel`
build tool are lent from the shared venv by a .pth file of symlinks to exactly those packages:
nothing else of the shared venv, and nothing of the app, is importable there (checked).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The distributions SQLAlchemy and cryptography need at import, with their metadata.
# And `wheel`, which the venv's setuptools (65) needs to build a wheel: a build tool, not a
# dependency of the library.
LENT = ["sqlalchemy", "cryptography", "cffi", "pycparser", "greenlet", "typing_extensions", "wheel"]

pytestmark = pytest.mark.slow


def run(*args: str | Path, cwd: Path, timeout: int = 300) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def fresh_venv(tmp_path: Path, lent_packages: list[str]) -> tuple[Path, Path, Path]:
    """A copy of pagination/ away from the repository, and a fresh venv that sees of the shared
    one only `lent_packages` (a .pth file of symlinks to them): (source, venv, its python)."""
    source = tmp_path / "src" / "pagination"
    shutil.copytree(ROOT / "pagination", source, ignore=shutil.ignore_patterns("__pycache__"))
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    shared = Path(sysconfig.get_paths()["purelib"])
    lent = tmp_path / "lent"
    lent.mkdir()
    for entry in shared.iterdir():
        name = entry.name.lower()
        if any(name == p or name.startswith((p + "-", p + ".", "_cffi_backend")) for p in lent_packages):
            (lent / entry.name).symlink_to(entry)
    site = Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path).strip()
    )
    (site / "lent.pth").write_text(f"{lent}\n")
    return source, env, python


def test_pip_installs_the_library_alone_and_its_readme_example_runs(tmp_path: Path) -> None:
    source, env, python = fresh_venv(tmp_path, LENT)
    run(
        python,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-q",
        source,
        cwd=tmp_path,
    )

    readme = (ROOT / "pagination" / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S)
    assert example, "pagination/README.md has no Python example"
    (tmp_path / "example.py").write_text(example.group(1))
    run(python, "-W", "error", "example.py", cwd=tmp_path)

    where = run(
        python,
        "-c",
        "import importlib.metadata as m, importlib.util as u, pagination\n"
        "print(pagination.__file__)\n"
        "print(m.version('keyset-pagination'), pagination.__version__)\n"
        "reqs = m.requires('keyset-pagination')\n"
        "print(sorted(r.split('>')[0].split('<')[0] for r in reqs if 'extra ==' not in r))\n"
        "print(sorted(r.split('>')[0] for r in reqs if 'extra ==' in r))\n"
        "print(u.find_spec('orders'), u.find_spec('flask'))\n"
        "import pathlib; print(pathlib.Path(pagination.__file__).with_name('py.typed').exists())",
        cwd=tmp_path,
    ).splitlines()
    assert where[0].startswith(str(env)), where  # the installed copy, not the repository's
    installed, declared = where[1].split()
    assert installed == declared, where
    assert where[2] == "['SQLAlchemy', 'cryptography']", where
    assert where[3] == "['greenlet']", where  # the `async` extra only
    assert where[4] == "None None", "the app or Flask is importable in the library's venv"
    assert where[5] == "True", "py.typed is not installed"
    assert sys.prefix != str(env)


# The local package index pip is configured with on this machine (pip config: extra-index-url
# file:///opt/pypi/simple): the greenlet wheel the `async` extra brings is installed from there,
# offline, as pip would fetch it.
LOCAL_WHEELS = [Path("/opt/pypi/files"), Path("/opt/wheels")]
ASYNC_WALK = """
import asyncio
from sqlalchemy import Integer, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from pagination import CursorCodec, Keyset
from pagination import asyncio as apagination

class Base(DeclarativeBase):
    pass

class Item(Base):
    __tablename__ = "items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)

async def main():
    engine = create_async_engine("sqlite+aiosqlite://")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
        await conn.execute(insert(Item), [{"id": i} for i in range(1, 11)])
    codec, sort, seen = CursorCodec("a long random secret"), Keyset("id", Item.id), []
    async with AsyncSession(engine) as session:
        page = await apagination.paginate(session, select(Item), sort, limit=3, codec=codec)
        seen += [i.id for i in page.items]
        while page.has_more:
            page = await apagination.paginate(
                session, select(Item), sort, limit=3, codec=codec, after=page.next_cursor
            )
            seen += [i.id for i in page.items]
    await engine.dispose()
    assert seen == list(range(1, 11)), seen
    print("walked", len(seen))

asyncio.run(main())
"""


def test_the_async_extra_brings_greenlet_and_an_async_session_walks(tmp_path: Path) -> None:
    """`pip install ./pagination[async]` in a fresh venv without greenlet installs it (SQLAlchemy
    2.1 no longer does), and an AsyncSession (aiosqlite, lent as the user's own driver) walks."""
    import greenlet

    wheels = sorted(w for d in LOCAL_WHEELS for w in d.glob(f"greenlet-{greenlet.__version__}-*.whl"))
    if not wheels:
        pytest.fail(f"no greenlet {greenlet.__version__} wheel in {LOCAL_WHEELS}: cannot install offline")
    links = tmp_path / "links"
    links.mkdir()
    (links / wheels[0].name).symlink_to(wheels[0])
    source, env, python = fresh_venv(tmp_path, [p for p in LENT if p != "greenlet"] + ["aiosqlite"])
    before = run(python, "-c", "import importlib.util as u; print(u.find_spec('greenlet'))", cwd=tmp_path)
    assert before.strip() == "None", "greenlet is there before the install: the test proves nothing"
    run(
        python,
        "-m",
        "pip",
        "install",
        "--no-build-isolation",
        "--no-index",
        "--find-links",
        links,
        "-q",
        f"{source}[async]",
        cwd=tmp_path,
    )
    (tmp_path / "walk.py").write_text(ASYNC_WALK)
    assert run(python, "walk.py", cwd=tmp_path).strip() == "walked 10"
    where = run(python, "-c", "import greenlet; print(greenlet.__file__)", cwd=tmp_path).strip()
    assert where.startswith(str(env)), where  # installed by the extra, not lent
