"""Async engine and session factory for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

LIBPQ_OPTIONS = frozenset({
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "sslpassword", "sslnegotiation",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "target_session_attrs", "krbsrvname", "gsslib",
    "passfile", "application_name", "options"})
"""libpq's URL options that asyncpg reads from a DSN itself (`application_name` and `options` go to the
server at connect, as libpq sends them). `connect_timeout` is read here (asyncpg's `timeout`)."""
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""libpq's `sslmode` values, which asyncpg takes too."""
DRIVER_OPTIONS = frozenset({"ssl", "prepared_statement_cache_size", "host", "port"})
"""Query options SQLAlchemy's asyncpg dialect takes as they are (`host` and `port` as libpq's, a socket folder
among them, or twice or more: several hosts)."""
IGNORED_OPTIONS = {"channel_binding": ("prefer", "disable")}
"""Options asyncpg has no counterpart of, harmless to drop with these values (libpq's default among them)."""


def unbracketed(host: str) -> str:
    """`host` without the brackets an IPv6 address is written in (`[::1]` is `::1`)."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def split_host(spelled: str) -> tuple[str, str]:
    """(host, port) of `db1:5432`, `[::1]:5432`, `db1`, `[::1]` or a bare `::1` (port "" when none): an IPv6
    address's own colons are not a port's."""
    if spelled.startswith("["):
        host, _, rest = spelled[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if spelled.count(":") > 1:
        return spelled, ""
    host, _, port = spelled.partition(":")
    return host, port


def host_and_port(host: str, port: str, *, default_port: str = "") -> str:
    """`host:port` (`port` or else `default_port`), an IPv6 address in brackets: `[::1]:5432`, not `::1:5432`."""
    port = port or default_port
    name = f"[{host}]" if ":" in host else host
    return f"{name}:{port}" if port else name


def several_hosts_as_options(url: str) -> str:
    """libpq's several hosts (`postgresql://gw@db1:5432,db2/gw`, a failover URL for target_session_attrs) as
    SQLAlchemy reads them, `?host=db1:5432&host=db2:5432`: its parser took `5432,db2` for a port. Each gets a
    port (5432 by default, as libpq's): the dialect takes several hosts only with theirs."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep or not scheme.startswith("postgres"):
        return url
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    user, at, hosts = rest[:end].rpartition("@") if "@" in rest[:end] else ("", "", rest[:end])
    if "," not in hosts or "@" in hosts:
        return url
    spelled = [host_and_port(*split_host(host), default_port="5432") for host in hosts.split(",")]
    path, mark, query = rest[end:].partition("?")
    options = "&".join(f"host={quote(host, safe='')}" for host in spelled)
    return f"{scheme}://{user}{at}{path or '/'}?{query}{'&' if mark and query else ''}{options}"


def host_list_as_options(url: str) -> str:
    """libpq's other spelling of several hosts, `?host=db1,db2&port=5432,5433` (one port for all, or one each),
    as `?host=db1:5432&host=db2:5433`: SQLAlchemy's dialect took `db1,db2` for one host, then refused it,
    "All ports are required to be present for asyncpg multiple host URL", at the first query."""
    base, mark, rest = url.partition("?")
    query, hash_mark, fragment = rest.partition("#")
    parts = [part for part in query.split("&") if part]
    hosts = [unquote(part[5:]) for part in parts if part.startswith("host=")]
    ports = [unquote(part[5:]) for part in parts if part.startswith("port=")]
    if len(hosts) != 1 or "," not in hosts[0] or hosts[0].startswith("/") or len(ports) > 1:
        return url
    names = hosts[0].split(",")
    numbers = ports[0].split(",") if ports else ["5432"]
    if len(numbers) not in (1, len(names)):
        return url  # libpq's own error; `postgres_connect_args` checks each port
    spelled = [host_and_port(unbracketed(name), numbers[0] if len(numbers) == 1 else numbers[i])
               for i, name in enumerate(names)]
    kept = [part for part in parts if not part.startswith(("host=", "port="))]
    options = kept + [f"host={quote(host, safe='')}" for host in spelled]
    return f"{base}{mark}{'&'.join(options)}{hash_mark}{fragment}"


def async_url(url: str) -> str:
    """Normalize a database URL to its async driver (aiosqlite or asyncpg); the rest stays as written (SQLAlchemy
    writes a URL back form-encoded, a space as +, and libpq's options would read a + that was written as one
    as a space: `postgres_connect_args`)."""
    url = host_list_as_options(several_hosts_as_options(url))
    driver = make_url(url).drivername
    if driver in ("sqlite", "sqlite+pysqlite"):
        driver = "sqlite+aiosqlite"
    elif driver in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+psycopg"):
        driver = "postgresql+asyncpg"
    return f"{driver}://{url.strip().partition('://')[2]}"


def postgres_connect_args(url: str) -> tuple[str, dict[str, Any]]:
    """(URL for SQLAlchemy, its `connect_args`) of a PostgreSQL URL: libpq's options as asyncpg takes them.

    Managed databases give URLs with libpq's options (`?sslmode=require&connect_timeout=10`), and each
    reached asyncpg.connect() as a keyword it does not take: "connect() got an unexpected keyword argument
    'sslmode'" at the first query. Several hosts (`?host=db1:5432&host=[::1]:5432`, as `async_url` spells
    them) are asyncpg's lists of hosts and ports: the dialect split each at every colon, an IPv6 address's
    too. Raises ValueError naming an option asyncpg cannot honour (checked when the configuration loads)."""
    parsed = make_url(async_url(url))
    query = dict(parsed.query)
    for key, value in query.items():
        if isinstance(value, tuple) and key not in ("host", "port"):
            raise ValueError(f"option `{key}` is given more than once")
    unknown = sorted(set(query) - LIBPQ_OPTIONS - DRIVER_OPTIONS - set(IGNORED_OPTIONS) - {"connect_timeout"})
    if unknown:
        raise ValueError(f"option `{unknown[0]}` is not supported (asyncpg has no such setting): remove it from the "
                         f"URL (supported: connect_timeout, {', '.join(sorted(LIBPQ_OPTIONS | DRIVER_OPTIONS))})")
    for key, allowed in IGNORED_OPTIONS.items():
        if key in query and query[key] not in allowed:
            raise ValueError(f"option `{key}={query[key]}` cannot be honoured (asyncpg does not support it): "
                             f"remove it, or use {' or '.join(allowed)}")
    sslmode = query.get("sslmode", query.get("ssl"))
    if sslmode is not None and sslmode not in SSL_MODES:  # asyncpg would refuse it only at the first connection
        raise ValueError(f"option `sslmode` must be one of {', '.join(SSL_MODES)}, not {sslmode!r}")
    connect_args: dict[str, Any] = {}
    if "connect_timeout" in query:
        seconds = str(query["connect_timeout"])
        if not seconds.isdigit() or int(seconds) <= 0:
            raise ValueError(f"option `connect_timeout` must be a whole number of seconds above 0, not {seconds!r}")
        connect_args["timeout"] = int(seconds)
    ports = query.get("port", ())
    for port in ",".join(ports if isinstance(ports, tuple) else [ports]).split(","):
        if port and not port.isdigit():
            raise ValueError(f"option `port` must be a port number (or several, comma-separated), not {port!r}")
    if not str(query.get("prepared_statement_cache_size", "0")).isdigit():
        raise ValueError("option `prepared_statement_cache_size` must be a whole number (0: no cache), not "
                         f"{query['prepared_statement_cache_size']!r}")
    hosts = query.get("host")
    if isinstance(hosts, str) and ":" in hosts and not hosts.startswith("/"):
        hosts = (hosts,)  # libpq's bare IPv6 address (`?host=::1`): asyncpg's DSN split it at a colon
    if isinstance(hosts, tuple):  # several (`async_url`): asyncpg's lists, as the dialect would split them but for IPv6
        split = [split_host(host) for host in hosts]
        for _, port in split:
            if port and not port.isdigit():
                raise ValueError(f"option `host` must give a port number after a host's colon, not {port!r}")
        given = query.get("port")  # one `port=` for every host without its own, as libpq reads it
        default = int(given) if isinstance(given, str) and given.isdigit() else 5432
        connect_args["host"] = [host for host, _ in split]
        connect_args["port"] = [int(port) if port else default for _, port in split]
        parsed = parsed.difference_update_query(["host", "port"])
    # As libpq reads them: SQLAlchemy's parser, a form's, made each + a space (a passphrase's, an option's).
    written = {unquote(key): unquote(value) for key, _, value in
               (part.partition("=") for part in url.partition("?")[2].partition("#")[0].split("&") if part)}
    libpq = {key: written.get(key, value) for key, value in query.items() if key in LIBPQ_OPTIONS}
    if libpq:
        connect_args["dsn"] = "postgresql://?" + urlencode(libpq, quote_via=quote)
    parsed = parsed.difference_update_query([key for key in query if key not in DRIVER_OPTIONS])
    return parsed.render_as_string(hide_password=False), connect_args


def asyncpg_dsn(url: str) -> tuple[str, dict[str, Any]]:
    """(dsn, keywords) for `asyncpg.connect` of a PostgreSQL URL: libpq's spelling in the DSN (`sslmode`
    for the `ssl` that SQLAlchemy's asyncpg dialect takes), `connect_timeout` as asyncpg's `timeout`, and
    SQLAlchemy's `prepared_statement_cache_size` as asyncpg's `statement_cache_size`: a DSN's option asyncpg
    does not know is sent to the server as a setting, which refused the connection."""
    stripped, connect_args = postgres_connect_args(url)
    parsed = make_url(stripped).set(drivername="postgresql")
    query = dict(parse_qsl(connect_args.pop("dsn", "?").partition("?")[2]))
    if "ssl" in parsed.query:
        query.setdefault("sslmode", parsed.query["ssl"])
        parsed = parsed.difference_update_query(["ssl"])
    if "prepared_statement_cache_size" in parsed.query:
        connect_args["statement_cache_size"] = int(parsed.query["prepared_statement_cache_size"])
        parsed = parsed.difference_update_query(["prepared_statement_cache_size"])
    return parsed.update_query_dict(query).render_as_string(hide_password=False), connect_args


def is_sqlite(url: str) -> bool:
    """True for any SQLite URL."""
    # Read after libpq's several hosts are rewritten: SQLAlchemy's parser takes `db1:5432,db2` for a port.
    return make_url(several_hosts_as_options(url)).get_backend_name() == "sqlite"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database, or an in-memory or `file:` URI one)."""
    database = make_url(url).database if is_sqlite(url) else None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def create_engine(url: str, *, echo: bool = False) -> AsyncEngine:
    """Build the async engine; on SQLite, make the folder and turn on WAL and a busy timeout.

    A failing statement's error names the statement but not its parameters (`hide_parameters`): they are
    customers' words and phone numbers, and the error's text reaches the log, a span and a run's errors."""
    url = async_url(url)
    if is_sqlite(url):
        database = sqlite_file(url)
        engine = create_async_engine(url, echo=echo, hide_parameters=True, connect_args={"timeout": 30})

        first_connection = [True]

        @event.listens_for(engine.sync_engine, "do_connect")
        def _owner_only_file(*_args) -> None:
            # At the engine's first connection, not here: a command run from the wrong folder (whose
            # schema check then fails) must not leave an empty database behind. Only the first: a file
            # that goes away later (its volume unmounted) is an unavailable database, not a new one.
            # It holds every transcript: a new file is readable by its owner only, whatever the umask.
            if not first_connection[0]:
                return
            first_connection[0] = False
            if database is not None and not database.exists():
                database.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # pragma: no cover - trivial
            cursor = dbapi_connection.cursor()
            # WAL lets the CLI ingest while the server reads; the timeout waits out short locks.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine.sync_engine, "before_cursor_execute")
        def _sqlite_row_lock(_conn, cursor, _statement, _parameters, context, _executemany) -> None:
            # SQLite drops FOR UPDATE, and its driver opens a transaction only at the first write, so two
            # read-check-write transactions (add an operator note, finish a message) would interleave and
            # one would overwrite the other. Taking the database's write lock where PostgreSQL would lock the
            # row serializes them as the row lock does there: the second waits (busy_timeout), then reads
            # what the first committed.
            compiled = getattr(context, "compiled", None)
            if getattr(getattr(compiled, "statement", None), "_for_update_arg", None) is None:
                return
            # (aiosqlite's connection, under SQLAlchemy's adapter: it says whether sqlite3 opened one.)
            if not cursor._connection.in_transaction:  # after a write in this transaction, the lock is held
                cursor.execute("BEGIN IMMEDIATE")

        return engine
    url, connect_args = postgres_connect_args(url)
    return create_async_engine(url, echo=echo, hide_parameters=True, pool_pre_ping=True, pool_size=10,
                               max_overflow=10, connect_args=connect_args)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded attributes after commit (we pass rows around after commits)."""
    return async_sessionmaker(engine, expire_on_commit=False)
