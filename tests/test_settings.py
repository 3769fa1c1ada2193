"""The settings table (orders/core/settings.py): every bad value is refused at start with one line that
names it, by the app, every CLI command and gunicorn; the documentation is the table.

The values are generated from the table itself (each integer setting just outside its bounds and
not an integer at all), beside the cases an operator and a security probe actually tried.

Each command here is a forked child of a process that imported Flask, SQLAlchemy and the app once
(tests/forked.py: a cold `python -m flask` is 0.7 CPU seconds, mostly imports, and this module
starts over a hundred). Started cold, from a fresh interpreter: serve.py --check-config, serve.py
from another directory, gunicorn straight, and the both-ways test, which runs the same refusals
cold and forked and wants the same status, output and line.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from devtools.gunicorn import gunicorn
from orders.app import create_app
from orders.core import settings, settings_docs
from orders.core.settings import SETTINGS, SettingsError

from . import forked
from .logs import whole_lines

ROOT = Path(__file__).resolve().parent.parent
GOOD_PRODUCTION = {
    "APP_ENV": "production",
    "SECRET_KEY": "Zq3v9-Lr1mX0bT7kPy2sWd8nHc5fJa4gUe6oRi-Vt0",
    "API_TOKENS": "a-token-of-sixteen-plus",
    "TRUSTED_HOSTS": "orders.example",
    "RATELIMIT_STORAGE_URI": "redis://127.0.0.1:6379/0",
}
# What an operator and a probe tried (issue 19), each with the setting its line must name.
TRIED = [
    ("PAGE_SIZE", "abc"),
    ("PAGE_SIZE", "0"),
    ("PAGE_SIZE", "100000"),
    ("PAGE_SIZE", "5000"),
    ("MAX_ROWS_IN_PAGE", "-5"),
    ("AUTO_PAGES", "x"),
    ("AUTO_PAGES", "-1"),
    ("REPLICA_MAX_LAG_MS", "1e3"),
    ("STATEMENT_TIMEOUT_MS", "-1"),
    ("STATEMENT_TIMEOUT_MS", "0"),
    ("TRUSTED_PROXIES", "-1"),
    ("RATELIMIT_READS", "lots"),
    ("RATELIMIT_WRITES", "5 per fortnight"),
    ("NEW_ORDERS_POLL_SECONDS", "0"),
    ("DATABASE_URL", "nonsense://x"),
    ("DATABASE_URL", "postgresql+nodriver://x/y"),
    ("DATABASE_REPLICA_URLS", "mysql+pymysql://root@127.0.0.1/x"),
    ("APP_ENV", "prod"),
    ("APP_ENV", "Production"),
    ("RATELIMIT_STORAGE_URI", "memcache"),
    ("WEB_CONCURRENCY", "0"),
]


def _integer_cases() -> list[tuple[str, str]]:
    """Each integer setting just below and above its bounds, and a float, from the table."""
    cases = []
    for s in SETTINGS:
        if isinstance(s.kind, settings.Integer):
            cases += [(s.name, str(s.kind.low - 1)), (s.name, str(s.kind.high + 1)), (s.name, "1.5")]
    return cases


def _environment(**values: str) -> dict[str, str]:
    shell = ("FLASK_DEBUG", "GUNICORN_CMD_ARGS")
    env = {k: v for k, v in os.environ.items() if k.upper() not in settings.BY_NAME and k not in shell}
    env["DATABASE_URL"] = "sqlite://"
    env.update(values)
    return env


def _init_db(**values: str) -> subprocess.CompletedProcess[str]:
    """`flask init-db` started as an operator would, with `values` as the only settings."""
    return forked.run(
        [sys.executable, "-m", "flask", "--app", "app", "init-db"],
        cwd=ROOT,
        env=_environment(**values),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _one_line(result: subprocess.CompletedProcess[str], name: str) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert name in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("name", "value"), TRIED + _integer_cases())
def test_a_bad_value_stops_every_command_with_one_line(name: str, value: str) -> None:
    result = _init_db(**{name: value})
    line = _one_line(result, name)
    assert "must be" in line or "needs" in line or "valid" in line


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"API_TOKENS": "x"}, "API_TOKENS"),
        ({"API_TOKENS": "tökenwithsixteenchars"}, "API_TOKENS"),
        ({"API_TOKENS": ""}, "API_TOKENS"),
        ({"SECRET_KEY": "changeme" * 4}, "SECRET_KEY"),
        ({"TRUSTED_HOSTS": ""}, "TRUSTED_HOSTS"),
        ({"RATELIMIT_STORAGE_URI": "memory://", "WEB_CONCURRENCY": "4"}, "RATELIMIT_STORAGE_URI"),
    ],
)
def test_production_refuses_what_weakens_it(change: dict[str, str], named: str) -> None:
    given = {**GOOD_PRODUCTION, **change}
    with pytest.raises(SettingsError, match=named):
        create_app({k: v for k, v in given.items() if v})
    assert create_app(GOOD_PRODUCTION).config["PRODUCTION"]


def test_gunicorn_refuses_a_bad_value_before_any_worker_starts() -> None:
    result = subprocess.run(
        [sys.executable, "serve.py", "--check-config"],
        cwd=ROOT,
        env=_environment(WEB_THREADS="lots"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "WEB_THREADS='lots' is not valid" in result.stderr
    assert "Traceback" not in result.stderr


@given(text=st.text(max_size=12))
def test_integer_settings_take_digits_in_bounds_or_say_why(text: str) -> None:
    for s in SETTINGS:
        if isinstance(s.kind, settings.Integer):
            try:
                value = s.read(text)
            except SettingsError as err:
                assert str(err).startswith(f"{s.name}=") and "\n" not in str(err)
            else:
                assert s.kind.low <= value <= s.kind.high and value == int(text)


def test_every_default_is_valid_and_the_table_is_the_documentation() -> None:
    for s in SETTINGS:
        if s.default is not None:
            assert s.read(s.default) == s.default, s.name
    doc = (ROOT / settings_docs.DOC).read_text()
    assert settings_docs.documented(doc) == settings_docs.markdown_table(), (
        "run: python -m orders.core.settings_docs --write"
    )


INIT_DB = ["-m", "flask", "--app", "app", "init-db"]
BOTH_WAYS = [
    (INIT_DB, {"PAGE_SIZE": "abc"}),
    (INIT_DB, {"RATELIMIT_STORAGE_URI": "redis://:S3cret@127.0.0.1:99999/0"}),
    (INIT_DB, {"TRUSTED_PROXY": "1"}),  # a warning, then exit 0
    (["serve.py"], {"WEB_CONCURRENCY": "1e3"}),  # what gunicorn itself reads when imported
]


@pytest.mark.parametrize(("args", "values"), BOTH_WAYS)
def test_a_forked_start_says_what_a_cold_one_does(args: list[str], values: dict[str, str]) -> None:
    """The forked children (tests/forked.py) cannot hide a refusal: the same command and
    environment, from a fresh interpreter and forked, end the same, with the same output."""
    command = [sys.executable, *args]
    env = _environment(**values)
    cold = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    fork = forked.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert (fork.returncode, fork.stdout, fork.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.stderr and "Traceback" not in cold.stderr


def test_no_module_reads_an_app_setting_from_the_environment_itself() -> None:
    """One home: os.environ is read for settings only by orders/core/settings.py."""
    names = [s.name for s in SETTINGS]
    tops = [ROOT / "app.py", ROOT / "serve.py", ROOT / "gunicorn.conf.py"]
    for path in [*tops, *(ROOT / "orders").glob("*.py")]:
        if path.name == "settings.py":
            continue
        text = path.read_text()
        for name in names:
            assert f'environ.get("{name}"' not in text and f'environ["{name}"]' not in text, (path, name)


# --- Values that cannot work, and names that are not settings (issue 30) ----------------------

CANNOT_WORK = [
    ("DATABASE_URL", "postgresql+asyncpg://u@127.0.0.1/orders"),  # an asyncio driver (absent, too)
    ("DATABASE_URL", "mysql+aiomysql://u@127.0.0.1/orders"),
    ("DATABASE_URL", "postgresql+psycopg://u@127.0.0.1:notaport/orders"),
    ("DATABASE_URL", "postgresql+psycopg://u@127.0.0.1:70000/orders"),
    ("DATABASE_REPLICA_URLS", "postgresql+psycopg://u@127.0.0.1:0/orders"),
    ("RATELIMIT_STORAGE_URI", "redis://127.0.0.1:notaport"),
    ("RATELIMIT_STORAGE_URI", "redis://127.0.0.1:99999/0"),
    ("RATELIMIT_READS", "0 per minute"),
    ("RATELIMIT_WRITES", "10 per second;0 per hour"),
    ("TRUSTED_HOSTS", " , "),
]


@pytest.mark.parametrize(("name", "value"), CANNOT_WORK)
def test_a_value_that_cannot_work_is_refused_at_start_in_one_line(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=f"^{name}="):
        settings.from_environment({name: value})
    result = _init_db(**{name: value})
    _one_line(result, name)


def test_trusted_hosts_defaults_to_loopback_in_development_and_is_required_in_production() -> None:
    assert settings.resolve({})["TRUSTED_HOSTS"] == ("localhost", "127.0.0.1")
    given = {k: v for k, v in GOOD_PRODUCTION.items() if k != "TRUSTED_HOSTS"}
    with pytest.raises(SettingsError, match="needs TRUSTED_HOSTS"):
        settings.resolve(given)


def _misspellings(name: str) -> set[str]:
    """Every name one slip away from `name`: a character left out, doubled, swapped with the
    next or changed (to the next letter, or '_' to '-'), and the last word cut short."""
    slips = set()
    for i, ch in enumerate(name):
        slips.add(name[:i] + name[i + 1 :])
        slips.add(name[:i] + ch + name[i:])
        if i + 1 < len(name):
            slips.add(name[:i] + name[i + 1] + ch + name[i + 2 :])
        other = "_" if ch == "-" else chr(ord("A") + (ord(ch) - ord("A") + 1) % 26) if ch.isalpha() else "X"
        slips.add(name[:i] + other + name[i + 1 :])
    head, _, last = name.rpartition("_")
    if head and len(last) > 3:
        slips.add(f"{head}_{last[:-2]}")
    return slips - set(settings.BY_NAME) - {""}


MISSPELT = sorted((name, slip) for name in settings.BY_NAME for slip in _misspellings(name))
# What the probe of issue 30 set, each meaning the setting after it.
PROBED = [
    ("TRUSTED_PROXY", "TRUSTED_PROXIES"),
    ("RATELIMIT_STORAGE", "RATELIMIT_STORAGE_URI"),
    ("DATABASE_READ_TIMEOUT", "DATABASE_READ_TIMEOUT_MS"),
    ("APP_ENVIRONMENT", "APP_ENV"),
]


def test_every_misspelling_of_every_setting_is_refused_in_production_with_the_nearest_name() -> None:
    assert len(MISSPELT) > 1000, len(MISSPELT)
    for intended, slip in MISSPELT + [(meant, slip) for slip, meant in PROBED]:
        env = {**GOOD_PRODUCTION, slip: "1"}
        with pytest.raises(SettingsError) as refused:
            settings.from_environment(env)
        line = str(refused.value)
        assert line.startswith(f"{slip} is not a setting") and "\n" not in line, line
        # The nearest known name: the one meant, or one at least as close (BIND and BINDS...).
        suggested = line.split("did you mean ")[1].split("?")[0]
        ratio = difflib.SequenceMatcher(None, slip, suggested).ratio()
        assert suggested == intended or ratio >= difflib.SequenceMatcher(None, slip, intended).ratio(), line


@pytest.mark.parametrize(("slip", "meant"), PROBED)
def test_development_warns_about_a_misspelling_in_one_line_and_goes_on(
    slip: str, meant: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line, as docs/configuration.md shows it: the warnings module's format added the
    caller's source line under it."""
    line = f"Warning: {slip} is not a setting (docs/configuration.md lists them); did you mean {meant}? "
    line += "(production refuses it)"
    result = _init_db(**{slip: "1"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [line]
    refused = _init_db(**GOOD_PRODUCTION, **{slip: "1"})
    assert f"{slip} is not a setting" in _one_line(refused, slip)
    monkeypatch.setattr(settings, "_WARNED", set())  # this process may have warned already
    assert settings.from_environment({slip: "1"}) == {}
    assert settings.from_environment({slip: "1"}) == {}
    assert capsys.readouterr().err.splitlines() == [line]  # once


def test_a_misspelling_is_warned_once_by_a_whole_gunicorn_start() -> None:
    """serve.py reads the environment twice and gunicorn.conf.py once more in one process, the
    app again when loaded: four warnings of two lines each, now one line."""
    result = forked.run(
        [sys.executable, "serve.py", "--check-config"],
        cwd=ROOT,
        env=_environment(TRUSTED_PROXY="1", METRICS="off"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr[-800:]
    assert result.stderr.splitlines() == [
        "Warning: TRUSTED_PROXY is not a setting (docs/configuration.md lists them); did you mean "
        "TRUSTED_PROXIES? (production refuses it)"
    ]


def test_other_programs_variables_are_not_settings() -> None:
    """The machine's own environment and the usual neighbours pass without a word."""
    others = ["PATH", "HOME", "VIRTUAL_ENV", "PAGER", "WEB_CONCURRENCY", "GUNICORN_CMD_ARGS", "FLASK_APP"]
    others += ["FLASK_DEBUG", "PYTHONPATH", "REDIS_URL", "BASE_URL", "TEST_REDIS_URL", "CI", "LANG", "TERM"]
    assert settings.unknown_settings(dict.fromkeys([*os.environ, *others], "x")) == []


def test_the_readme_table_is_generated_from_the_settings_table() -> None:
    text = (ROOT / settings_docs.README).read_text()
    assert settings_docs.documented(text) == settings_docs.readme_table(), (
        "run: python -m orders.core.settings_docs --write"
    )


# --- Issue 39: no secret in a refusal, names in any case, gunicorn's own settings ----------------

SECRET_URLS = [
    ("DATABASE_URL", "postgresql+psycopg://app:S3cret@127.0.0.1:99999/x"),
    ("DATABASE_URL", "postgresql+asyncpg://app:S3cret@127.0.0.1/x"),
    ("DATABASE_REPLICA_URLS", "postgresql+psycopg://app:S3cret@127.0.0.1:0/x"),
    ("RATELIMIT_STORAGE_URI", "redis://:S3cret@127.0.0.1:99999/0"),
    ("RATELIMIT_STORAGE_URI", "rediss://user:S3cret@127.0.0.1:70000/0"),
    ("RATELIMIT_STORAGE_URI", "redis://127.0.0.1:99999/0?password=S3cret"),
]


@pytest.mark.parametrize(("name", "value"), SECRET_URLS)
def test_a_refusal_never_prints_a_credential(name: str, value: str) -> None:
    result = _init_db(**{name: value})
    line = _one_line(result, name)
    assert "S3cret" not in result.stderr + result.stdout, line
    assert "***" in line, line


def test_masked_hides_every_credential_and_keeps_the_rest() -> None:
    assert settings.masked("postgresql://app:pw@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert settings.masked("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert settings.masked("redis://h/0?token=pw&db=1") == "redis://h/0?token=***&db=1"
    assert settings.masked("postgresql://app@db/x") == "postgresql://app@db/x"  # no password
    assert settings.masked("127.0.0.1:8000") == "127.0.0.1:8000"


def test_a_setting_is_read_whatever_the_case_of_its_name() -> None:
    assert settings.from_environment({"trusted_proxies": "1"})["TRUSTED_PROXIES"] == 1
    assert settings.from_environment({**GOOD_PRODUCTION, "Trusted_Proxies": "2"})["TRUSTED_PROXIES"] == 2
    with pytest.raises(
        SettingsError, match="TRUSTED_PROXIES is given as TRUSTED_PROXIES and trusted_proxies"
    ):
        settings.from_environment({"TRUSTED_PROXIES": "1", "trusted_proxies": "2"})


@pytest.mark.parametrize("slip", ["trusted_proxy", "Trusted_Proxy", "database_urls", "api_token"])
def test_a_near_miss_in_any_case_is_refused_by_name_in_production(slip: str) -> None:
    with pytest.raises(SettingsError, match=f"^{slip} is not a setting.*did you mean"):
        settings.from_environment({**GOOD_PRODUCTION, slip: "1"})


# What gunicorn reads itself, from the environment (some of it when imported, before
# gunicorn.conf.py), GUNICORN_CMD_ARGS and serve.py's command line: (environment, arguments, the
# name the line must say).
GUNICORN_READS = [
    ({"WEB_CONCURRENCY": "1e3"}, [], "WEB_CONCURRENCY"),  # gunicorn: a 13-line traceback, exit 1
    ({"web_concurrency": "1e3"}, [], "WEB_CONCURRENCY"),
    ({"BIND": "127.0.0.1:99999"}, [], "BIND"),  # gunicorn: a 30-line OverflowError
    ({"BIND": "not a socket:::"}, [], "BIND"),  # gunicorn: exit 1 without naming BIND
    ({"BIND": "127.0.0.1"}, [], "BIND"),
    ({"BIND": "host:0"}, [], "BIND"),
    ({"BIND": ":80"}, [], "BIND"),
    ({"PORT": "abc"}, [], "PORT"),
    ({"PORT": "9000"}, [], "PORT"),  # gunicorn.conf.py's BIND wins: PORT alone was ignored
    ({"FORWARDED_ALLOW_IPS": "zzz"}, [], "FORWARDED_ALLOW_IPS"),  # gunicorn: two lines, exit 1
    ({"FORWARDED_ALLOW_IPS": "10.0.0.1/8"}, [], "FORWARDED_ALLOW_IPS"),
    ({"SENDFILE": "maybe"}, [], "SENDFILE"),  # gunicorn: read as no, silently
    ({"GUNICORN_CMD_ARGS": "--workers 1e3"}, [], "GUNICORN_CMD_ARGS"),  # argparse: usage, error
    ({"GUNICORN_CMD_ARGS": "--workers 100"}, [], "GUNICORN_CMD_ARGS --workers"),
    ({"GUNICORN_CMD_ARGS": "--bind 127.0.0.1:99999"}, [], "GUNICORN_CMD_ARGS --bind"),
    ({"GUNICORN_CMD_ARGS": "--threads 0"}, [], "GUNICORN_CMD_ARGS --threads"),
    ({"GUNICORN_CMD_ARGS": "--timeout 'x"}, [], "GUNICORN_CMD_ARGS"),  # gunicorn: a traceback
    ({"GUNICORN_CMD_ARGS": "--forwarded-allow-ips zzz"}, [], "GUNICORN_CMD_ARGS --forwarded-allow-ips"),
    ({"GUNICORN_CMD_ARGS": "--bind redis://:S3cret@127.0.0.1:99999"}, [], "GUNICORN_CMD_ARGS --bind"),
    ({}, ["--workers", "1e3"], "command line"),
    ({}, ["--bind", "not a socket:::"], "command line --bind"),
    # Issue 58. --env is set by gunicorn after gunicorn.conf.py: every worker exited 2, forever.
    ({"GUNICORN_CMD_ARGS": "--env DATABASE_URL=nonsense://x"}, [], "DATABASE_URL"),
    ({}, ["--env", "PAGE_SIZE=0"], "PAGE_SIZE"),
    ({"GUNICORN_CMD_ARGS": "--env PAGE_SIZE"}, [], "GUNICORN_CMD_ARGS --env"),
    ({"METRICS_DIR": "/proc/nope"}, [], "METRICS_DIR"),  # gunicorn: a traceback
    ({"METRICS_DIR": "serve.py"}, [], "METRICS_DIR"),  # a file
    ({}, ["--worker-class", "nope.Worker"], "command line --worker-class"),  # a traceback
    ({}, ["--certfile", "/nonexistent.pem"], "command line --certfile"),  # a traceback per worker
    ({}, ["--certfile", "serve.py"], "command line --certfile"),  # a file, no certificate
    ({}, ["--config", "/nonexistent.py"], "command line --config"),  # gunicorn: exit status 1
    ({}, ["--log-level", "shout"], "command line --log-level"),  # gunicorn: started at info
]


@pytest.mark.parametrize(("env", "args", "named"), GUNICORN_READS)
def test_every_setting_gunicorn_reads_is_refused_in_one_line_with_status_2(
    env: dict[str, str], args: list[str], named: str
) -> None:
    """A real start (no --check-config): one line naming the setting, exit status 2, no
    credential, before gunicorn boots (a start that went on would serve until the timeout)."""
    result = forked.run(
        [sys.executable, "serve.py", *args],
        cwd=ROOT,
        env=_environment(**env),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr[-800:]
    line = _one_line(result, named)
    assert "Booting" not in result.stdout + result.stderr
    assert "S3cret" not in line


def _production() -> dict[str, str]:
    given = {**GOOD_PRODUCTION, "TRUSTED_HOSTS": "127.0.0.1", "WEB_CONCURRENCY": "1"}
    return _environment(**{**given, "RATELIMIT_STORAGE_URI": "memory://"})


def test_production_starts_only_through_serve_py(tmp_path: Path) -> None:
    """gunicorn started straight reads its variables before the table can check them: in
    production gunicorn.conf.py refuses that start in one line; serve.py's serves."""
    straight = subprocess.run(
        [sys.executable, "-m", "gunicorn", "app:create_app()"],
        cwd=ROOT,
        env=_production(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert straight.returncode == 2, straight.stderr[-800:]
    assert "serve.py" in _one_line(straight, "APP_ENV=production")
    env = _production()
    url = env.pop("DATABASE_URL")
    with gunicorn(url, log_path=tmp_path / "serve.log", workers=1, env=env) as (base, _):
        assert requests.get(f"{base}/healthz", timeout=10).json() == {"status": "ok"}
    assert any("Booting worker" in line for line in whole_lines(tmp_path / "serve.log"))


def test_production_refuses_flask_run_and_runs_the_operators_commands(tmp_path: Path) -> None:
    """`APP_ENV=production flask --app app run` served Werkzeug's development server: refused in
    one line, exit 2 (port 0: had it served, on a port nobody else asked for). The commands
    docs/operations.md has operators run in production still run."""
    flask = [sys.executable, "-m", "flask", "--app", "app"]
    env = {**_production(), "DATABASE_URL": f"sqlite:///{tmp_path / 'production.db'}"}

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return forked.run([*flask, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=20)

    refused = run("run", "--port", "0")
    assert refused.returncode == 2, refused.stderr[-800:]
    assert "`flask run` is Werkzeug's development server" in _one_line(refused, "python serve.py")
    commands = [["init-db"], ["seed", "--rows", "20"], ["export", "--output", str(tmp_path / "o.csv")]]
    for command in [*commands, ["fold-rail"]]:
        result = run(*command)
        assert result.returncode == 0, (command, result.stderr[-800:])
    assert len((tmp_path / "o.csv").read_text().splitlines()) == 21


# What makes gunicorn run more workers than WEB_CONCURRENCY says: (environment, arguments, the
# workers run, serve.py's exit status). {config}: a config file of the test's own.
WORKERS_GIVEN = [
    ({}, ["--workers", "3"], 3, 2),
    ({"GUNICORN_CMD_ARGS": "--workers=3"}, [], 3, 2),
    ({}, ["--config", "{config}"], 4, 2),
    ({"GUNICORN_CMD_ARGS": "--workers=3"}, ["-w", "1"], 1, 0),  # the command line wins: one
]


@pytest.mark.parametrize(("env", "args", "workers", "status"), WORKERS_GIVEN)
def test_production_refuses_per_process_limits_with_the_workers_gunicorn_runs(
    tmp_path: Path, env: dict[str, str], args: list[str], workers: int, status: int
) -> None:
    """WEB_CONCURRENCY=1 with memory:// passed the table's rule while `--workers 3` or
    GUNICORN_CMD_ARGS ran three workers, each counting every limit alone. serve.py asks once
    gunicorn has read its config and options, before its run() (where --check-config stops, so
    no server is started here): one line, exit 2; one worker still starts."""
    config = tmp_path / "four.conf.py"
    config.write_text("workers = 4\n")
    result = forked.run(
        [sys.executable, "serve.py", "--check-config", *(a.format(config=config) for a in args)],
        cwd=ROOT,
        env={**_production(), "METRICS": "off", **env},  # METRICS off: no temporary directory left
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == status, result.stderr[-800:]
    if status:
        assert f"RATELIMIT_STORAGE_URI=memory:// with {workers} workers" in _one_line(result, "--workers")


def test_serve_py_runs_the_repositorys_config_from_any_directory(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "serve.py"), "--check-config", "--print-config"],
        cwd=tmp_path,
        env=_environment(WEB_THREADS="3"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr[-800:]
    assert re.search(r"^threads\s+= 3$", result.stdout, re.MULTILINE), result.stdout[-2000:]
    assert re.search(r"^worker_class\s+= gthread$", result.stdout, re.MULTILINE)
