"""Checks a command makes before it starts, so that a missing schema, an unreachable database or an
unknown embedding model is one line saying what to do, not a traceback from deep inside."""

from __future__ import annotations

from pathlib import Path

from gateway.errors import ConfigError, GatewayError


def check_embedding_model(settings, *, load: bool = True) -> None:
    """Find a bad `embedding.model` before uvicorn starts, as `ingest` does, instead of an
    "Application startup failed" traceback: the name is checked against fastembed's list, then (with
    `load`, for a process that holds the index) the model is loaded. A name fastembed knows but has no
    copy of here, or a `model_path` folder that lacks its files, passed the name check and failed in the
    app's start (exit 3). The load is cached (`rag.embeddings._load_fastembed`), so the app's start
    reuses it rather than loading the model twice."""
    embedding = settings.embedding
    if embedding.model == "minilm-int8" or embedding.model.startswith("litellm/"):
        return  # shipped with the project, or an API model: no name list to check against
    if embedding.model_path and not Path(embedding.model_path).is_dir():
        raise ConfigError("embedding.model_path", f"{embedding.model_path} is not a folder")
    from fastembed import TextEmbedding

    # fastembed's own test. Its message sent the user to a Python call; this one says what may be written.
    if not any(embedding.model.lower() == m["model"].lower() for m in TextEmbedding.list_supported_models()):
        raise ConfigError("embedding.model", f"{embedding.model!r} is not a model fastembed knows: write "
                                             "'minilm-int8' (shipped here), a fastembed model name such as "
                                             "'BAAI/bge-small-en-v1.5' with its files in embedding.model_path, or "
                                             "'litellm/<model>' for an API model (README: Configuration)")
    if load:
        from rag.embeddings import DenseEmbedder

        DenseEmbedder.from_settings(embedding)  # its ConfigError names the setting to fix


def uncalibrated_gates(settings, bots=None) -> list[str]:
    """One warning per bot (of `bots`, default all) whose gate-1 bar is the default while
    `embedding.model` is not the model it was calibrated for. Why: the bar is a cosine, and cosines are
    the model's own. multilingual-e5-small scored questions about another corpus 0.71-0.87 on the
    benchmark's sets (bench/README.md), so with it the default 0.46 would refuse almost nothing, silently."""
    from rag.model_files import MINILM_NAME

    model = settings.embedding.model
    if model == MINILM_NAME:
        return []
    return [
        f"bot {bot.name!r}: gate 1's retrieval.min_dense_score {bot.retrieval.min_dense_score} and lexical_credit "
        f"{bot.retrieval.lexical_credit} are calibrated for {MINILM_NAME}, and {model} gives its own cosines; run "
        f"`gateway eval` with questions of your own and set the bot's retrieval.min_dense_score (README, Gate 1)"
        for bot in (settings.bots if bots is None else bots)
        if not {"min_dense_score", "lexical_credit"} & bot.retrieval.model_fields_set
    ]


def models_missing_keys(settings) -> list[str]:
    """One warning per configured model whose provider key (or base URL) LiteLLM finds neither in its
    `litellm_params` nor in the environment. Why at start: each call failed three times as a provider
    outage ("The api_key client option must be set") before the fallback answered, on every message."""
    if not settings.models:  # only `offline`: no key to look for, and LiteLLM takes seconds to import
        return []
    import litellm

    litellm.suppress_debug_info = True  # else a model of no known provider prints a red "Provider List" banner
    warnings = []
    for entry in settings.models:
        params = entry.litellm_params
        try:  # an unset ${VAR} leaves "", which LiteLLM takes for a key given but its calls for none
            found = litellm.validate_environment(model=params["model"], api_key=params.get("api_key") or None,
                                                 api_base=params.get("api_base") or None)
        except Exception:  # a provider LiteLLM cannot check: its first call says what is wrong
            continue
        if missing := found.get("missing_keys"):
            warnings.append(f"model {entry.model_name!r} ({params['model']}) has no {', '.join(missing)}: set it in "
                            "the environment (or the model's litellm_params), or every call to it fails")
    return warnings


def redacted_db_url(url: str) -> str:
    """The URL as it may be printed: its password hidden, and the client key's (`?sslpassword=`) too, as
    `[REDACTED]` (`redacted_url`, the form of every log and error line)."""
    from sqlalchemy.engine import make_url

    from gateway.url_secrets import redacted_url
    from storage.engine import several_hosts_as_options

    return redacted_url(make_url(several_hosts_as_options(url)).render_as_string(hide_password=False))


LOGIN_REFUSED = {"28P01", "28000"}  # PostgreSQL's invalid_password, invalid_authorization_specification


async def schema_revision(settings, engine=None) -> str | None:
    """The migration the database is at, None when it was never migrated (no `alembic_version`, or no
    SQLite file: asking would create it); a one-line `GatewayError` when it cannot be reached."""
    from sqlalchemy import inspect, text
    from sqlalchemy.engine import make_url

    from storage.engine import async_url, create_engine, sqlite_file

    if (database := sqlite_file(settings.database_url)) is not None and not database.exists():
        return None
    own = engine is None
    engine = create_engine(settings.database_url) if own else engine
    try:
        async with engine.connect() as conn:
            if not await conn.run_sync(lambda sync: inspect(sync).has_table("alembic_version")):
                return None
            return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one_or_none()
    except Exception as exc:
        # The driver's own words: SQLAlchemy's wrapper adds its class and a "(Background on this error at:
        # https://sqlalche.me/…)" link to them.
        cause = getattr(exc, "orig", None) or exc
        reason = " ".join(str(cause).split()) or type(cause).__name__
        if type(cause.__cause__).__name__ == "InvalidCatalogNameError":  # asyncpg: no database of that name
            reason += f" on that server: create it first (createdb {make_url(async_url(settings.database_url)).database})"
        elif isinstance(cause, ConnectionRefusedError):  # asyncpg's words named no server down, nor a wrong port
            host = make_url(async_url(settings.database_url)).host
            reason += f": connection refused; is PostgreSQL running on {host or 'that host'}, and on that port?"
        elif getattr(cause.__cause__, "sqlstate", None) in LOGIN_REFUSED:  # reached: "cannot reach" sent one to look
            raise GatewayError(f"the database {redacted_db_url(settings.database_url)} refused the login: {reason}; "
                               "check the user and password in database_url (or DATABASE_URL)") from None
        raise GatewayError(f"cannot reach the database {redacted_db_url(settings.database_url)}: {reason}") from None
    finally:
        if own:
            await engine.dispose()


async def require_schema(settings, engine=None) -> None:
    """Raise a one-line `GatewayError` saying what to run when the database was never migrated (or
    cannot be reached)."""
    current = await schema_revision(settings, engine)  # one connection for both questions
    if current is None:
        from storage.engine import sqlite_file

        config = settings.config_path or "config.yaml"
        database = sqlite_file(settings.database_url)
        if database is not None and not database.exists():
            # A relative SQLite path is relative to the working directory, not to the config file:
            # run from another folder, the database is looked for (and `db upgrade` would make one) there.
            where = hint = ""
            if not database.is_absolute():
                where = f" ({database.resolve()}, relative to the working directory)"
                hint = " in the folder you meant, or give database_url an absolute path"
            raise GatewayError(f"the database {redacted_db_url(settings.database_url)}{where} does not exist: run "
                               f"`gateway db upgrade --config {config}` (or `make run`){hint}")
        raise GatewayError(f"the database {redacted_db_url(settings.database_url)} has no schema: run "
                           f"`gateway db upgrade --config {config}` (or `make run`)")
    # Behind the code (a deploy that started before its migration ran): queries of the new columns
    # would fail at run time while /readyz said ready. A revision this code does not know is newer
    # (a rollback of the code): its migrations only add, so it is let through.
    head, known = migration_revisions()
    if current != head and current in known:
        config = settings.config_path or "config.yaml"
        raise GatewayError(f"the database {redacted_db_url(settings.database_url)} is at migration {current}, and "
                           f"this version of the gateway needs {head}: run `gateway db upgrade --config {config}`")


def migrations_root() -> Path:
    """The folder holding alembic.ini and alembic/: beside the package (a checkout, an editable install),
    else the working directory. Why both: the image installs the package into site-packages (`pip install
    .`), so its `gateway` command found no migrations there and every command was Alembic's traceback."""
    for root in (Path(__file__).resolve().parent.parent, Path.cwd()):
        if (root / "alembic.ini").is_file() and (root / "alembic" / "env.py").is_file():
            return root
    raise GatewayError(f"the database migrations (alembic.ini and alembic/) are neither beside the installed gateway "
                       f"package nor in the working directory {Path.cwd()}: run the command from the project's folder")


def alembic_config(database_url: str | None = None):
    """The project's Alembic configuration (`migrations_root`)."""
    from alembic.config import Config

    root = migrations_root()
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "alembic"))
    if database_url is not None:
        config.attributes["database_url"] = database_url
    return config


def migration_revisions() -> tuple[str, set[str]]:
    """The newest migration this code has, and every migration it has (from `alembic/versions`)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return script.get_current_head(), {revision.revision for revision in script.walk_revisions()}


def require_free_port(host: str, port: int) -> None:
    """A one-line `GatewayError` when `serve` could not listen on host:port. Why before the app starts:
    uvicorn binds only after the lifespan, so a busy port started the worker, the scheduler and a
    startup ingest, then stopped them again, its error one line among theirs (exit 3)."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            hint = (" (another `gateway serve`, or another program?): stop it, or give another --port (PORT=… with "
                    "make run)")
        else:
            hint = ": check --host (HOST=… with make run)" if isinstance(exc, socket.gaierror) else ""
        raise GatewayError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
