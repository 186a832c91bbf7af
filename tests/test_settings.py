"""Configuration: interpolation, secrets from the environment only, and errors that name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.errors import ConfigError
from gateway.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_settings_repository_config_loads():
    settings = load_settings(ROOT / "config.yaml")
    assert [b.name for b in settings.bots] == ["acme"]
    assert settings.bots[0].sources[0].type == "directory"


def test_settings_interpolates_env_and_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_TOKEN", "123:abc")
    monkeypatch.setenv("TG_SECRET", "s3cr3t-value")
    path = _write(tmp_path, {"bots": [{"name": "b", "system_prompt": "Hi ${WHO:-there}",
                                       "channels": {"telegram": {"token": "${TG_TOKEN}",
                                                                 "webhook_secret": "${TG_SECRET}"}}}]})
    settings = load_settings(path)
    assert settings.bots[0].channels.telegram.token == "123:abc"
    assert settings.bots[0].system_prompt == "Hi there"




def test_settings_env_overrides_database_url(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://x@db/prod")
    settings = load_settings(_write(tmp_path, {"database_url": "sqlite:///a.db"}))
    assert settings.database_url == "postgresql://x@db/prod"


@pytest.mark.parametrize("data, key, words", [
    ({"bots": [{"name": "b", "colour": "red"}]}, "bots[0].colour", "unknown key"),
    ({"databse_url": "x"}, "databse_url", "unknown key; did you mean database_url?"),
    # A misspelt key was only "unknown key": the reader had to find the right spelling in the README.
    ({"bots": [{"name": "b", "sytem_prompt": "x"}]}, "bots[0].sytem_prompt", "unknown key; did you mean system_prompt?"),
    ({"bots": [{"name": "b", "sources": [{"name": "s", "type": "directory", "path": "x", "shedule": "0 * * * *"}]}]},
     "bots[0].sources[0].shedule", "unknown key; did you mean schedule?"),
    ({"bots": [{"name": "b", "channels": {"telegram": {"tokn": "${UNSET_TOKEN_VAR}"}}}]},
     "bots[0].channels.telegram.tokn", "unknown key; did you mean token?"),
    ({"bots": [{"name": "b", "model": "gpt-9"}]}, "bots[0].model", "unknown model 'gpt-9'"),
    ({"bots": [{"name": "b", "fallbacks": ["nope"]}]}, "bots[0].fallbacks[0]", "unknown model 'nope'"),
    ({"bots": [{"name": "b", "sources": [{"name": "s", "type": "directory", "path": "x",
                                          "schedule": "61 * * * *"}]}]},
     "bots[0].sources[0].schedule", "bad cron"),
    ({"bots": [{"name": "b", "channels": {"telegram": {"token": "${UNSET_TOKEN_VAR}"}}}]},
     "bots[0].channels", "telegram.token is required"),
    ({"bots": [{"name": "b", "channels": {"slack": {"bot_token": "xoxb-literal", "signing_secret": "${X}"}}}]},
     "bots.channels.slack.bot_token", "environment only"),
    ({"models": [{"model_name": "m", "litellm_params": {"model": "o/x", "api_key": "os.environ/OPENAI_API_KEY"}}]},
     "models[0].litellm_params.api_key", "write it as ${OPENAI_API_KEY}: this file reads a variable as ${VAR}, not LiteLLM's os.environ/VAR"),
    ({"bots": [{"name": "b"}, {"name": "b"}]}, "bots[1].name", "duplicate"),
    ({"operators": [{"name": "sam", "token": "${OP_A}", "bots": ["*"]}, {"name": "sam", "token": "${OP_B}", "bots": ["*"]}]},
     "operators[1].name", "duplicate operator name"),
    ({"worker": {"turn_timeout": 0}}, "worker.turn_timeout", "greater than 0"),
    # Loaded; on PostgreSQL every turn then failed in the worker (a negative LIMIT), the customer unanswered.
    ({"bots": [{"name": "b", "history_turns": -1}]}, "bots[0].history_turns", "greater than or equal to 0"),
    ({"bots": [{"name": "b", "daily_budget_usd": -5}]}, "bots[0].daily_budget_usd", "greater than or equal to 0"),
    # LiteLLM's Router raised these as tracebacks at `serve` and `chat`, after `db upgrade` took them.
    ({"models": [{"model_name": "m", "litellm_params": {"api_base": "http://127.0.0.1:9"}}]},
     "models[0].litellm_params", "needs `model`"),
    ({"models": [{"model_name": "m", "litellm_params": {"model": "${UNSET_TOKEN_VAR}"}}]},
     "models[0].litellm_params", "${UNSET_TOKEN_VAR} is not set"),
    ({"models": [{"model_name": "m", "litellm_params": {"model": "openai/x", "api_base": 12}}]},
     "models[0].litellm_params", "`api_base` must be a string"),
    # A timeout that is not a number started, and every call failed 3 times in float('soon').
    ({"models": [{"model_name": "m", "litellm_params": {"model": "openai/x", "timeout": "soon"}}]},
     "models[0].litellm_params", "`timeout` must be a number of seconds above 0, not 'soon'"),
    ({"models": [{"model_name": "m", "litellm_params": {"model": "openai/x", "timeout": [1, 2]}}]},
     "models[0].litellm_params", "`timeout` must be a number of seconds above 0, not [1, 2]"),
    ({"models": [{"model_name": "m", "litellm_params": {"model": "openai/x", "stream_timeout": 0}}]},
     "models[0].litellm_params", "`stream_timeout` must be a number of seconds above 0, not 0"),
    ({"operators": [{"name": " ", "token": "${OP_A}", "bots": ["*"]}]}, "operators[0].name", "empty"),
    ({"bots": [{"name": "b", "tools": [{"name": "t", "import_path": "tools_without_function"}]}]},
     "bots[0].tools[0]", "a python tool needs `import_path` written as 'package.module:function'"),
    ({"bots": [{"name": "b", "tools": [{"name": "t"}]}]}, "bots[0].tools[0]", "a python tool needs `import_path`"),
    # A key an unset ${VAR} left empty names the variable: "a directory source needs `path`" read as if
    # no path was written.
    ({"database_url": "${UNSET_TOKEN_VAR}"}, "database_url", "${UNSET_TOKEN_VAR} is not set, so database_url is empty"),
    ({"bots": [{"name": "b", "sources": [{"name": "s", "type": "directory", "path": "${UNSET_TOKEN_VAR}"}]}]},
     "bots[0].sources[0]", "a directory source needs `path` (${UNSET_TOKEN_VAR} is not set"),
    ({"bots": [{"name": "b", "model": "${UNSET_TOKEN_VAR}"}]}, "bots[0].model", "${UNSET_TOKEN_VAR} is not set"),
])
def test_settings_bad_config_names_key(tmp_path, monkeypatch, data, key, words):
    monkeypatch.delenv("UNSET_TOKEN_VAR", raising=False)
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, data))
    assert info.value.key.replace("[0]", "") == key.replace("[0]", "") or info.value.key == key
    assert words in str(info.value), str(info.value)
    if "is not set" in words:
        assert "an unset ${VAR}?" not in str(info.value)  # the guess gives way to the name
    if "unknown key" in words:  # not followed by "(${VAR} is not set, so … is empty)": the key is what is wrong
        assert str(info.value).endswith(words), str(info.value)


@pytest.mark.parametrize("channel, values, key, words", [
    # Each of these loaded before, and then every webhook was refused (401) with only a warning.
    ("whatsapp", {"public_url": "gw.example.com"}, "public_url", "not an http(s) URL"),
    ("whatsapp", {"public_url": "https://gw.example.com/webhooks/b/whatsapp"}, "public_url", "the webhook's URL"),
    ("telegram", {"webhook_secret": "${TG_SECRET}"}, "webhook_secret", "A-Z, a-z, 0-9, _ and -"),
    ("discord", {"public_key": 1234567890}, "public_key", "in quotes"),
    ("telegram", {"api_base": "not a url"}, "api_base", "not an http(s) URL with a host"),
    ("slack", {"api_base": "slack.com/api/"}, "api_base", "not an http(s) URL with a host"),
])
def test_settings_channel_values_a_platform_would_refuse_are_config_errors(tmp_path, monkeypatch, channel, values,
                                                                           key, words):
    monkeypatch.setenv("TG_SECRET", "has a space")  # Telegram's setWebhook refuses it
    base = {"whatsapp": {"account_sid": "${SID}", "auth_token": "${AUTH}", "from_number": "+15550001111"},
            "telegram": {"token": "${TG_TOKEN}"}, "discord": {"token": "${DISCORD_TOKEN}"},
            "slack": {"bot_token": "${TG_TOKEN}", "signing_secret": "${AUTH}"}}[channel]
    for name in ("SID", "AUTH", "TG_TOKEN", "DISCORD_TOKEN"):
        monkeypatch.setenv(name, "set-from-the-environment")
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, {"bots": [{"name": "b", "channels": {channel: {**base, **values}}}]}))
    assert info.value.key == f"bots[0].channels.{channel}.{key}" and words in str(info.value)
    assert "has a space" not in str(info.value)  # a secret is never echoed


def test_settings_an_operator_with_no_bots_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, {"bots": [{"name": "b"}], "operators": [{"name": "o", "token": "${T}", "bots": []}]}))
    assert info.value.key == "operators[0].bots" and '"*" for all' in str(info.value)


@pytest.mark.parametrize("token", ["changeme", "dev-operator-token"])  # the second: `make run`'s, in the README
def test_settings_production_refuses_placeholder_secret(tmp_path, monkeypatch, token):
    monkeypatch.setenv("OP_TOKEN", token)
    path = _write(tmp_path, {"environment": "production",
                             "operators": [{"name": "o", "token": "${OP_TOKEN}", "bots": ["*"]}]})
    with pytest.raises(ConfigError, match="placeholder secret refused in production"):
        load_settings(path)


def test_settings_production_operator_tokens_empty_is_disabled_short_is_refused(tmp_path, monkeypatch):
    # config.yaml's demo operator reads ${OPERATOR_TOKEN}: unset, that operator is disabled (not a
    # "placeholder secret" error); set, it must be long enough to be the operator's whole login.
    monkeypatch.delenv("OP_TOKEN", raising=False)
    data = {"environment": "production", "operators": [{"name": "o", "token": "${OP_TOKEN}", "bots": ["*"]}]}
    assert load_settings(_write(tmp_path, data)).operators[0].token == ""
    monkeypatch.setenv("OP_TOKEN", "abc123")
    with pytest.raises(ConfigError, match="shorter than 16 characters in production"):
        load_settings(_write(tmp_path, data))
    monkeypatch.setenv("OP_TOKEN", "9f2c4e7a1b3d5f60a8c2e4f6")
    assert load_settings(_write(tmp_path, data)).operators[0].token


@pytest.mark.parametrize("environment", ["file", "env", "env-lowercase"])
def test_settings_production_refuses_a_secret_that_fell_back_to_its_default(tmp_path, monkeypatch, environment):
    """`${VAR:-literal}` would be a secret written in the file: a development convenience only."""
    monkeypatch.delenv("OP_TOKEN", raising=False)
    monkeypatch.delenv("ENVIRONMENT", raising=False)
    data = {"operators": [{"name": "o", "token": "${OP_TOKEN:-written-in-the-file}", "bots": ["*"]}]}
    monkeypatch.delenv("environment", raising=False)
    if environment == "file":
        data["environment"] = "production"
    else:  # pydantic-settings reads the variable's name in any case; so must this check
        monkeypatch.setenv("ENVIRONMENT" if environment == "env" else "environment", "production")
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.key == "operators[0].token" and "${OP_TOKEN} is not set" in str(info.value)
    monkeypatch.setenv("OP_TOKEN", "from-the-environment-7f3a")  # set: the default plays no part
    assert load_settings(path).operators[0].token == "from-the-environment-7f3a"
    monkeypatch.delenv("environment", raising=False)
    monkeypatch.setenv("ENVIRONMENT", "development")
    monkeypatch.delenv("OP_TOKEN")
    if environment == "env":
        assert load_settings(path).operators[0].token == "written-in-the-file"


def test_settings_shipped_config_has_no_operator_token_of_its_own(monkeypatch):
    """Without OPERATOR_TOKEN the demo operator is disabled: no known token opens the console."""
    from gateway.operators.auth import OperatorAuth

    monkeypatch.delenv("OPERATOR_TOKEN", raising=False)
    settings = load_settings(ROOT / "config.yaml")
    assert settings.operators[0].token == ""
    assert OperatorAuth(settings).authenticate("Bearer dev-operator-token") is None
    assert OperatorAuth(settings).disabled == ["demo-operator"]  # `serve` logs it as disabled
    monkeypatch.setenv("OPERATOR_TOKEN", "dev-operator-token")  # what `make run` sets for the local demo
    assert OperatorAuth(load_settings(ROOT / "config.yaml")).authenticate("Bearer dev-operator-token") is not None


def test_settings_cli_exits_nonzero_with_message(tmp_path):
    path = _write(tmp_path, {"bots": [{"name": "b", "model": "missing-model"}]})
    proc = subprocess.run([sys.executable, "-m", "gateway", "ingest-runs", "--config", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert "bots[0].model" in proc.stderr and "unknown model 'missing-model'" in proc.stderr


@pytest.mark.parametrize("url, words", [
    ("${UNSET_DATABASE_URL_VAR}", "is empty"),
    ("foo://bar", "unsupported database driver 'foo'"),
    ("mysql://u@h/db", "unsupported database driver 'mysql'"),
    ("not a url", "not a database URL"),
])
def test_settings_bad_database_url_is_a_config_error(tmp_path, monkeypatch, url, words):
    monkeypatch.delenv("UNSET_DATABASE_URL_VAR", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, {"database_url": url}))
    assert info.value.key == "database_url" and words in str(info.value)


@pytest.mark.parametrize("url", ["sqlite:///var/a.db", "sqlite+aiosqlite:///var/a.db", "postgresql://u@h/db",
                                 "postgres://u@h/db", "postgresql+psycopg2://u@h/db", "postgresql+asyncpg://u:p@h/db"])
def test_settings_database_url_accepts_what_the_engine_drives(tmp_path, monkeypatch, url):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert load_settings(_write(tmp_path, {"database_url": url})).database_url == url


def test_settings_discord_public_key_must_be_64_hex_characters(tmp_path, monkeypatch):
    monkeypatch.setenv("DC_TOKEN", "discord-token-value")

    def config(public_key: str) -> Path:
        return _write(tmp_path, {"bots": [{"name": "b", "channels": {"discord": {
            "token": "${DC_TOKEN}", "public_key": public_key}}}]})

    for bad in ("zz", "ab" * 31, "g" * 64):
        with pytest.raises(ConfigError) as info:
            load_settings(config(bad))
        assert info.value.key == "bots[0].channels.discord.public_key" and "64 hex characters" in str(info.value)
    assert load_settings(config("aB" * 32)).bots[0].channels.discord.public_key == "aB" * 32


def test_settings_telegram_webhook_mode_needs_a_webhook_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_TOKEN", "123:abc")
    monkeypatch.delenv("UNSET_TG_SECRET", raising=False)

    def config(**telegram) -> Path:
        return _write(tmp_path, {"bots": [{"name": "b", "channels": {"telegram": {"token": "${TG_TOKEN}", **telegram}}}]})

    for telegram in ({}, {"mode": "webhook", "webhook_secret": "${UNSET_TG_SECRET}"}):
        with pytest.raises(ConfigError) as info:
            load_settings(config(**telegram))
        assert str(info.value).startswith("bots[0].channels: telegram.webhook_secret is required when telegram is "
                                          "enabled in webhook mode (write it as ${TELEGRAM_WEBHOOK_SECRET} and "
                                          "set that variable, or use mode: polling)")
        # Given as an unset ${VAR}: the variable is named.
        assert str(info.value).endswith("(${UNSET_TG_SECRET} is not set, so bots[0].channels.telegram.webhook_secret "
                                        "is empty)") == ("webhook_secret" in telegram)
    assert load_settings(config(mode="polling")).bots[0].channels.telegram.mode == "polling"
    assert load_settings(config(enabled=False)).bots[0].channels.telegram.enabled is False


def test_settings_model_info_reaches_the_litellm_router(tmp_path, monkeypatch):
    from gateway.llm import LLMRouter, model_list_from_settings

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    settings = load_settings(_write(tmp_path, {"models": [{
        "model_name": "main", "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": "http://127.0.0.1:9/v1"},
        "model_info": {"id": "main-1", "base_model": "gpt-4o-mini"}}]}))
    assert model_list_from_settings(settings)[0]["model_info"] == {"id": "main-1", "base_model": "gpt-4o-mini"}
    deployment = LLMRouter.from_settings(settings)._router.registry().deployment("main-1")
    assert deployment.model_name == "main" and deployment.model_info.base_model == "gpt-4o-mini"


def test_settings_a_yaml_syntax_error_is_one_line_with_its_place(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("bots: [\n  - name: x\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == (f"{path} is not valid YAML: expected the node content, but found '-' at line 2, "
                               "column 3 (while parsing a flow node)")


def test_settings_a_model_litellm_refuses_is_a_config_error_when_the_router_is_built(tmp_path, monkeypatch):
    from gateway.llm import LLMRouter

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    settings = load_settings(_write(tmp_path, {"models": [
        {"model_name": "m", "litellm_params": {"model": "openai/x", "rpm": "many"}}]}))
    with pytest.raises(ConfigError) as info:
        LLMRouter.from_settings(settings)
    assert info.value.key == "models" and "LiteLLM refused the model list: ValidationError" in str(info.value)
    assert "\n" not in str(info.value)


def test_settings_a_model_timeout_from_a_variable_is_read_as_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_TIMEOUT", "2.5")
    settings = load_settings(_write(tmp_path, {"models": [
        {"model_name": "m", "litellm_params": {"model": "openai/x", "timeout": "${LLM_TIMEOUT}"}},
        {"model_name": "n", "litellm_params": {"model": "openai/y", "timeout": 30, "stream_timeout": None}}]}))
    assert [m.litellm_params.get("timeout") for m in settings.models] == [2.5, 30.0]


def test_settings_environment_overrides_only_the_documented_keys(tmp_path, monkeypatch):
    """A stray `WORKER=1` or `BOTS=[]` from a process manager leaves a correct file as it is."""
    for name, value in {"BOTS": "[]", "WORKER": "1", "bots": "[]", "QDRANT": "{}", "CONFIG_PATH": "/elsewhere.yaml",
                        "MODELS": "not json", "LOG_LEVEL": "DEBUG", "LOG_FORMAT": "json"}.items():
        monkeypatch.setenv(name, value)
    path = _write(tmp_path, {"bots": [{"name": "b", "system_prompt": "Hi ${WHO:-there}"}],
                             "worker": {"concurrency": 3}, "log_level": "WARNING"})
    settings = load_settings(path)
    assert [b.name for b in settings.bots] == ["b"] and settings.bots[0].system_prompt == "Hi there"
    assert settings.worker.concurrency == 3 and settings.config_path == str(path)
    assert (settings.log_level, settings.log_format) == ("DEBUG", "json")


def test_settings_ingest_fingerprint_follows_what_an_ingest_uses(tmp_path, monkeypatch):
    monkeypatch.setenv("OP_TOKEN", "first-token-7f3a")
    source = {"name": "s", "type": "directory", "path": "docs"}
    data = {"bots": [{"name": "b", "sources": [source]}], "operators": [{"name": "o", "token": "${OP_TOKEN}", "bots": ["*"]}]}
    first = load_settings(_write(tmp_path, data)).ingest_fingerprint()
    assert len(first) == 64 and "first-token" not in first
    # What an ingest does not use: the environment's log level, another operator token, a prompt.
    monkeypatch.setenv("OP_TOKEN", "second-token-9c2e")
    monkeypatch.setenv("LOG_LEVEL", "DEBUG")
    data["bots"][0]["system_prompt"] = "Be brief."
    assert load_settings(_write(tmp_path, data)).ingest_fingerprint() == first
    source["schedule"] = "*/5 * * * *"  # when the server runs it, not what a run does
    assert load_settings(_write(tmp_path, data)).ingest_fingerprint() == first
    # What it does use: the sources, the embedding settings.
    data["bots"][0]["sources"].append({"name": "t", "type": "urls", "urls": ["http://example.test/a"]})
    second = load_settings(_write(tmp_path, data)).ingest_fingerprint()
    assert second != first
    data["embedding"] = {"chunk_text_tokens": 256}
    assert load_settings(_write(tmp_path, data)).ingest_fingerprint() not in (first, second)


def test_a_gate_bar_left_at_its_minilm_default_under_another_model_is_warned_about(tmp_path):
    from gateway.preflight import uncalibrated_gates

    bots = [{"name": "plain"}, {"name": "tuned", "retrieval": {"min_dense_score": 0.8}},
            {"name": "k-only", "retrieval": {"k": 3}}]
    data = {"embedding": {"model": "BAAI/bge-small-en-v1.5"}, "bots": bots}
    settings = load_settings(_write(tmp_path, data))
    warnings = uncalibrated_gates(settings)
    assert [w.split("'")[1] for w in warnings] == ["plain", "k-only"]  # "tuned" set its own bar
    assert "BAAI/bge-small-en-v1.5" in warnings[0] and "gateway eval" in warnings[0]
    assert uncalibrated_gates(settings, settings.bots[1:2]) == []
    data["embedding"] = {}  # the model the bar was calibrated for
    assert uncalibrated_gates(load_settings(_write(tmp_path, data))) == []


async def test_serve_logs_each_bot_whose_gate_bar_another_model_leaves_uncalibrated(tmp_path):
    import asyncio

    import structlog

    from gateway.app import create_app
    from tests.conftest import upgrade, write_config

    bots = [{"name": "acme"}, {"name": "tuned", "retrieval": {"min_dense_score": 0.8}}]
    settings = load_settings(write_config(tmp_path, bots=bots, embedding={"model": "litellm/openai/any-embed"}))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_worker=False, start_scheduler=False, start_channels=False)
    with structlog.testing.capture_logs() as logs:
        async with app.router.lifespan_context(app):
            pass
    warned = [entry["reason"] for entry in logs if entry["event"] == "gate1.uncalibrated"]
    assert len(warned) == 1 and warned[0].startswith("bot 'acme': gate 1's retrieval.min_dense_score 0.46")


@pytest.mark.parametrize("url", ["not a url", "qdrant:6333", "ftp://qdrant:6333", "http://"])
def test_a_qdrant_url_the_client_cannot_read_is_a_config_error_naming_the_key(tmp_path, url):
    """It loaded, then `ingest` ended in urllib3's traceback and `serve` in "Application startup failed"."""
    with pytest.raises(ConfigError, match=r"^qdrant\.url: .* is not an http\(s\) URL with a host"):
        load_settings(_write(tmp_path, {"qdrant": {"url": url}}))


@pytest.mark.parametrize("url, kept", [("http://qdrant:6333", "http://qdrant:6333"), (" https://q.example.com ",
                                       "https://q.example.com"), ("localhost:6333", "localhost:6333"), ("", None)])
def test_qdrant_urls_the_client_reads_are_kept_and_an_empty_one_means_local_mode(tmp_path, url, kept):
    settings = load_settings(_write(tmp_path, {"qdrant": {"url": url}}))
    assert settings.qdrant.url == kept and settings.qdrant.path == "var/qdrant"


def test_settings_a_missing_required_channel_key_says_where_to_set_it_only_for_a_secret(tmp_path, monkeypatch):
    """A missing public_url's error suggests no ${VAR}: a URL is no secret, and may be written in config.yaml."""
    monkeypatch.setenv("WA_SID", "AC" + "0" * 32)
    monkeypatch.setenv("WA_TOKEN", "twilio-auth-token-1234")
    whatsapp = {"account_sid": "${WA_SID}", "auth_token": "${WA_TOKEN}", "from_number": "whatsapp:+15550001111"}
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, {"bots": [{"name": "b", "channels": {"whatsapp": whatsapp}}]}))
    assert str(info.value) == "bots[0].channels: whatsapp.public_url is required when whatsapp is enabled"
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, {"bots": [{"name": "b", "channels": {"whatsapp": {
            **whatsapp, "auth_token": "", "public_url": "https://bots.example.com"}}}]}))
    assert str(info.value).startswith("bots[0].channels: whatsapp.auth_token is required when whatsapp is enabled "
                                      "(write it as ${TWILIO_AUTH_TOKEN} and set that variable)")

