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
    ({"databse_url": "x"}, "databse_url", "unknown key"),
    ({"bots": [{"name": "b", "model": "gpt-9"}]}, "bots[0].model", "unknown model 'gpt-9'"),
    ({"bots": [{"name": "b", "fallbacks": ["nope"]}]}, "bots[0].fallbacks[0]", "unknown model 'nope'"),
    ({"bots": [{"name": "b", "sources": [{"name": "s", "type": "directory", "path": "x",
                                          "schedule": "61 * * * *"}]}]},
     "bots[0].sources[0].schedule", "bad cron"),
    ({"bots": [{"name": "b", "channels": {"telegram": {"token": "${UNSET_TOKEN_VAR}"}}}]},
     "bots[0].channels", "telegram.token is required"),
    ({"bots": [{"name": "b", "channels": {"slack": {"bot_token": "xoxb-literal", "signing_secret": "${X}"}}}]},
     "bots.channels.slack.bot_token", "environment only"),
    ({"bots": [{"name": "b"}, {"name": "b"}]}, "bots[1].name", "duplicate"),
])
def test_settings_bad_config_names_key(tmp_path, monkeypatch, data, key, words):
    monkeypatch.delenv("UNSET_TOKEN_VAR", raising=False)
    with pytest.raises(ConfigError) as info:
        load_settings(_write(tmp_path, data))
    assert info.value.key.replace("[0]", "") == key.replace("[0]", "") or info.value.key == key
    assert words in str(info.value)


def test_settings_production_refuses_placeholder_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("OP_TOKEN", "changeme")
    path = _write(tmp_path, {"environment": "production",
                             "operators": [{"name": "o", "token": "${OP_TOKEN}"}]})
    with pytest.raises(ConfigError, match="placeholder secret"):
        load_settings(path)


@pytest.mark.parametrize("environment", ["file", "env"])
def test_settings_production_refuses_a_secret_that_fell_back_to_its_default(tmp_path, monkeypatch, environment):
    """`${VAR:-literal}` would be a secret written in the file: a development convenience only."""
    monkeypatch.delenv("OP_TOKEN", raising=False)
    monkeypatch.delenv("ENVIRONMENT", raising=False)
    data = {"operators": [{"name": "o", "token": "${OP_TOKEN:-written-in-the-file}"}]}
    if environment == "file":
        data["environment"] = "production"
    else:
        monkeypatch.setenv("ENVIRONMENT", "production")
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert info.value.key == "operators[0].token" and "${OP_TOKEN} is not set" in str(info.value)
    monkeypatch.setenv("OP_TOKEN", "from-the-environment-7f3a")  # set: the default plays no part
    assert load_settings(path).operators[0].token == "from-the-environment-7f3a"
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
    monkeypatch.setenv("OPERATOR_TOKEN", "dev-operator-token")  # what `make run` sets for the local demo
    assert OperatorAuth(load_settings(ROOT / "config.yaml")).authenticate("Bearer dev-operator-token") is not None


def test_settings_cli_exits_nonzero_with_message(tmp_path):
    path = _write(tmp_path, {"bots": [{"name": "b", "model": "missing-model"}]})
    proc = subprocess.run([sys.executable, "-m", "gateway", "db", "upgrade", "--config", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert "bots[0].model" in proc.stderr and "unknown model 'missing-model'" in proc.stderr
