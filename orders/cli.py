"""Flask CLI commands: init-db, add-shard, fold-rail, seed, export. Each wraps a plain function
that tests call.

Each behaves like a tool: a failure it can explain (a bad setting, a database that refuses or
does not exist, a missing migration, a file it cannot write) is one line on stderr and a
non-zero exit status; the traceback only with --traceback or FLASK_DEBUG=1. The commands run on
an engine of their own without the web's STATEMENT_TIMEOUT_MS: a seed or an export is one
operator's deliberate job, not a request that must not hold the database.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click
from flask import Flask, current_app
from flask.cli import with_appcontext
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from tqdm import tqdm
from werkzeug.datastructures import MultiDict

from orders.core.settings import SettingsError
from orders.data.db import describe_migration, make_engine, migrate
from orders.data.models import STATUSES, Order
from orders.data.rail_fold import fold
from orders.data.seed import seed_orders
from orders.data.shards import ShardSetupError, add_shard, init_shards
from orders.exports.stream import EXPORT_BATCH_SIZE, MAX_BATCH_SIZE, csv_header, export_chunks, snapshot
from orders.finding.params import InvalidParameter
from orders.finding.request import list_request
from orders.finding.sorts import DEFAULT_SORT, SORTS
from pagination import PaginationError


def _cli_engine() -> Any:
    """The commands' engine: the app's database without the web's statement timeout."""
    if "cli_engine" not in current_app.extensions:
        current_app.extensions["cli_engine"] = make_engine(current_app.config["DATABASE_URL"])
    return current_app.extensions["cli_engine"]


def _session() -> Any:
    from sqlalchemy.orm import Session

    return Session(_cli_engine(), expire_on_commit=False)


def _first_line(err: BaseException) -> str:
    text = str(getattr(err, "orig", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _where() -> str:
    try:
        return make_url(current_app.config["DATABASE_URL"]).render_as_string(hide_password=True)
    except Exception:  # no app context (the settings themselves were bad)
        return "the database"


def explained(err: BaseException) -> str | None:
    """The one line an operator needs for a failure the commands know, or None (a bug: shown
    with its traceback)."""
    from alembic.util import CommandError

    if isinstance(err, SettingsError | ShardSetupError):
        return str(err)
    if isinstance(err, CommandError):
        return f"migrations: {_first_line(err)} (is this database from a newer version of the app?)"
    if isinstance(err, OperationalError):  # refused, unknown database, authentication, timeout
        return f"cannot use {_where()}: {_first_line(err)}"
    if isinstance(err, SQLAlchemyError):
        return f"database error at {_where()}: {_first_line(err)}"
    if isinstance(err, OSError):
        return f"{err.strerror or err}: {getattr(err, 'filename', '') or ''}".rstrip(": ")
    return None


def tool(command: Callable[..., Any]) -> Callable[..., Any]:
    """One line and exit status 1 for an explained failure; --traceback (or FLASK_DEBUG=1) shows
    the traceback instead. Put between @click.command and @with_appcontext, so a bad setting
    met while loading the app is caught too."""

    @click.option("--traceback", "show_traceback", is_flag=True, help="Show the traceback of a failure.")
    @functools.wraps(command)
    def run(*args: Any, show_traceback: bool, **kwargs: Any) -> Any:
        debug = show_traceback or os.environ.get("FLASK_DEBUG", "").lower() in ("1", "true", "yes")
        try:
            return command(*args, **kwargs)
        except Exception as err:
            line = None if debug else explained(err)
            if line is None:
                raise
            raise click.ClickException(line) from None

    return run


@click.command("init-db")
@tool
@with_appcontext
def init_db_command() -> None:
    """Create or upgrade the schema to the newest migration (safe to run again). With
    DATABASE_SHARD_URLS: every shard, then the coordinator's foreign partitions (orders/data/shards.py)."""
    shard_urls = current_app.config.get("DATABASE_SHARD_URLS")
    if shard_urls:
        cfg = current_app.config
        click.echo(init_shards(cfg["DATABASE_URL"], shard_urls, page_size=cfg["PAGE_SIZE"]))
        return
    click.echo(describe_migration(*migrate(_cli_engine())))


@click.command("add-shard")
@click.argument("url")
@tool
@with_appcontext
def add_shard_command(url: str) -> None:
    """Add the shard server at URL while the list keeps serving: half of the largest shard's
    orders move to it by logical replication, then one short switch of the coordinator's
    partitions (docs/shards.md). Then append URL to DATABASE_SHARD_URLS."""
    cfg = current_app.config
    if not cfg.get("DATABASE_SHARD_URLS"):
        raise ShardSetupError("add-shard needs DATABASE_SHARD_URLS: the shards the coordinator has now")
    added = add_shard(cfg["DATABASE_URL"], cfg["DATABASE_SHARD_URLS"], url, page_size=cfg["PAGE_SIZE"])
    click.echo(str(added))


@click.command("fold-rail")
@tool
@with_appcontext
def fold_rail_command() -> None:
    """Gather each rail bucket's count rows into one, so that a rail reads about one row per
    bucket (orders/data/rail_fold.py); with DATABASE_SHARD_URLS, on every shard. Waits for no
    writer; safe at any time and to run again (cron: every few minutes, docs/operations.md)."""
    shard_urls = current_app.config.get("DATABASE_SHARD_URLS")
    targets = [(url, make_engine(url)) for url in shard_urls] if shard_urls else [(None, _cli_engine())]
    for url, engine in targets:
        try:
            folded = fold(engine)
        finally:
            if url is not None:
                engine.dispose()
        where = f"{make_url(url).render_as_string(hide_password=True)}: " if url else ""
        if not folded:
            click.echo(f"{where}no rail counts here (a coordinator of shards keeps none)")
            continue
        click.echo(
            where
            + ", ".join(f"{family} {n:,} row{'' if n == 1 else 's'} folded" for family, n in folded.items())
        )


@click.command("seed")
@click.option("--rows", default=300_000, show_default=True, help="How many orders to insert.")
@click.option("--per-minute", default=3, show_default=True, help="Orders sharing each minute.")
@click.option("--if-empty", is_flag=True, help="Seed only when the orders table is empty.")
@tool
@with_appcontext
def seed_command(rows: int, per_minute: int, if_empty: bool) -> None:
    """Insert demo orders, several per minute (equal timestamps are the realistic case)."""
    if rows < 0 or per_minute < 1:
        raise click.BadParameter("--rows must be 0 or more and --per-minute 1 or more")
    with _session() as session:
        if if_empty and session.scalar(select(Order.id).limit(1)) is not None:
            click.echo("orders already present; not seeding")
            return
        started = time.perf_counter()
        with _SeedProgress() as progress:
            took = seed_orders(session, rows, per_minute=per_minute, progress=progress)
        stages = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in took.items())
        click.echo(f"seeded {rows:,} orders in {time.perf_counter() - started:.1f} s ({stages})")


class _SeedProgress:
    """The seed's progress on stderr: a bar per stage on a terminal, else one line per step (a
    log or a pipe shows how far it got, without the bar's carriage returns)."""

    def __init__(self) -> None:
        self.terminal = sys.stderr.isatty()
        self.bar: Any = None
        self.stage = ""

    def __enter__(self) -> _SeedProgress:
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        unit = "indexes" if stage == "indexes" else "rows"
        if not self.terminal:
            if done:
                click.echo(f"seeding: {stage} {done:,} of {total:,} {unit}", err=True)
            return
        if stage != self.stage:
            self._close()
            self.stage = stage
            self.bar = tqdm(total=total, unit=unit, desc=f"seeding {stage}", file=sys.stderr)
        self.bar.update(done - self.bar.n)

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __exit__(self, *_exc: object) -> None:
        self._close()


class _StopFlag:
    """Turns SIGINT/SIGTERM into a request to stop at the next batch boundary."""

    def __init__(self) -> None:
        self.stop = False

    def __call__(self, _signum: int, _frame: Any) -> None:
        self.stop = True


@click.command("export")
@click.option("--sort", type=click.Choice(list(SORTS)), default=DEFAULT_SORT, show_default=True)
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="File to write (default: standard output).")  # fmt: skip
@click.option("--after", default=None, help="Resume after this cursor (printed by an interrupted export).")
@click.option("--q", "search", default=None, help="Only the orders the search box finds for this text.")
@click.option("--to", default=None, help="Start where the list's Go to would: a date, an amount or a name.")
@click.option("--consistent", is_flag=True, help="Read one snapshot (REPEATABLE READ) for the whole export.")
@click.option(
    "--batch-size", type=click.IntRange(1, MAX_BATCH_SIZE), default=EXPORT_BATCH_SIZE, show_default=True
)
@click.option("--raw", is_flag=True,
              help="Write customer names exactly as stored: no ' before a leading =, +, -, @, tab or CR "
                   "(unsafe to open in a spreadsheet).")  # fmt: skip
@click.option("--bom", is_flag=True, help="Start with a UTF-8 byte order mark (for Excel, which needs it).")
@tool
@with_appcontext
def export_command(
    sort: str,
    status: str | None,
    output: Path | None,
    after: str | None,
    search: str | None,
    to: str | None,
    consistent: bool,
    batch_size: int,
    raw: bool,
    bom: bool,
) -> None:
    """Stream orders as CSV in keyset batches. A resumed export writes no header, so the
    interrupted file and the resumed one concatenate into the full export. Text cells that a
    spreadsheet would run as a formula are written with a leading ' unless --raw."""
    # The list the page shows for the same parameters (orders/finding/request.py): one definition.
    given = {"sort": sort, "status": status, "after": after, "q": search, "to": to}
    # An empty --after (an unset "$CURSOR") is refused as the web refuses `?after=`: dropped, it
    # exported from the top without a header into the file a resume appends to.
    args = MultiDict(
        {name: value for name, value in given.items() if value or (name == "after" and value is not None)}
    )
    try:
        listing = list_request(args)
    except PaginationError as err:  # the cursor, decoded here once
        raise click.BadParameter(str(err), param_hint="--after") from None
    except InvalidParameter as err:
        raise click.BadParameter(str(err)) from None
    flag = _StopFlag()
    previous = {sig: signal.signal(sig, flag) for sig in (signal.SIGINT, signal.SIGTERM)}
    out = output.open("ab" if after else "wb") if output else sys.stdout.buffer
    cursor = after
    written = 0
    try:
        with _session() as session:
            chunks = export_chunks(
                session,
                listing,
                batch_size=batch_size,
                one_transaction=consistent,
                raw=raw,
            )
            if after is None:
                out.write(csv_header(bom=bom).encode())
            with (
                snapshot(session) if consistent else nullcontext(),
                tqdm(unit="rows", disable=None if output else True, file=sys.stderr, desc="exporting") as bar,
            ):
                for chunk in chunks:
                    out.write(chunk.data)
                    out.flush()
                    cursor = chunk.cursor
                    written += chunk.rows
                    bar.update(chunk.rows)
                    if flag.stop:
                        break
    except PaginationError as err:
        raise click.BadParameter(str(err), param_hint="--to" if to else "--after") from None
    except InvalidParameter as err:  # a go-to with nothing there
        raise click.BadParameter(str(err), param_hint="--to") from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if output:
            out.close()
    if flag.stop:
        click.echo(f"interrupted after {written:,} rows; resume with: --after {cursor}", err=True)
        sys.exit(130)
    click.echo(f"exported {written:,} rows", err=True)


def init_app(app: Flask) -> None:
    # with_appcontext on each command: `flask --app app ...` pushes a context itself, but
    # app.test_cli_runner() and any other caller of app.cli need the command to do it.
    for command in (init_db_command, add_shard_command, fold_rail_command, seed_command, export_command):
        app.cli.add_command(command)

    @app.teardown_appcontext
    def _close_cli_engine(_exc: BaseException | None) -> None:
        # A command's engine lives for its one command (the context it ran in).
        engine = app.extensions.pop("cli_engine", None)
        if engine is not None:
            engine.dispose()
