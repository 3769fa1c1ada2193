"""Every setting the app and its tools read, in one table (SETTINGS): name, kind, default, rule
and meaning, read from the environment once and checked when the app is created and when any
CLI command or gunicorn starts.

A bad value stops the process with one line that names the setting, the value and the rule
(`SettingsError`). docs/configuration.md is generated from this table (`python -m
orders.settings`), and tests/test_settings.py checks the two agree, as the error table does.

Why a table of our own and not pydantic-settings: about twenty flat values, each needing a rule
written for an operator ("an integer from 1 to 100", "a rate like '60 per minute'"), not a
validation error tree; the table is the documentation as well (as Datasette's SETTINGS is), and
it adds no dependency. Cross-setting rules (production's) live in `check_together`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_PAGE_SIZE = 100  # one home: the JSON API's `limit` has the same ceiling (orders/listing.py)
DEVELOPMENT = "development"
PRODUCTION = "production"
MIN_TOKEN_LENGTH = 16


class SettingsError(ValueError):
    """A setting the operator got wrong: one line naming the setting, the value and the rule."""


def _shown(value: object, secret: bool) -> str:
    if secret:
        return "(hidden)"
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


# --- Kinds: how a value is read from text (the environment) or taken from Python (tests) -------


@dataclass(frozen=True)
class Integer:
    low: int
    high: int
    note: str = ""

    @property
    def rule(self) -> str:
        return f"an integer from {self.low:_} to {self.high:_}".replace("_", ",") + self.note

    def read(self, value: object) -> int:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, str):
            text = value.strip()
            if not (text.isascii() and text.lstrip("-").isdigit()) or text.count("-") > 1:
                raise ValueError
            value = int(text)
        if not isinstance(value, int) or not self.low <= value <= self.high:
            raise ValueError
        return value


@dataclass(frozen=True)
class Choice:
    values: tuple[str, ...]

    @property
    def rule(self) -> str:
        return "exactly one of " + ", ".join(repr(v) for v in self.values)

    def read(self, value: object) -> str:
        if not isinstance(value, str) or value not in self.values:
            raise ValueError
        return value


@dataclass(frozen=True)
class Text:
    min_length: int = 0
    printable_ascii: bool = False

    @property
    def rule(self) -> str:
        parts = ["text"]
        if self.min_length:
            parts.append(f"of at least {self.min_length} characters")
        if self.printable_ascii:
            parts.append("in printable ASCII")
        return " ".join(parts)

    def read(self, value: object) -> str:
        if not isinstance(value, str) or len(value) < self.min_length:
            raise ValueError
        if self.printable_ascii and not (value.isascii() and value.isprintable()):
            raise ValueError
        return value


@dataclass(frozen=True)
class TextList:
    """Comma-separated in the environment (spaces around items ignored, empty items dropped);
    a list or tuple from Python."""

    item: Text = field(default_factory=Text)
    what: str = "items"

    @property
    def rule(self) -> str:
        return f"comma-separated {self.what}, each {self.item.rule}"

    def read(self, value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            items: Sequence[object] = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, list | tuple):
            items = value
        else:
            raise ValueError
        return tuple(self.item.read(item) for item in items)


@dataclass(frozen=True)
class DatabaseUrl:
    """A SQLAlchemy URL whose dialect and driver are installed (checked by loading them)."""

    backends: tuple[str, ...] = ("sqlite", "postgresql", "mysql", "mariadb")

    @property
    def rule(self) -> str:
        return (
            "a SQLAlchemy database URL for "
            + ", ".join(self.backends)
            + " (e.g. postgresql+psycopg://user@host/db)"
        )

    def read(self, value: object) -> str:
        from sqlalchemy.engine import make_url

        if not isinstance(value, str):
            raise ValueError
        url = make_url(value)  # ArgumentError (a ValueError? no: caught by the caller) on garbage
        if url.get_backend_name() not in self.backends:
            raise ValueError
        url.get_dialect()  # NoSuchModuleError when the dialect or driver is not installed
        return value


@dataclass(frozen=True)
class DatabaseUrlList:
    item: DatabaseUrl

    @property
    def rule(self) -> str:
        return "comma-separated " + self.item.rule.removeprefix("a ").replace("URL", "URLs", 1)

    def read(self, value: object) -> tuple[str, ...]:
        return tuple(self.item.read(url) for url in TextList().read(value))


@dataclass(frozen=True)
class RateLimit:
    @property
    def rule(self) -> str:
        return "a rate limit like '60 per minute' or '10/second;1000/hour' (second, minute, hour, day)"

    def read(self, value: object) -> str:
        from limits import parse_many

        if not isinstance(value, str) or not value.strip():
            raise ValueError
        parse_many(value)  # ValueError on anything it cannot read ("lots", "5 per fortnight")
        return value


@dataclass(frozen=True)
class StorageUri:
    schemes: tuple[str, ...] = ("memory", "redis", "rediss", "redis+unix")

    @property
    def rule(self) -> str:
        return "a storage URI: memory:// or redis://host:port/db"

    def read(self, value: object) -> str:
        if not isinstance(value, str) or value.partition("://")[0] not in self.schemes or "://" not in value:
            raise ValueError
        return value


Kind = Integer | Choice | Text | TextList | DatabaseUrl | DatabaseUrlList | RateLimit | StorageUri


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    # None: not set (the app fills it: SECRET_KEY and DATABASE_URL have development defaults
    # made at start, see orders/app.py).
    default: Any
    meaning: str
    secret: bool = False

    def read(self, value: object) -> Any:
        try:
            return self.kind.read(value)
        except Exception as err:  # ValueError, TypeError, SQLAlchemy's ArgumentError/NoSuchModuleError
            raise SettingsError(
                f"{self.name}={_shown(value, self.secret)} is not valid: it must be {self.kind.rule}"
            ) from err


_TOKEN = Text(min_length=1, printable_ascii=True)
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "APP_ENV",
        Choice((DEVELOPMENT, PRODUCTION)),
        DEVELOPMENT,
        "production turns on every check below marked (production); any other value is refused",
    ),
    Setting(
        "DATABASE_URL",
        DatabaseUrl(),
        None,
        "the database (default: SQLite in instance/orders.db, created on first start)",
    ),
    Setting(
        "DATABASE_REPLICA_URLS",
        DatabaseUrlList(DatabaseUrl(("postgresql",))),
        (),
        "PostgreSQL streaming standbys that serve list reads (empty: every read on the primary)",
    ),
    Setting(
        "DATABASE_SHARD_URLS",
        DatabaseUrlList(DatabaseUrl(("postgresql",))),
        (),
        "PostgreSQL shard servers; DATABASE_URL is then the coordinator holding one postgres_fdw "
        "partition per shard (docs/shards.md); empty: one database; refused with SQLite or MariaDB",
    ),
    Setting(
        "SECRET_KEY",
        Text(),
        None,
        "seals cursors; (production) at least 32 random characters; development keeps one in instance/",
        secret=True,
    ),
    Setting(
        "SECRET_KEY_FALLBACKS",
        TextList(Text(min_length=1), "keys"),
        (),
        "older keys that still open cursors (never seal them): a rotation loses no reader's place",
        secret=True,
    ),
    Setting(
        "API_TOKENS",
        TextList(_TOKEN, "bearer tokens"),
        (),
        f"bearer tokens for POST/DELETE; empty: writes only from loopback (development); "
        f"(production) required, each at least {MIN_TOKEN_LENGTH} characters",
        secret=True,
    ),
    Setting(
        "TRUSTED_HOSTS",
        TextList(Text(min_length=1, printable_ascii=True), "host names"),
        None,
        "host names served (case-insensitive); default localhost, 127.0.0.1; (production) required",
    ),
    Setting(
        "TRUSTED_PROXIES",
        Integer(0, 5),
        0,
        "how many reverse proxies stand in front and append X-Forwarded-For (0: the header is ignored)",
    ),
    Setting("PAGE_SIZE", Integer(1, MAX_PAGE_SIZE), 20, "rows per page of the HTML list"),
    Setting(
        "AUTO_PAGES",
        Integer(0, 1_000_000),
        5,
        "pages loaded by scrolling before a 'Load more' button asks (so the footer can be reached)",
    ),
    Setting(
        "MAX_ROWS_IN_PAGE",
        Integer(0, 100_000, "; 0 keeps every row"),
        200,  # 600 laid the table out at twice the cost per page loaded (docs/scroll.md)
        "rows the browser keeps in the document while scrolling; farther ones are dropped and reloaded",
    ),
    Setting(
        "NEW_ORDERS_POLL_SECONDS",
        Integer(1, 3600),
        15,
        "how often the list asks whether newer orders arrived",
    ),
    Setting(
        "STATEMENT_TIMEOUT_MS",
        Integer(10, 600_000),
        5000,
        "the longest a web request's query may run (PostgreSQL, MariaDB); CLI commands are not bound by it",
    ),
    Setting(
        "DATABASE_CONNECT_TIMEOUT_S",
        Integer(2, 60, " (libpq counts whole seconds, 2 at least)"),
        5,
        "the longest a new database connection may take, a server that accepts and never answers included",
    ),
    Setting(
        "DATABASE_READ_TIMEOUT_MS",
        Integer(100, 3_600_000),
        15_000,
        "the longest a web request waits for any answer of a connected database (a frozen server, "
        "a partition): then 503; must exceed STATEMENT_TIMEOUT_MS",
    ),
    Setting(
        "DATABASE_POOL_TIMEOUT_S",
        Integer(1, 300),
        5,
        "the longest a web request waits for a free pooled connection (all busy): then 503",
    ),
    Setting(
        "HEALTHZ_TIMEOUT_MS",
        Integer(100, 60_000),
        2000,
        "the longest /healthz waits for each dependency (database, Redis) before calling it unhealthy",
    ),
    Setting(
        "REPLICA_MAX_LAG_MS",
        Integer(0, 3_600_000),
        1000,
        "how stale a first page read on a replica may be",
    ),
    Setting(
        "CREATED_AT_MAX_SKEW_SECONDS",
        Integer(0, 3600),
        5,
        "how far into the future a client may date an order (clock skew)",
    ),
    Setting(
        "IDEMPOTENCY_KEY_HOURS",
        Integer(1, 720),
        24,
        "how long a POST's Idempotency-Key answers a retry with the order it created (then forgotten)",
    ),
    Setting(
        "RATELIMIT_READS",
        RateLimit(),
        "1200 per minute",
        "reads per client address, shared by every read route",
    ),
    Setting(
        "RATELIMIT_WRITES",
        RateLimit(),
        "60 per minute",
        "writes per client address",
    ),
    Setting(
        "RATELIMIT_STORAGE_URI",
        StorageUri(),
        "memory://",
        "where rate-limit counters live; memory:// counts per process, redis:// shares them; "
        "(production) redis:// when WEB_CONCURRENCY > 1",
    ),
    Setting(
        "RATELIMIT_STORAGE_TIMEOUT_MS",
        Integer(10, 10_000),
        200,
        "the longest a request waits for Redis (connect or answer); then its limits count in "
        "memory until Redis answers again",
    ),
    Setting(
        "RATELIMIT_KEY_PREFIX",
        Text(min_length=1, printable_ascii=True),
        "orders",
        "the prefix of the counters' keys (apps sharing one Redis apart)",
    ),
    Setting("BIND", Text(min_length=1), "127.0.0.1:8000", "gunicorn's listen address"),
    Setting(
        "WEB_CONCURRENCY",
        Integer(1, 64),
        None,
        "gunicorn worker processes (default: 2 x cores + 1, at most 8)",
    ),
    Setting("WEB_THREADS", Integer(1, 256), 8, "threads per gunicorn worker"),
)
BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings given in the environment (empty values count as unset), each read and
    checked; SettingsError on the first bad one."""
    environ = os.environ if environ is None else environ
    return {s.name: s.read(environ[s.name]) for s in SETTINGS if environ.get(s.name, "").strip()}


def resolve(given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with `given` (environment or a test's mapping), every table setting
    read and checked; keys outside the table (Flask's own, TESTING) pass through untouched."""
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    for name, value in given.items():
        setting = BY_NAME.get(name)
        values[name] = value if setting is None or value is None else setting.read(value)
    check_together(values)
    return values


def default_workers(cpus: int) -> int:
    return min(2 * cpus + 1, 8)


def check_together(values: Mapping[str, Any]) -> None:
    """Rules between settings, and what production refuses (each raises one SettingsError line)."""
    rows, size = values["MAX_ROWS_IN_PAGE"], values["PAGE_SIZE"]
    if rows and rows < 3 * size:
        raise SettingsError(
            f"MAX_ROWS_IN_PAGE={rows} is not valid: it must be 0 or at least 3 x PAGE_SIZE ({3 * size}), "
            "or every swap would drop the rows just loaded"
        )
    shards, url = values.get("DATABASE_SHARD_URLS") or (), values.get("DATABASE_URL")
    if shards and not str(url or "sqlite (the default)").startswith("postgresql"):
        raise SettingsError(
            "DATABASE_SHARD_URLS is only for a PostgreSQL DATABASE_URL (the coordinator): SQLite and "
            "MariaDB have no foreign partitions; unset DATABASE_SHARD_URLS or use PostgreSQL"
        )
    statement, read = values["STATEMENT_TIMEOUT_MS"], values["DATABASE_READ_TIMEOUT_MS"]
    if read <= statement:
        raise SettingsError(
            f"DATABASE_READ_TIMEOUT_MS={read} is not valid: it must exceed STATEMENT_TIMEOUT_MS "
            f"({statement}), or a slow query would cut its connection instead of being cancelled"
        )
    if shards and values.get("DATABASE_REPLICA_URLS"):
        raise SettingsError(
            "DATABASE_REPLICA_URLS with DATABASE_SHARD_URLS is not supported: a coordinator's WAL "
            "position says nothing about the shards' (read replicas per shard: docs/shards.md)"
        )
    if values["APP_ENV"] != PRODUCTION:
        return
    from .secret_key import secret_key_problem  # production only: the key heuristics

    key = values.get("SECRET_KEY")
    if not key:
        raise SettingsError("APP_ENV=production needs SECRET_KEY (at least 32 random characters)")
    problem = secret_key_problem(key)
    if problem:
        raise SettingsError(problem)
    tokens = values["API_TOKENS"]
    if not tokens:
        raise SettingsError(
            "APP_ENV=production needs API_TOKENS (comma-separated bearer tokens for POST/DELETE); "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    short = [i for i, token in enumerate(tokens, 1) if len(token) < MIN_TOKEN_LENGTH]
    if short:
        raise SettingsError(
            f"API_TOKENS item {short[0]} is too short for production: each token must be at least "
            f"{MIN_TOKEN_LENGTH} characters"
        )
    if not values.get("TRUSTED_HOSTS"):
        raise SettingsError("APP_ENV=production needs TRUSTED_HOSTS (comma-separated host names served)")
    workers = values.get("WEB_CONCURRENCY") or default_workers(os.cpu_count() or 1)
    if workers > 1 and values["RATELIMIT_STORAGE_URI"].startswith("memory"):
        raise SettingsError(
            f"RATELIMIT_STORAGE_URI=memory:// with {workers} workers counts each limit once per "
            "process in production; set RATELIMIT_STORAGE_URI=redis://... (or WEB_CONCURRENCY=1)"
        )


def load_or_exit(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """For processes that start from the shell (gunicorn.conf.py): the checked settings, or the
    one-line error on stderr and exit status 2."""
    try:
        return resolve(from_environment(environ))
    except SettingsError as err:
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def markdown_table() -> str:
    """docs/configuration.md's table, made from SETTINGS (tests/test_settings.py compares)."""
    lines = ["| setting | default | rule | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        if s.default is None or s.default == ():
            default = "(none)" if s.default == () else "(see meaning)"
        else:
            default = f"`{s.default}`"
        lines.append(f"| `{s.name}` | {default} | {s.kind.rule} | {s.meaning} |")
    return "\n".join(lines) + "\n"


DOC = "docs/configuration.md"
BEGIN, END = "<!-- settings: begin (python -m orders.settings --write) -->", "<!-- settings: end -->"


def documented(text: str) -> str:
    """The table as it stands between the markers of `text` (docs/configuration.md)."""
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip() + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        from pathlib import Path

        path = Path(__file__).resolve().parent.parent / DOC
        text = path.read_text()
        head, tail = text.split(BEGIN, 1)[0], text.split(END, 1)[1]
        path.write_text(f"{head}{BEGIN}\n{markdown_table()}{END}{tail}")
    else:
        print(markdown_table(), end="")
