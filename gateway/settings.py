"""Configuration: config.yaml plus the environment, validated by pydantic-settings.

Load order: the file named by `--config`, else `$GATEWAY_CONFIG`, else `./config.yaml`. Any value
may be written `${ENV_VAR}` (or `${ENV_VAR:-default}`). Secret keys must be written that way: a
literal secret in the file is refused, so secrets come from the environment only. Only the keys in
`ENV_OVERRIDES` can also be overridden by the environment (`DATABASE_URL`, `LOG_LEVEL`, …).

Nothing here runs at import time; `load_settings()` builds a fresh `Settings` each call.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.bot_settings import (
    OFFLINE_MODEL,
    BotSettings,
    BusinessHours,
    EscalationSettings,
    RateLimitSettings,
    RetrievalSettings,
    SourceSettings,
    ToolSettings,
    home_expanded,
)
from gateway.channel_settings import (
    ChannelBase,
    ChannelsSettings,
    DiscordChannel,
    SlackChannel,
    TelegramChannel,
    WebChannel,
    WhatsAppChannel,
    _Strict,
    secrets_allowed_empty,
)
from gateway.config_errors import config_error
from gateway.config_file import (
    DEMO_OPERATOR_TOKEN,
    PLACEHOLDER_SECRETS,
    SECRET_KEYS,
    name_env_override,
    name_unset_variable,
    read_config,
    resolve_config_path,
    secret_values,
)
from gateway.database_settings import DEFAULT_DATABASE_URL, checked_database_url
from gateway.errors import ConfigError, UnknownBot
from gateway.reply_settings import RepliesSettings
from gateway.runtime_settings import LLMSettings, OperatorSettings, TracingSettings, WorkerSettings

__all__ = [
    "OFFLINE_MODEL", "SECRET_KEYS", "PLACEHOLDER_SECRETS", "ENV_OVERRIDES",
    "QdrantSettings", "EmbeddingSettings", "ModelEntry", "OperatorSettings", "RetrievalSettings",
    "SourceSettings", "ToolSettings", "EscalationSettings", "BusinessHours",
    "ChannelBase", "WebChannel", "TelegramChannel", "SlackChannel", "DiscordChannel", "WhatsAppChannel",
    "ChannelsSettings", "WorkerSettings", "LLMSettings", "RateLimitSettings", "RepliesSettings", "BotSettings",
    "Settings",
    "ConfigError", "resolve_config_path", "load_settings",
]

MIN_PRODUCTION_TOKEN = 16
"""A secret we choose (an operator token, a Telegram webhook secret) shorter than this is refused in production: each
is the whole proof of who sends, and a route refused nothing to a client trying one after another."""
_OPERATOR_TOKEN = re.compile(r"operators\[\d+\]\.token")
_CHOSEN_SECRET = re.compile(rf"{_OPERATOR_TOKEN.pattern}|bots\[\d+\]\.channels\.telegram\.webhook_secret")
ENV_OVERRIDES = frozenset({"database_url", "redis_url", "environment", "log_level", "log_format"})
"""The top-level keys an environment variable of the same name (any case) overrides. Only these:
a stray `WORKER=1` or `BOTS=...` from a process manager must not replace a correct file."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LOG_LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL"}  # the standard library takes these too


class QdrantSettings(_Strict):
    """Local folder (embedded, default) or a server URL; same client code either way.
    `engine: edge` swaps the embedded engine for qdrant-edge (same layout, ~10x faster search at 10k chunks)."""

    path: str | None = "var/qdrant"
    url: str | None = None
    api_key: str | None = None
    timeout: float = Field(default=10.0, ge=1)  # whole seconds to qdrant-client: 0.5 was 0, no time at all
    engine: Literal["local", "edge"] = "local"

    @field_validator("path")
    @classmethod
    def _home(cls, value: str | None) -> str | None:
        return home_expanded(value)

    @field_validator("url")
    @classmethod
    def _a_server_url(cls, value: str | None) -> str | None:
        """As qdrant-client reads it: a typo ("qdrant:6333", a space) loaded, then `ingest` ended in urllib3's
        traceback and `serve` in "Application startup failed" (exit 3)."""
        from urllib3.util import parse_url

        if value is None or not value.strip():
            return None  # `${QDRANT_URL}` left unset: local mode in `path`
        value = value.strip()
        try:  # qdrant-client's own reading: "localhost…" without a scheme is a host, any other scheme is refused
            parsed = parse_url(f"//{value}" if value.startswith("localhost") else value)
        except ValueError:  # urllib3's LocationParseError is one
            parsed = None
        if parsed is None or (parsed.scheme or "http") not in ("http", "https") or not parsed.host:
            raise ValueError(f"{value!r} is not an http(s) URL with a host: give the server's, as http://qdrant:6333")
        return value

    @model_validator(mode="after")
    def _edge_is_embedded(self) -> "QdrantSettings":
        if self.engine == "edge" and (self.url or not self.path):
            raise ValueError("engine 'edge' is embedded: set qdrant.path and leave qdrant.url unset")
        return self


class EmbeddingSettings(_Strict):
    """Dense model for search. `minilm-int8` is the offline model shipped in the repo."""

    model: str = "minilm-int8"
    # A folder holding a fastembed model's files (its ONNX file and tokenizer), to load it offline.
    model_path: str | None = None
    # Texts per encoder batch, or per request for an API model; unset: 8 for a local encoder (the
    # fastest on 2 cores, rag/embeddings.py), 64 for an API model.
    batch_size: int | None = Field(default=None, ge=1)
    # The encoder's window: no embedded text is longer (MiniLM reads 256 word pieces).
    max_chunk_tokens: int = Field(default=256, ge=32, le=8192)
    # A chunk's text budget: BM25 and the answer see all of it; the dense vector averages its windows.
    chunk_text_tokens: int = Field(default=512, ge=32, le=8192)

    @model_validator(mode="after")
    def _path_is_for_fastembed(self) -> "EmbeddingSettings":
        if self.model_path and (self.model == "minilm-int8" or self.model.startswith("litellm/")):
            raise ValueError("model_path is for a fastembed model name; minilm-int8 ships with the project, an API model has no files")
        return self


class ModelEntry(_Strict):
    """One LiteLLM Router `model_list` entry."""

    model_name: str
    litellm_params: dict[str, Any]
    # LiteLLM's own per-deployment metadata (id, base_model, costs, …), passed to the Router as it is.
    model_info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("litellm_params")
    @classmethod
    def _has_a_model(cls, params: dict[str, Any]) -> dict[str, Any]:
        """LiteLLM's Router raised its own traceback at `serve` for these; `db upgrade` and `ingest` took them."""
        model = params.get("model")
        if not isinstance(model, str) or not model.strip():
            raise ValueError("needs `model`, the provider's model name (for example openai/gpt-4o-mini)"
                             + ("; it is empty (an unset ${VAR}?)" if model == "" else ""))
        for key in ("api_base", "api_key", "api_version"):
            if key in params and not isinstance(params[key], str):
                raise ValueError(f"`{key}` must be a string, not {type(params[key]).__name__}")
        for key in ("timeout", "stream_timeout"):
            # `timeout: soon` started, and every call failed its three attempts in float('soon').
            if params.get(key) is not None:
                params = {**params, key: _seconds(key, params[key])}
        return params


def _seconds(key: str, value: Any) -> float:
    """A timeout in seconds above 0: a number, or a string of one (as a `${VAR}` gives it)."""
    try:
        seconds = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
    except ValueError:
        seconds = None
    if seconds is None or not 0 < seconds < float("inf"):
        raise ValueError(f"`{key}` must be a number of seconds above 0, not {value!r}")
    return seconds


class Settings(BaseSettings):
    """The whole gateway configuration."""

    model_config = SettingsConfigDict(extra="forbid", frozen=True, env_prefix="", case_sensitive=False)

    environment: Literal["development", "production"] = "development"
    database_url: str = DEFAULT_DATABASE_URL
    redis_url: str | None = None
    log_level: str = "INFO"
    log_format: Literal["console", "json"] = "console"
    # LiteLLM's Langfuse callback (keys come from LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY / LANGFUSE_HOST).
    langfuse: bool = False
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    # When the (leader-only) retention purge runs: expired conversations and removed sources' chunks.
    retention_schedule: str = "17 4 * * *"
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    qdrant: QdrantSettings = Field(default_factory=QdrantSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    models: list[ModelEntry] = Field(default_factory=list)
    operators: list[OperatorSettings] = Field(default_factory=list)
    bots: list[BotSettings] = Field(default_factory=list)
    config_path: str | None = None
    # Each secret key's `${VAR}` and whether VAR was set, as `load_settings` read them (for log lines).
    _secret_vars: dict[str, tuple[str, bool]] = PrivateAttr(default_factory=dict)

    @field_validator("retention_schedule")
    @classmethod
    def _valid_retention_cron(cls, value: str) -> str:
        from gateway.cron import checked_cron

        return checked_cron(value)

    @field_validator("log_format", mode="before")
    @classmethod
    def _log_format_in_any_case(cls, value: Any) -> Any:
        # As log_level: `LOG_FORMAT=JSON` was a config error while `LOG_LEVEL=debug` was taken.
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, value: str) -> str:
        # An unknown name (`verbose`) passed this check-less field and crashed `serve` in the logging
        # setup with `KeyError: 'level verbose'`.
        level = _LOG_LEVEL_ALIASES.get(value.strip().upper(), value.strip().upper())
        if level not in LOG_LEVELS:
            said = "is empty (an unset ${VAR}?)" if not level else f"unknown level {value!r}"
            raise ValueError(f"{said}; use one of {', '.join(LOG_LEVELS)} (in any case)")
        return level

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        return checked_database_url(value)

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        # Checked here so `localhost:6379` is a config error at load, not a traceback when `serve` starts.
        if value is None or not value.strip():
            return None
        scheme, sep, _ = value.partition("://")
        if not sep or scheme not in ("redis", "rediss", "redis+unix"):
            raise ValueError("not a Redis URL; use redis://host:6379/0 (or rediss:// for TLS)")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment overrides the file, so one config.yaml serves dev, CI and production; but
        # only for the documented keys (ENV_OVERRIDES).
        return (_EnvOverrides(settings_cls), init_settings)

    @model_validator(mode="after")
    def _cross_checks(self) -> "Settings":
        known = {m.model_name for m in self.models} | {OFFLINE_MODEL}
        names: set[str] = set()
        for i, bot in enumerate(self.bots):
            if bot.name in names:
                raise ValueError(f"bots[{i}].name: duplicate bot name {bot.name!r}")
            names.add(bot.name)
            for key, model in [("model", bot.model)] + [(f"fallbacks[{j}]", m) for j, m in enumerate(bot.fallbacks)]:
                if model not in known:  # `model: gpt-4o-mini` reads as LiteLLM's name, but a bot names an entry
                    raise ValueError(f"bots[{i}].{key}: unknown model {model!r}; known: {', '.join(sorted(known))} "
                                     f"(a bot names a model_name of `models:`; add one there, as {{model_name: "
                                     f"{model}, litellm_params: {{model: <provider>/<model>, api_key: \"${{YOUR_KEY}}\"}}}})")
        operator_names: set[str] = set()
        operator_tokens: dict[str, str] = {}
        operator_members: dict[str, str] = {}
        for i, op in enumerate(self.operators):
            # A claim is held by an operator's name: two operators of one name could act on each other's.
            if op.name in operator_names:
                raise ValueError(f"operators[{i}].name: duplicate operator name {op.name!r}")
            operator_names.add(op.name)
            # Claims made in the Slack operator channel before `slack_user_ids` are held as "slack:<user id>".
            if op.name.strip().lower().startswith("slack:"):
                raise ValueError(f"operators[{i}].name: {op.name!r}: the prefix 'slack:' is reserved for "
                                 "operators in the Slack operator channel")
            # One token, two operators: a sign-in would be either of them. The token itself is never printed.
            if op.token and op.token in operator_tokens:
                raise ValueError(f"operators[{i}].token: the same token as operator {operator_tokens[op.token]!r}; "
                                 "give each operator their own")
            if op.token:
                operator_tokens[op.token] = op.name
            for member in op.slack_user_ids:  # one Slack member acting as two operators: which one's bots?
                if member in operator_members:
                    raise ValueError(f"operators[{i}].slack_user_ids: {member} is already operator "
                                     f"{operator_members[member]!r}'s; a Slack member is one operator")
                operator_members[member] = op.name
            if "bots" not in op.model_fields_set:  # every bot is a choice to write, never what a forgotten line gives
                raise ValueError(f"operators[{i}].bots: not given; list the bots this operator serves, or \"*\" for "
                                 "every bot")
            if not op.bots:  # signed in, such an operator would see nothing and not know why
                raise ValueError(f"operators[{i}].bots: empty; list the bots this operator serves, or \"*\" for all")
            for bot in op.bots:
                if bot != "*" and bot not in names:
                    raise ValueError(f"operators[{i}].bots: unknown bot {bot!r}")
        if self.environment == "production":
            # An operator without a token is disabled (logged at start); a polling bot is sent no webhook secret;
            # `forget` loads the channels' secrets but uses them only for Slack, where a placeholder is not sent.
            unused = secrets_allowed_empty(self.bots)  # a polling bot's webhook secret; see without_channel_secrets
            for path, value in secret_values(self.model_dump()):
                if not value.strip():
                    if _OPERATOR_TOKEN.fullmatch(path) or path in unused:
                        continue
                    raise ValueError(f"{path}: empty in production (an unset ${{VAR}}?)")
                if value.strip().lower() in PLACEHOLDER_SECRETS and path not in unused:
                    demo = (" (the demo token `make run` sets when OPERATOR_TOKEN is unset; set your own, made with "
                            "`openssl rand -hex 24`)") if value.strip() == DEMO_OPERATOR_TOKEN else ""
                    raise ValueError(f"{path}: placeholder secret refused in production{demo}")
                if _CHOSEN_SECRET.fullmatch(path) and path not in unused and len(value.strip()) < MIN_PRODUCTION_TOKEN:
                    raise ValueError(f"{path}: shorter than {MIN_PRODUCTION_TOKEN} characters in production; make one "
                                     "with `openssl rand -hex 24`")
        return self

    def bot(self, name: str) -> BotSettings:
        """The bot called `name`; `UnknownBot` (a KeyError) when there is none."""
        for bot in self.bots:
            if bot.name == name:
                return bot
        raise UnknownBot(name, [b.name for b in self.bots])

    def empty_secret_reason(self, key: str) -> str:
        """Why the secret at `key` (as `operators[0].token`) is empty, naming its variable when known."""
        name, was_set = self._secret_vars.get(key, (None, False))
        if name is None:
            return f"its `{key.rsplit('.', 1)[-1]}` is empty"
        return f"${{{name}}} is {'empty' if was_set else 'unset'}"

    def unusable_secret_reason(self, key: str, value: str | None) -> str | None:
        """Why the secret at `key` cannot be used, or None: empty, or a placeholder in production (which only a
        command loaded `without_channel_secrets`, as `forget`, gets past the load with)."""
        if not value or not value.strip():
            return self.empty_secret_reason(key)
        if self.environment == "production" and value.strip().lower() in PLACEHOLDER_SECRETS:
            name, _ = self._secret_vars.get(key, (None, False))
            said = f"${{{name}}}" if name else f"its `{key.rsplit('.', 1)[-1]}`"
            return f"{said} is a placeholder ({value.strip()}) refused in production"
        return None

    def ingest_fingerprint(self) -> str:
        """A hash of what an ingest depends on: the embedding settings and each bot's sources.

        `gateway ingest` sends it to the running server that holds the index, which refuses a job it
        would run with another configuration. Other keys are left out on purpose: a different log
        level or operator token in the CLI's environment does not change what an ingest does, and
        neither does a source's `schedule` (only when the server runs it).
        """
        return hashlib.sha256(json.dumps(self.ingest_config(), sort_keys=True).encode()).hexdigest()

    def ingest_config(self) -> dict[str, Any]:
        """What `ingest_fingerprint` hashes: `embedding`, and each bot's name and sources but their schedule.
        A server that refuses a job sends its own, so the CLI can say what differs."""
        relevant = self.model_dump(mode="json", include={"embedding": True, "bots": {"__all__": {"name", "sources"}}})
        for bot in relevant.get("bots", []):
            for source in bot.get("sources", []):
                source.pop("schedule", None)
        return relevant


class _EnvOverrides(EnvSettingsSource):
    """The environment source, limited to the keys in `ENV_OVERRIDES`."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field_name not in ENV_OVERRIDES:
            return None, field_name, False
        return super().get_field_value(field, field_name)


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read, interpolate and validate the configuration. Raises `ConfigError` naming the key."""
    unset: dict[str, str] = {}
    secret_vars: dict[str, str] = {}
    data = read_config(path, unset=unset, secret_vars=secret_vars)
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise name_env_override(name_unset_variable(config_error(exc, Settings), unset, ENV_OVERRIDES),
                                ENV_OVERRIDES) from None
    except ConfigError as exc:
        raise name_env_override(name_unset_variable(exc, unset, ENV_OVERRIDES), ENV_OVERRIDES) from None
    settings._secret_vars = {key: (name, name in os.environ) for key, name in secret_vars.items()}
    return settings
