"""The config's `database_url`: its check, which `Settings` makes, and `load_database_settings`, which reads that key
alone for `gateway db upgrade` (a migration needs nothing else of the config)."""

from __future__ import annotations

import os

from pydantic import ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.config_errors import config_error
from gateway.config_file import name_env_override, name_unset_variable, read_config

DATABASE_DRIVERS = ("sqlite+aiosqlite", "postgresql+asyncpg")
"""The async drivers the gateway runs on; `storage.engine.async_url` maps `sqlite://` and the like onto them."""
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///var/gateway.db"


def checked_database_url(value: str) -> str:
    """`value`, or a `ValueError` saying what is wrong with it: a bad URL is a config error, not a SQLAlchemy
    traceback in the first command."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from storage.engine import async_url, postgres_connect_args

    if not value.strip():
        raise ValueError("is empty (an unset ${VAR}?); use sqlite+aiosqlite:///path/to.db or postgresql://user@host/db")
    try:
        driver = make_url(async_url(value)).drivername
    except ArgumentError:  # its message would not say which part is wrong, and the URL may hold a password
        raise ValueError("not a database URL; use sqlite+aiosqlite:///path/to.db or postgresql://user@host/db") from None
    if driver not in DATABASE_DRIVERS:
        raise ValueError(f"unsupported database driver {make_url(value).drivername!r}; use SQLite "
                         "(sqlite:// or sqlite+aiosqlite://) or PostgreSQL (postgresql:// or postgresql+asyncpg://)")
    if driver == "postgresql+asyncpg":
        if any(mark in (make_url(async_url(value)).host or "") for mark in "@#"):
            # The password ended at its first @ (the host at a #) and the rest was taken for the host, so
            # every "cannot reach the database" line printed most of it. Not repeated here.
            raise ValueError("its password (or user name) holds an @ or # as it is: percent-encode them "
                             "(@ as %40, # as %23)")
        postgres_connect_args(value)  # an option asyncpg cannot honour: said here, not at the first query
    return value


class DatabaseSettings(BaseSettings):
    """The config's `database_url` alone, as `Settings` reads it: `DATABASE_URL` in the environment overrides it."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, env_prefix="", case_sensitive=False)

    database_url: str = DEFAULT_DATABASE_URL

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        return checked_database_url(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)  # the environment over the file, as for `Settings`


def load_database_settings(path: str | os.PathLike[str] | None = None) -> DatabaseSettings:
    """The config file's `database_url` (or `DATABASE_URL`), checked; the rest of the file is neither interpolated
    nor checked. Why: `gateway db upgrade` refused to migrate over an unrelated mistake (a bot's unknown model, a
    channel's placeholder secret in production), though it uses the database URL alone. Raises `ConfigError`."""
    unset: dict[str, str] = {}
    data = read_config(path, unset=unset, keys=frozenset({"database_url"}))
    try:
        return DatabaseSettings(**data)
    except ValidationError as exc:
        overrides = frozenset({"database_url"})
        raise name_env_override(name_unset_variable(config_error(exc, DatabaseSettings), unset, overrides),
                                overrides) from None
