"""The production start: the settings table checks everything gunicorn reads, then gunicorn runs.

    python serve.py [gunicorn options] ['app:create_app()']

gunicorn reads some of the environment itself, and some of it when it is imported, before
gunicorn.conf.py (where the app's settings are checked) runs: `WEB_CONCURRENCY=1e3` was a 13-line
traceback with exit status 1, `GUNICORN_CMD_ARGS='--workers x'` argparse's usage and its error.
Here, before gunicorn is imported:

1. the settings table (orders/core/settings.py), whole: WEB_CONCURRENCY, WEB_THREADS, BIND and
   what gunicorn reads from the environment of its own (PORT, FORWARDED_ALLOW_IPS, SENDFILE)
   are rows of it;
2. GUNICORN_CMD_ARGS and the options given here, parsed and set by gunicorn's own parser and
   validators; --bind, --workers and --threads are read by the table's rules for BIND,
   WEB_CONCURRENCY and WEB_THREADS;
3. the table again over the environment the app will see, with every `--env KEY=VALUE` (gunicorn
   sets those after gunicorn.conf.py: a bad DATABASE_URL so given passed, and every worker
   exited 2 and was started again, forever);
4. what gunicorn's validators let through and fail on later: a --config, --certfile, --keyfile
   or --ca-certs that cannot be read (exit 1, or a traceback in every worker), a certificate
   and key that do not load, a --worker-class that cannot be imported, a --log-level gunicorn
   does not know (it started silently at info);
5. and, once gunicorn has read its config, GUNICORN_CMD_ARGS and the options here, before it
   starts anything: the number of workers it will run. Production refuses per-process rate-limit
   counters (memory://) with more than one; the table's rule sees WEB_CONCURRENCY alone, and
   `WEB_CONCURRENCY=1 ... --workers 3` ran three workers, each counting limits alone.

A bad value anywhere: one line on stderr naming it (credentials masked), exit status 2, as every
other command of the app. Then gunicorn runs with the repository's gunicorn.conf.py and, when no
app is named, `app:create_app()`. gunicorn.conf.py refuses APP_ENV=production started any other
way (`gunicorn ...` straight), so no production start skips these checks.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent
CONFIG = ROOT / "gunicorn.conf.py"
APP = "app:create_app()"
# The one production start, as the refusals of the others say it (gunicorn.conf.py: gunicorn
# started straight; app.py: `flask run`).
PRODUCTION_START = "APP_ENV=production starts with `python serve.py [gunicorn options]`"
# gunicorn's options that are rows of the settings table: checked by the table's rules.
TABLE_OPTIONS = {"bind": "BIND", "workers": "WEB_CONCURRENCY", "threads": "WEB_THREADS"}
# What gunicorn reads from the environment when it is imported, with int() or as a default: an
# empty value, which the table reads as unset, would be int('') there.
READ_AT_IMPORT = ("WEB_CONCURRENCY", "PORT", "FORWARDED_ALLOW_IPS")


def started_here() -> bool:
    """Whether this process was started by this file (gunicorn.conf.py asks). Asked of the
    __main__ module, not sys.argv[0]: a config that reads gunicorn.conf.py with runpy
    (deploy/gunicorn-streams.conf.py) has argv[0] set to that file's path meanwhile, and the
    stream server was refused in production."""
    started = getattr(sys.modules.get("__main__"), "__file__", None)
    return isinstance(started, str) and Path(started).resolve() == Path(__file__).resolve()


def _option(source: str, name: str, value: object) -> str:
    from orders.core.settings import masked

    shown = " ".join(value) if isinstance(value, list) else str(value)
    return f"{source} --{name.replace('_', '-')} {masked(shown)!r}"


def check_options(source: str, args: Sequence[str]) -> Any:
    """gunicorn's options in `args` (from `source`), each parsed and set as gunicorn does; the
    table's own rows by the table's rules. Returns argparse's namespace."""
    from gunicorn.config import Config

    from orders.core.settings import BY_NAME, SettingsError, masked

    config = Config()
    parser = config.parser()

    def refuse(message: str) -> NoReturn:
        raise SettingsError(f"{source} is not valid: {masked(message)}")

    parser.error = refuse  # argparse would print its usage and exit
    parsed = parser.parse_args(args)
    for name, value in vars(parsed).items():
        if value is None or name == "args":
            continue
        if name in TABLE_OPTIONS:
            setting = BY_NAME[TABLE_OPTIONS[name]]
            for item in value if isinstance(value, list) else [value]:
                try:
                    setting.kind.read(item)
                except Exception:
                    raise SettingsError(
                        f"{_option(source, name, item)} is not valid: it must be {setting.kind.rule} "
                        f"(the rule of {setting.name})"
                    ) from None
        try:
            config.set(name, value)
        except Exception as err:
            raise SettingsError(f"{_option(source, name, value)} is not valid: {err}") from None
    return parsed


# Options whose value names a file gunicorn reads (its config, TLS files): gunicorn opened them
# only later, with exit status 1 (--config) or a traceback in every worker (--certfile).
READ_FILES = ("config", "certfile", "keyfile", "ca_certs")


def check_what_options_name(source: str, parsed: Any) -> None:
    """What gunicorn's validators let through and gunicorn fails on later: a file that cannot be
    read, a worker class that cannot be loaded, a log level it does not know (it started
    silently at info), TLS files that are no certificate and key."""
    import ssl

    from gunicorn.glogging import Logger
    from gunicorn.util import load_class

    from orders.core.settings import SettingsError

    for name in READ_FILES:
        value = getattr(parsed, name, None)
        if value is None or (name == "config" and value.startswith("python:")):
            continue
        if not (os.path.isfile(value) and os.access(value, os.R_OK)):
            raise SettingsError(f"{_option(source, name, value)} is not valid: no such file can be read")
    if parsed.certfile is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                parsed.certfile, parsed.keyfile
            )
        except (ssl.SSLError, OSError) as err:
            raise SettingsError(
                f"{_option(source, 'certfile', parsed.certfile)} is not valid: no certificate and key "
                f"in it and --keyfile ({err})"
            ) from None
    if parsed.loglevel is not None and parsed.loglevel.lower() not in Logger.LOG_LEVELS:
        raise SettingsError(
            f"{_option(source, 'log_level', parsed.loglevel)} is not valid: it must be one of "
            + ", ".join(Logger.LOG_LEVELS)
        )
    if parsed.worker_class is not None:
        try:
            load_class(parsed.worker_class)
        except Exception as err:  # gunicorn's RuntimeError carries a whole traceback as text
            first = str(err).strip().splitlines()[0].rstrip(": ")
            raise SettingsError(
                f"{_option(source, 'worker_class', parsed.worker_class)} is not valid: {first}"
            ) from None


def given_environment(sources: Sequence[tuple[str, Any]], environ: Mapping[str, str]) -> dict[str, str]:
    """The environment gunicorn's app will see: `environ` and every `--env KEY=VALUE` (gunicorn
    sets them after gunicorn.conf.py ran, so a bad DATABASE_URL given so passed every check and
    each worker exited 2 and was started again forever)."""
    from orders.core.settings import SettingsError

    merged = dict(environ)
    for source, parsed in sources:
        for item in parsed.raw_env or ():
            name, equals, value = item.partition("=")
            if not equals or not name.strip():
                raise SettingsError(f"{_option(source, 'env', item)} is not valid: it must be KEY=VALUE")
            merged[name.strip()] = value
    return merged


def checked_arguments(
    args: Sequence[str], environ: Mapping[str, str]
) -> tuple[list[str], dict[str, str], dict[str, Any]]:
    """gunicorn's command line for `args`, the environment its app will see (`environ` and the
    `--env` options) and the settings read from it, every setting gunicorn will read checked
    first: SettingsError (one line) on the first bad one."""
    from orders.core.settings import SettingsError, from_environment, masked, resolve

    # The environment alone first: importing gunicorn (its parser) reads WEB_CONCURRENCY.
    resolve(from_environment(environ))
    cmd_args = environ.get("GUNICORN_CMD_ARGS", "")
    try:
        words = shlex.split(cmd_args)
    except ValueError as err:  # an unclosed quote: gunicorn's own shlex.split raised it
        raise SettingsError(f"GUNICORN_CMD_ARGS={masked(cmd_args)!r} is not valid: {err}") from None
    from_env = check_options("GUNICORN_CMD_ARGS", words)
    given_here = check_options("serve.py's command line", args)
    sources = [("GUNICORN_CMD_ARGS", from_env), ("serve.py's command line", given_here)]
    merged = given_environment(sources, environ)
    given = from_environment(merged)
    values = resolve(given)
    for source, parsed in sources:
        check_what_options_name(source, parsed)
    if "PORT" in given and "BIND" not in given and not (from_env.bind or given_here.bind):
        port = given["PORT"]
        raise SettingsError(
            f"PORT={port} is not read: gunicorn listens on BIND (default 127.0.0.1:8000); set "
            f"BIND=HOST:{port} (0.0.0.0:{port} is what gunicorn did alone) or unset PORT"
        )
    options = [*args]
    if from_env.config is None and given_here.config is None:  # the repository's, from any directory
        options = ["--config", str(CONFIG), *options]
    return (options if given_here.args or from_env.args else [*options, APP]), merged, values


def _refuse(err: Exception) -> NoReturn:
    print(f"Error: {err}", file=sys.stderr)
    raise SystemExit(2) from None


def main(args: Sequence[str] | None = None) -> Any:
    from orders.core.settings import SettingsError, check_workers

    for name in READ_AT_IMPORT:
        if name in os.environ and not os.environ[name].strip():
            del os.environ[name]  # unset, as the table reads it
    try:
        options, environment, values = checked_arguments(sys.argv[1:] if args is None else args, os.environ)
    except SettingsError as err:
        _refuse(err)
    # gunicorn.conf.py reads the settings as the app will: with the --env values (gunicorn sets
    # them itself only after reading its config).
    os.environ.update(environment)
    from gunicorn.app.wsgiapp import WSGIApplication

    sys.argv = [sys.argv[0], *options]
    application = WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]", prog="serve.py")
    # How many workers gunicorn runs is known only now, its config, GUNICORN_CMD_ARGS and the
    # options read in its order: checked before run() starts anything (its on_starting hook
    # comes after gunicorn's first log line, and only with gunicorn.conf.py).
    try:
        check_workers(values, application.cfg.workers)
    except SettingsError as err:
        _refuse(err)
    return application.run()


if __name__ == "__main__":
    main()
