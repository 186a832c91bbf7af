"""A PostgreSQL URL as hosting providers hand it out connects as it is written, and one whose database is
not created yet says so."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy import text

from storage.engine import asyncpg_dsn, create_engine


async def asked_on_the_engine_and_the_bridge(url: str, sql: str) -> tuple:
    """`sql`'s value on a connection of the engine and on one the LISTEN/NOTIFY bridge opens, both from `url`."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            on_engine = (await conn.execute(text(sql))).scalar_one()
    finally:
        await engine.dispose()
    dsn, keywords = asyncpg_dsn(url)
    connection = await asyncpg.connect(dsn, **keywords)
    try:
        return on_engine, await connection.fetchval(sql)
    finally:
        await connection.close()


async def test_a_url_with_libpq_sslmode_connects_through_the_engine_and_the_bridge(postgres_url):
    # `?sslmode=…` (libpq's, as managed databases give their URLs) reached asyncpg.connect() as a keyword
    # it does not take: "cannot reach the database …: connect() got an unexpected keyword argument 'sslmode'".
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://") + "?sslmode=disable"
    # The LISTEN/NOTIFY bridge connects with a DSN, where `ssl` would be sent as a server setting.
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT 1") == (1, 1)


def test_db_upgrade_against_a_database_not_created_yet_says_to_create_it(tmp_path, postgres_url):
    # The first switch to PostgreSQL: the line ended in SQLAlchemy's class name and a link to its docs.
    from tests.conftest import write_config
    from tests.test_cli import _run

    url = postgres_url.rsplit("/", 1)[0].replace("+asyncpg", "") + "/gw_never_created"
    proc = _run("db", "upgrade", "--config", str(write_config(tmp_path, database_url=url)))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f'error: cannot reach the database {url}: database "gw_never_created" does not '
                                   "exist on that server: create it first (createdb gw_never_created)"), proc.stderr


async def test_a_database_nothing_listens_for_says_to_check_that_postgresql_runs_there(tmp_path):
    # The line ended in asyncpg's "[Errno 111] Connect call failed ('127.0.0.1', 5439)", and no word of a
    # server not running or a wrong port.
    from gateway.errors import GatewayError
    from gateway.preflight import schema_revision
    from gateway.settings import load_settings
    from tests.conftest import write_config
    from tests.scale.replicas import free_port

    url = f"postgresql://127.0.0.1:{free_port()}/gw"
    with pytest.raises(GatewayError) as info:
        await schema_revision(load_settings(write_config(tmp_path, database_url=url)))
    assert str(info.value).startswith(f"cannot reach the database {url}: ")
    assert str(info.value).endswith(": connection refused; is PostgreSQL running on 127.0.0.1, and on that port?")


async def test_libpq_options_of_a_providers_url_take_effect_on_the_engine_and_the_bridge(postgres_url):
    # `connect_timeout`, `application_name`, `options` (as cloud consoles add them) each failed every
    # connection: "connect() got an unexpected keyword argument 'connect_timeout'".
    url = (postgres_url.replace("postgresql+asyncpg://", "postgresql://") + "?sslmode=disable&connect_timeout=5"
           "&application_name=gw-storage&options=-c%20statement_timeout%3D4321&target_session_attrs=any")
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            settings = (await conn.execute(text("SELECT current_setting('application_name'), "
                                                "current_setting('statement_timeout')"))).one()
    finally:
        await engine.dispose()
    assert tuple(settings) == ("gw-storage", "4321ms")
    dsn, keywords = asyncpg_dsn(url)
    assert keywords == {"timeout": 5}
    connection = await asyncpg.connect(dsn, **keywords)
    try:
        assert await connection.fetchval("SELECT current_setting('application_name')") == "gw-storage"
    finally:
        await connection.close()


async def test_connect_timeout_bounds_the_wait_for_a_server_that_never_answers():
    # asyncpg's own default is 60 s: a URL's `connect_timeout=1` must be what a silent server costs.
    import asyncio
    import time

    held: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda _reader, writer: held.append(writer), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    engine = create_engine(f"postgresql://gw@127.0.0.1:{port}/gw?connect_timeout=1")
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            async with engine.connect():
                pass
    finally:
        await engine.dispose()
        server.close()
        for writer in held:
            writer.close()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("option, words", [
    ("keepalives=1", "option `keepalives` is not supported"),
    ("pgbouncer=true", "option `pgbouncer` is not supported"),
    ("channel_binding=require", "option `channel_binding=require` cannot be honoured"),
    ("connect_timeout=soon", "option `connect_timeout` must be a whole number of seconds above 0, not 'soon'"),
    ("prepared_statement_cache_size=none", "option `prepared_statement_cache_size` must be a whole number"),
    ("host=/var/run/postgresql&port=pg", "option `port` must be a port number (or several, comma-separated), not 'pg'"),
])
def test_a_url_option_asyncpg_cannot_honour_is_a_config_error_naming_it(tmp_path, monkeypatch, option, words):
    from gateway.errors import ConfigError
    from gateway.settings import load_settings
    from tests.conftest import write_config

    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = write_config(tmp_path, database_url=f"postgresql://u@db.example/gw?sslmode=require&{option}")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert info.value.key == "database_url" and words in str(info.value)


def test_a_misspelt_sslmode_is_a_config_error_not_a_failure_at_the_first_connection(tmp_path, monkeypatch):
    # `sslmode=requried` loaded, and the server started, then failed at its first query.
    from gateway.errors import ConfigError
    from gateway.settings import load_settings
    from tests.conftest import write_config

    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = write_config(tmp_path, database_url="postgresql://u@db.example/gw?sslmode=requried")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert info.value.key == "database_url" and "option `sslmode` must be one of disable, allow, prefer, require, " \
        "verify-ca, verify-full, not 'requried'" in str(info.value)


def test_options_asyncpg_has_or_can_drop_load():
    from storage.engine import postgres_connect_args

    url, connect_args = postgres_connect_args("postgres://u:p@db/gw?sslmode=require&channel_binding=prefer"
                                              "&sslrootcert=/etc/ca.pem&prepared_statement_cache_size=0")
    assert url == "postgresql+asyncpg://u:p@db/gw?prepared_statement_cache_size=0"
    assert connect_args == {"dsn": "postgresql://?sslmode=require&sslrootcert=%2Fetc%2Fca.pem"}


def test_a_printed_database_url_hides_the_client_keys_password_too():
    # `db upgrade` prints the URL it migrated, and a connection error names it: `sslpassword` went out as written.
    from gateway.preflight import redacted_db_url

    shown = redacted_db_url("postgresql://gw:s3cret@db/gw?sslmode=verify-full&sslkey=/k.pem&sslpassword=k3y-pass")
    assert "s3cret" not in shown and "k3y-pass" not in shown
    # As every log line and error line masks a URL's password (not SQLAlchemy's `***`, which `db upgrade` printed).
    assert shown == "postgresql://gw:[REDACTED]@db/gw?sslkey=%2Fk.pem&sslmode=verify-full&sslpassword=[REDACTED]"


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:r3dis-pw@cache:6379/0", "redis://:[REDACTED]@cache:6379/0"),
    ("rediss://default:r3dis-pw@cache:6380/1", "rediss://default:[REDACTED]@cache:6380/1"),
    ("redis://cache:6379/0?password=r3dis-pw", "redis://cache:6379/0?password=[REDACTED]"),
    ("https://qdrant.example:6333?api_key=qd-k3y", "https://qdrant.example:6333?api_key=[REDACTED]"),
    ("redis://cache:6379/0", "redis://cache:6379/0"),
])
def test_a_redis_or_qdrant_url_is_shown_with_the_same_mask(url, shown):
    from gateway.observability.logs import redact
    from gateway.url_secrets import REDACTED, redacted_url

    assert redacted_url(url) == shown
    assert redact(redacted_url(url)) == shown  # the log's redaction leaves the mask as it is
    assert REDACTED == "[REDACTED]"


async def test_a_url_for_a_connection_pooler_connects_the_bridge_too(postgres_url):
    # `prepared_statement_cache_size=0` (SQLAlchemy's setting for PgBouncer) reached the LISTEN/NOTIFY
    # bridge's DSN, where asyncpg sends an option it does not know to the server as a setting: 'unrecognized
    # configuration parameter "prepared_statement_cache_size"', the bridge reconnecting every 5 s for ever.
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://") + "?prepared_statement_cache_size=0"
    assert asyncpg_dsn(url)[1] == {"statement_cache_size": 0}
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT 1") == (1, 1)


async def test_a_socket_folder_and_port_given_as_libpq_options_connect(postgres_url):
    # libpq's form for a local server (`postgresql:///gw?host=/var/run/postgresql&port=5433`) was refused:
    # "option `port` is not supported (asyncpg has no such setting)", when SQLAlchemy and asyncpg both take it.
    import os

    from sqlalchemy.engine import make_url

    parsed = make_url(postgres_url)
    folder = "/var/run/postgresql"
    if not os.path.exists(f"{folder}/.s.PGSQL.{parsed.port or 5432}"):
        pytest.skip(f"the test server has no socket in {folder}")
    url = f"postgresql://{parsed.username}@/{parsed.database}?host={folder}&port={parsed.port or 5432}"
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT inet_server_addr() IS NULL") == (True, True)


@pytest.mark.parametrize("password", ["p@ss#word", "pa@ssword"])
def test_a_password_with_an_unencoded_at_or_hash_is_a_config_error_that_does_not_print_it(tmp_path, monkeypatch,
                                                                                           password):
    # The URL parser ends the password at its first @ (or the host at a #): the rest was taken for the
    # host, so every 'cannot reach the database postgresql://gw:***@ssword@db/gw' printed most of it.
    from gateway.errors import ConfigError
    from gateway.settings import load_settings
    from tests.conftest import write_config

    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(ConfigError) as info:
        load_settings(write_config(tmp_path, database_url=f"postgresql://gw:{password}@db.example/gw"))
    assert info.value.key == "database_url" and "percent-encode" in str(info.value)
    assert "ss" not in str(info.value).replace("password", "")


async def test_a_plus_in_a_libpq_option_stays_a_plus_as_libpq_reads_it(postgres_url):
    # libpq decodes only %XX in a URL; SQLAlchemy's parser, a form's, made every + a space, so
    # `sslpassword=k3y+pass` (a generated passphrase) was the wrong passphrase, and `options=-c
    # TimeZone=Etc/GMT+3` a broken option. `application_name` shows it, as psql sets it from the same URL.
    url = postgres_url.replace("postgresql+asyncpg://", "postgresql://") + "?application_name=a+b%20c"
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT current_setting('application_name')") == (
        "a+b c", "a+b c")


async def test_a_url_naming_several_hosts_as_libpq_does_connects_to_the_one_that_takes_writes(postgres_url, tmp_path,
                                                                                             monkeypatch):
    # libpq's failover URL (`postgresql://gw@db1:5432,db2:5432/gw?target_session_attrs=read-write`, what
    # target_session_attrs is for) was a config error, "invalid literal for int() with base 10: '5432,db2:5432'",
    # and without ports the engine looked up a host named "db1,db2".
    from sqlalchemy.engine import make_url

    from gateway.preflight import redacted_db_url
    from gateway.settings import load_settings
    from storage.engine import postgres_connect_args
    from tests.conftest import write_config

    parsed = make_url(postgres_url)
    port = parsed.port or 5432
    url = (f"postgresql://{parsed.username}:s3cret@127.0.0.2:1,{parsed.host}:{port}/{parsed.database}"
           "?target_session_attrs=read-write")  # the first one is down
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert load_settings(write_config(tmp_path, database_url=url)).database_url == url
    assert "s3cret" not in redacted_db_url(url) and "host=127.0.0.2%3A1&" in redacted_db_url(url)
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT NOT pg_is_in_recovery()") == (True, True)
    assert postgres_connect_args("postgresql://gw@db1,db2/gw") == (
        "postgresql+asyncpg://gw@/gw", {"host": ["db1", "db2"], "port": [5432, 5432]})


async def test_every_command_reads_a_url_naming_several_hosts_as_libpq_does(postgres_url, tmp_path, monkeypatch):
    # The schema check every command makes first read such a URL as SQLAlchemy does: `gateway db upgrade`,
    # `serve`, `ingest-runs`… ended in "ValueError: invalid literal for int() with base 10: '5432,db2:5432'".
    from sqlalchemy.engine import make_url

    from gateway.preflight import schema_revision
    from gateway.settings import load_settings
    from tests.conftest import write_config

    parsed = make_url(postgres_url)
    url = f"postgresql://{parsed.username}@127.0.0.2:1,{parsed.host}:{parsed.port or 5432}/{parsed.database}"
    monkeypatch.delenv("DATABASE_URL", raising=False)
    plain = write_config(tmp_path, database_url=postgres_url)
    expected = await schema_revision(load_settings(plain))
    assert await schema_revision(load_settings(write_config(tmp_path, database_url=url))) == expected


async def test_several_hosts_given_as_the_host_option_connect_as_libpq_does(postgres_url):
    # `?host=db1,db2` (libpq's other spelling of a failover list) was "All ports are required to be present for
    # asyncpg multiple host URL" from the engine, at the first query.
    from sqlalchemy.engine import make_url

    from storage.engine import postgres_connect_args

    assert postgres_connect_args("postgresql://gw@/gw?host=db1,db2&sslmode=require") == (
        "postgresql+asyncpg://gw@/gw", {"host": ["db1", "db2"], "port": [5432, 5432], "dsn": "postgresql://?sslmode=require"})
    assert postgres_connect_args("postgresql://gw@/gw?host=db1,db2&port=5433") == (
        "postgresql+asyncpg://gw@/gw", {"host": ["db1", "db2"], "port": [5433, 5433]})
    parsed = make_url(postgres_url)
    url = (f"postgresql://{parsed.username}@/{parsed.database}?host=127.0.0.2,{parsed.host}"
           f"&port=1,{parsed.port or 5432}&target_session_attrs=read-write")  # the first one is down
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT NOT pg_is_in_recovery()") == (True, True)


@pytest.mark.parametrize("down", ["::1", "[::1]"])
async def test_an_ipv6_address_in_a_list_of_hosts_connects_as_libpq_does(postgres_url, down):
    # `?host=::1,db2` became `host=::1:5432`, which the engine split at every colon: "All ports are required to
    # be present for asyncpg multiple host URL", or a host named "[" on the bridge; `postgresql://gw@[::1],db2/gw`
    # kept `[::1]` without its port. Each host is given to asyncpg as a name (`::1`) and a port of its own.
    from sqlalchemy.engine import make_url

    from storage.engine import postgres_connect_args

    for url in (f"postgresql://gw@/gw?host={down},db2&port=5433", "postgresql://gw@[::1]:5433,db2:5433/gw"):
        _, connect_args = postgres_connect_args(url)
        assert (connect_args["host"], connect_args["port"]) == (["::1", "db2"], [5433, 5433])
    parsed = make_url(postgres_url)
    url = (f"postgresql://{parsed.username}@/{parsed.database}?host={down},{parsed.host}"
           f"&port=1,{parsed.port or 5432}&target_session_attrs=read-write")  # nothing listens on ::1, port 1
    assert await asked_on_the_engine_and_the_bridge(url, "SELECT NOT pg_is_in_recovery()") == (True, True)


async def test_a_single_ipv6_host_and_its_port_are_reached_by_the_engine_and_the_bridge():
    # libpq's `?host=::1&port=N` (an IPv6 address is written bare in `host=`): the engine connected, but the
    # bridge's DSN handed asyncpg `host=::1`, which it splits at the colon ("Name or service not known"); and
    # with several hosts (`?host=db1&host=::1&port=N`) `port=` was dropped for 5432. Both reach ::1 on N.
    import asyncio
    import socket

    port = 18951
    arrived: list[int] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        arrived.append(writer.get_extra_info("sockname")[1])
        writer.close()

    try:
        server = await asyncio.start_server(accept, "::1", port, family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    async with server:
        for url in (f"postgresql://gw@/gw?host=::1&port={port}", f"postgresql://gw@/gw?host=::1&host=::1&port={port}"):
            arrived.clear()
            engine = create_engine(url)
            try:
                with pytest.raises(Exception):  # the fake closes at once: the address is what is checked
                    async with engine.connect():
                        pass
            finally:
                await engine.dispose()
            dsn, keywords = asyncpg_dsn(url)
            with pytest.raises(Exception) as bridge:
                await asyncpg.connect(dsn, **keywords, timeout=5)
            assert not isinstance(bridge.value, socket.gaierror), (url, bridge.value)
            assert arrived and set(arrived) == {port}, (url, arrived)
            assert len(arrived) >= 2, (url, arrived)  # the engine's connection and the bridge's
