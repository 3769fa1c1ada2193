"""Every setting the app and its tools read, in one table (SETTINGS): name, kind, default, rule
and meaning, read from the environment once and checked when the app is created and when any
CLI command or gunicorn starts.

A bad value stops the process with one line that names the setting, the value and the rule
(`SettingsError`). docs/configuration.md is generated from this table (`python -m
orders.core.settings`), and tests/test_settings.py checks the two agree, as the error table does.

Why a table of our own and not pydantic-settings: about twenty flat values, each needing a rule
written for an operator ("an integer from 1 to 100", "a rate like '60 per minute'"), not a
validation error tree; the table is the documentation as well (as Datasette's SETTINGS is), and
it adds no dependency. Cross-setting rules (production's) live in `check_together`.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_PAGE_SIZE = 100  # one home: the JSON API's `limit` has the same ceiling (orders/finding/request.py)
DEFAULT_PAGE_SIZE = 20  # PAGE_SIZE's default: rows per page of every list read that gives no limit
DEVELOPMENT = "development"
PRODUCTION = "production"
MIN_TOKEN_LENGTH = 16
# The largest request body taken, in bytes (an order is a few hundred): the app's
# MAX_CONTENT_LENGTH, the front's 413 (deploy/haproxy.cfg, generated) and the docs all say this.
MAX_BODY_BYTES = 16 * 1024
# What gunicorn reads in SENDFILE: y, 1, yes, true (any case) are yes, anything else no.
SENDFILE_YES = ("y", "1", "yes", "true")
SENDFILE_VALUES = (*SENDFILE_YES, "n", "0", "no", "false")


class SettingsError(ValueError):
    """A setting the operator got wrong: one line naming the setting, the value and the rule."""


# A URL's password (`postgresql+psycopg://app:S3cret@host/db`, `redis://:pass@host`) and a
# credential in a query (`?password=...`, `&token=...`): what masked() replaces.
_URL_PASSWORD = re.compile(r"(://[^/@\s]*?:)[^@\s]*@")
_QUERY_SECRET = re.compile(
    r"([?&;](?:password|passwd|pass|pwd|token|secret|key)[^=&]*=)[^&\s]*", re.IGNORECASE
)


def masked(text: str) -> str:
    """`text` with every credential it carries replaced by ***: the one function every line that
    echoes a setting's value goes through (a refusal printed the database password to the log)."""
    return _QUERY_SECRET.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", text))


def _shown(value: object, secret: bool) -> str:
    if secret:
        return "(hidden)"
    text = masked(value if isinstance(value, str) else repr(value))
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
    # At least one item: " , " is then refused, not read as an empty list (which, for
    # TRUSTED_HOSTS, would turn the Host check off).
    required: bool = False

    @property
    def rule(self) -> str:
        least = "at least one; " if self.required else ""
        return f"comma-separated {self.what} ({least}each {self.item.rule})"

    def read(self, value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            items: Sequence[object] = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, list | tuple):
            items = value
        else:
            raise ValueError
        if self.required and not items:
            raise ValueError
        return tuple(self.item.read(item) for item in items)


def _port_ok(port: int | None) -> bool:
    return port is None or 1 <= port <= 65535


@dataclass(frozen=True)
class DatabaseUrl:
    """A SQLAlchemy URL whose dialect and driver are installed (checked by loading them)."""

    backends: tuple[str, ...] = ("sqlite", "postgresql", "mysql", "mariadb")

    @property
    def rule(self) -> str:
        return (
            "a SQLAlchemy database URL for "
            + ", ".join(self.backends)
            + " with an installed synchronous driver and a port from 1 to 65535"
            + " (e.g. postgresql+psycopg://user@host/db)"
        )

    def read(self, value: object) -> str:
        from sqlalchemy.engine import make_url

        if not isinstance(value, str):
            raise ValueError
        url = make_url(value)  # ArgumentError (caught by Setting.read) on garbage
        if url.get_backend_name() not in self.backends or not _port_ok(url.port):  # .port: ValueError
            raise ValueError
        dialect = url.get_dialect()  # NoSuchModuleError when the dialect is unknown
        # The app is synchronous: an asyncio driver (postgresql+asyncpg) cannot serve it.
        if getattr(dialect, "is_async", False):
            raise ValueError
        # Loading the driver itself (psycopg, pymysql): get_dialect alone does not import it, so
        # a missing one passed the check and failed every request with a traceback.
        dialect.import_dbapi()
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
        return (
            "a rate limit like '60 per minute' or '10/second;1000/hour' (second, minute, hour, "
            "day; at least 1)"
        )

    def read(self, value: object) -> str:
        from limits import parse_many

        if not isinstance(value, str) or not value.strip():
            raise ValueError
        # ValueError on anything it cannot read ("lots", "5 per fortnight"); "0 per minute"
        # reads, and would answer every request 429: refused too.
        if any(item.amount < 1 for item in parse_many(value)):
            raise ValueError
        return value


@dataclass(frozen=True)
class StorageUri:
    schemes: tuple[str, ...] = ("memory", "redis", "rediss", "redis+unix")

    @property
    def rule(self) -> str:
        return "a storage URI: memory:// or redis://host:port/db (a port from 1 to 65535)"

    def read(self, value: object) -> str:
        from urllib.parse import urlsplit

        if not isinstance(value, str) or value.partition("://")[0] not in self.schemes or "://" not in value:
            raise ValueError
        if not _port_ok(urlsplit(value).port):  # .port: ValueError on "redis://host:notaport"
            raise ValueError
        return value


@dataclass(frozen=True)
class ListenAddress:
    """What gunicorn binds: HOST:PORT (a port from 1 to 65535), [IPv6]:PORT, unix:PATH or fd://N.
    Checked here: gunicorn itself answered a bad one with a 30-line traceback."""

    @property
    def rule(self) -> str:
        return "HOST:PORT with a port from 1 to 65535 ([::1]:PORT for IPv6), unix:PATH or fd://N"

    def read(self, value: object) -> str:
        if not isinstance(value, str) or not value.isprintable() or " " in value:
            raise ValueError
        if value.startswith("unix:") and len(value) > len("unix:"):
            return value
        if value.startswith("fd://") and value[5:].isdigit():
            return value
        host, colon, port = value.rpartition(":")
        if host.startswith("["):
            if not host.endswith("]") or len(host) < 3:
                raise ValueError
        elif not host or ":" in host:
            raise ValueError
        if not colon or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
            raise ValueError
        return value


@dataclass(frozen=True)
class NetworkList:
    """gunicorn's FORWARDED_ALLOW_IPS, read by its rule (ipaddress.ip_network, strict) or *."""

    @property
    def rule(self) -> str:
        return "comma-separated IP addresses or networks (10.0.0.0/8: no host bits set), or *"

    def read(self, value: object) -> tuple[str, ...]:
        import ipaddress

        items = TextList(Text(min_length=1, printable_ascii=True)).read(value)
        for item in items:
            if item != "*":
                ipaddress.ip_network(item)
        return items


Kind = (
    ListenAddress
    | NetworkList
    | Integer
    | Choice
    | Text
    | TextList
    | DatabaseUrl
    | DatabaseUrlList
    | RateLimit
    | StorageUri
)


@dataclass(frozen=True)
class Setting:
    name: str
    kind: Kind
    # None: not set (the app fills it: SECRET_KEY and DATABASE_URL have development defaults
    # made at start, see orders/app.py).
    default: Any
    meaning: str
    secret: bool = False
    # For the README's short table of the settings most deployments set (README.md, generated):
    # the meaning in a few words, and the default in words where it is made at start.
    readme: str = ""
    readme_default: str = ""

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
        readme="`production` turns on the production checks; anything else is refused",
    ),
    Setting(
        "DATABASE_URL",
        DatabaseUrl(),
        None,
        "the database (default: SQLite in instance/orders.data.db, created on first start)",
        readme="SQLAlchemy URL of the database (the primary)",
        readme_default="SQLite in `instance/`",
    ),
    Setting(
        "DATABASE_REPLICA_URLS",
        DatabaseUrlList(DatabaseUrl(("postgresql",))),
        (),
        "PostgreSQL streaming standbys that serve list reads (empty: every read on the primary)",
        readme="PostgreSQL standbys for the list reads",
    ),
    Setting(
        "DATABASE_SHARD_URLS",
        DatabaseUrlList(DatabaseUrl(("postgresql",))),
        (),
        "PostgreSQL shard servers; DATABASE_URL is then the coordinator holding one postgres_fdw "
        "partition per shard (docs/shards.md); empty: one database; refused with SQLite or MariaDB",
        readme="PostgreSQL shard servers behind a coordinator",
    ),
    Setting(
        "SECRET_KEY",
        Text(),
        None,
        "seals cursors; (production) at least 32 random characters; development keeps one in instance/",
        secret=True,
        readme="seals cursors; production: 32+ random characters",
        readme_default="random, kept in `instance/`",
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
        readme="bearer tokens for POST/DELETE; unset: writes from loopback only",
    ),
    Setting(
        "TRUSTED_HOSTS",
        TextList(Text(min_length=1, printable_ascii=True), "host names", required=True),
        ("localhost", "127.0.0.1"),
        "host names served (case-insensitive); (production) required: the default is for development",
        readme="host names served",
    ),
    Setting(
        "TRUSTED_PROXIES",
        Integer(0, 5),
        0,
        "how many reverse proxies stand in front and append X-Forwarded-For (0: the header is ignored)",
    ),
    Setting(
        "PAGE_SIZE",
        Integer(1, MAX_PAGE_SIZE),
        DEFAULT_PAGE_SIZE,
        "rows per page of the list (the HTML page and the JSON API) when a request gives no limit",
    ),
    Setting(
        "AUTO_PAGES",
        Integer(0, 1_000_000),
        # The footer is one action away at any depth (Site links in the find bar, docs/scroll.md),
        # so the wheel and the finger are never stopped by a button: it asks only if set lower.
        1_000_000,
        "pages loaded by scrolling before a 'Load more' button asks (the footer is also reachable "
        "by Site links in the find bar at any depth)",
    ),
    Setting(
        "MAX_ROWS_IN_PAGE",
        Integer(0, 100_000, "; 0 keeps every row"),
        200,  # ten screens, more than the drop margin needs: each page's layout grows with the rows kept
        "rows the browser keeps in the document while scrolling; farther ones are dropped and reloaded",
    ),
    Setting(
        "NEW_ORDERS_POLL_SECONDS",
        Integer(1, 3600),
        15,
        "how often the list asks whether newer orders arrived (also while a live stream is open: "
        "the fallback when a stream is refused, cut or never opened)",
    ),
    Setting(
        "STREAMS_PER_PROCESS",
        Integer(0, 100_000, "; 0: no live streams, every list polls"),
        500,
        "live streams of new orders (/orders/stream) one process holds open; one more is refused "
        "with 503 and Retry-After and that list polls (docs/scroll.md, New orders, pushed)",
    ),
    Setting(
        "STREAM_SECONDS",
        Integer(10, 86_400),
        300,
        "the longest one live stream stays open; the browser then opens another",
    ),
    Setting(
        "STREAM_HEARTBEAT_SECONDS",
        Integer(1, 55, " (under the front's 60 s client timeout)"),
        2,
        "a live stream with nothing to say sends a comment this often, so no proxy closes it as "
        "idle and a client gone is noticed: behind the front within two of them (haproxy reads "
        "nothing from a client while its answer streams, so only a failed write tells it the "
        "client left; 15 s held a gone client's place for 30 s)",
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
        readme="the longest wait for any answer from a connected database",
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
        "(production) redis:// when gunicorn runs more than one worker (WEB_CONCURRENCY, --workers)",
        readme="`redis://...` to share rate-limit counters between processes",
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
    Setting("BIND", ListenAddress(), "127.0.0.1:8000", "gunicorn's listen address"),
    Setting(
        "PORT",
        Integer(1, 65535),
        None,
        "the port of `make run` (default 5000); gunicorn alone listened on 0.0.0.0:PORT, but BIND "
        "decides here: serve.py refuses PORT without BIND",
    ),
    Setting(
        "WEB_CONCURRENCY",
        Integer(1, 64),
        None,
        "gunicorn worker processes (default: 2 x cores + 1, at most 8)",
    ),
    Setting("WEB_THREADS", Integer(1, 256), 8, "threads per gunicorn worker"),
    Setting(
        "FORWARDED_ALLOW_IPS",
        NetworkList(),
        ("127.0.0.1", "::1"),
        "gunicorn's: the front addresses whose X-Forwarded-Proto it believes (the scheme of URLs "
        "the app makes); the client's address is TRUSTED_PROXIES'",
    ),
    Setting(
        "SENDFILE",
        Choice(SENDFILE_VALUES),
        None,
        "gunicorn's: whether it sends static files with sendfile() (default: yes); gunicorn read "
        "any other value as no",
    ),
    Setting(
        "METRICS",
        Choice(("on", "off")),
        "on",
        "Prometheus metrics at /metrics on each app server (the public front hides it); off: none "
        "kept (orders/web/metrics.py)",
    ),
    Setting(
        "METRICS_DIR",
        Text(min_length=1),
        None,
        "where gunicorn's workers keep their metrics for /metrics to add up (emptied at start); "
        "default: a fresh temporary directory per start",
    ),
    Setting(
        "LOG_FORMAT",
        Choice(("json", "text")),
        "json",
        "gunicorn's error log and the app's lines: JSON lines with the request id, or gunicorn's text",
    ),
)
BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}


# Names that start like the app's settings: an unknown variable starting so is a mistake (a
# misspelling such as TRUSTED_PROXY, or a setting that does not exist), never someone else's.
PREFIXES = (
    "APP_", "DATABASE_", "SECRET_KEY", "API_TOKEN", "TRUSTED_", "RATELIMIT_", "IDEMPOTENCY_", "METRICS_",
)  # fmt: skip
# Beside the prefixes: a name this close to a known one of n letters (difflib's ratio at least
# 1 - 2/n, and 0.75) is a misspelling. One letter left out, doubled, swapped or changed stays
# above it; another program's BASE_URL (0.8 from DATABASE_URL) falls below.
CLOSE = 0.75


def nearest(name: str) -> str | None:
    """The known setting whose name is closest to `name` (difflib), or None when none is close."""
    found = difflib.get_close_matches(name, BY_NAME, n=1, cutoff=0.5)
    return found[0] if found else None


def unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """What is wrong with each variable that looks like a setting but is none, one line each.
    Names are compared without case: `trusted_proxy` is as much a slip as `TRUSTED_PROXY`."""
    problems = []
    for name in sorted(environ):
        upper = name.upper()
        if upper in BY_NAME:
            continue
        close = nearest(upper)
        cutoff = max(CLOSE, 1 - 2 / len(close)) if close else 1.0
        near = close is not None and difflib.SequenceMatcher(None, upper, close).ratio() >= cutoff
        if upper.startswith(PREFIXES) or near:
            hint = f"; did you mean {close}?" if close else ""
            problems.append(f"{name} is not a setting (docs/configuration.md lists them){hint}")
    return problems


def _given(environ: Mapping[str, str], name: str) -> str:
    """The value of setting `name` whatever the case of the variable's name (`trusted_proxies=1`
    was ignored, and production started with TRUSTED_PROXIES=0); two spellings that disagree
    are refused by name."""
    spellings = {key: value for key, value in environ.items() if key.upper() == name and value.strip()}
    if len(set(spellings.values())) > 1:
        raise SettingsError(
            f"{name} is given as {' and '.join(sorted(spellings))} with different values; set it once"
        )
    return next(iter(spellings.values()), "")


# What development has warned about in this process. serve.py reads the environment twice and
# gunicorn.conf.py once in gunicorn's master, and each worker (forked after) once more: said once.
_WARNED: set[str] = set()


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings given in the environment (empty values count as unset), each read and
    checked; SettingsError on the first bad one. A variable that looks like a setting but is
    none (a misspelling, an unknown name with the settings' prefixes) is refused in production
    and warned about in development, one line on stderr: a misspelled TRUSTED_PROXIES would
    otherwise be ignored, and every client behind the front share one rate-limit budget."""
    environ = os.environ if environ is None else environ
    values = {s.name: s.read(given) for s in SETTINGS if (given := _given(environ, s.name)).strip()}
    problems = unknown_settings(environ)
    if problems and values.get("APP_ENV") == PRODUCTION:
        raise SettingsError(f"{problems[0]} (APP_ENV=production refuses it; unset or rename it)")
    for problem in problems:
        if problem not in _WARNED:
            _WARNED.add(problem)
            # Printed, not warnings.warn: that added the caller's source line under it (two
            # lines for one slip), and -W error made it a traceback.
            print(f"Warning: {problem} (production refuses it)", file=sys.stderr)
    return values


def resolve(given: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults overlaid with `given` (environment or a test's mapping), every table setting
    read and checked; keys outside the table (Flask's own, TESTING) pass through untouched."""
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    for name, value in given.items():
        setting = BY_NAME.get(name)
        if setting is None:
            values[name] = value
        elif value is not None:  # None: the default (the table's, or one made at start)
            values[name] = setting.read(value)
    check_together(values)
    if values["APP_ENV"] == PRODUCTION and not given.get("TRUSTED_HOSTS"):
        # The default names the loopback only: production says which names it serves.
        raise SettingsError("APP_ENV=production needs TRUSTED_HOSTS (comma-separated host names served)")
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
    from orders.core.secret_key import secret_key_problem  # production only: the key heuristics

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
    check_workers(values, values.get("WEB_CONCURRENCY") or default_workers(os.cpu_count() or 1))


def check_workers(values: Mapping[str, Any], workers: int) -> None:
    """Production refuses per-process rate-limit counters (memory://) with more than one worker:
    each would count every limit alone. Asked with WEB_CONCURRENCY (what gunicorn.conf.py runs)
    by check_together, and by serve.py with the number gunicorn will run once it has read its
    config, GUNICORN_CMD_ARGS and its options (`WEB_CONCURRENCY=1 ... --workers 3` ran three)."""
    if values["APP_ENV"] != PRODUCTION or workers <= 1:
        return
    if values["RATELIMIT_STORAGE_URI"].startswith("memory"):
        raise SettingsError(
            f"RATELIMIT_STORAGE_URI=memory:// with {workers} workers counts each limit once per "
            "process in production; set RATELIMIT_STORAGE_URI=redis://... (or run one worker: "
            "WEB_CONCURRENCY=1 and no other --workers)"
        )


def load_or_exit(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """For processes that start from the shell (gunicorn.conf.py): the checked settings, or the
    one-line error on stderr and exit status 2."""
    try:
        return resolve(from_environment(environ))
    except SettingsError as err:
        print(f"Error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
