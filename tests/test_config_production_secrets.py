"""Secrets we choose ourselves (not a platform) must be long enough in production to be guessed by no one."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


def _telegram_bot(secret_env: str = "${TG_SECRET}") -> dict:
    return {"name": "acme", "channels": {"telegram": {"token": "${TG_TOKEN}", "webhook_secret": secret_env}}}


@pytest.mark.parametrize("secret", ["abc", "q8w9e0-tg_7"])
def test_a_short_telegram_webhook_secret_is_refused_in_production(tmp_path, monkeypatch, secret):
    """The header Telegram sends back is the webhook's only proof: a short one is found by trying, no limit
    on tries, and then any update is stored as from any Telegram user, the identity tools authorize on."""
    monkeypatch.setenv("TG_TOKEN", "723738643:AAH-production-token")
    monkeypatch.setenv("TG_SECRET", secret)
    config = write_config(tmp_path, bots=[_telegram_bot()], environment="production")
    with pytest.raises(ConfigError, match=r"webhook_secret: shorter than 16 characters in production"):
        load_settings(config)


def test_a_long_telegram_webhook_secret_loads_in_production_and_a_short_one_in_development(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_TOKEN", "723738643:AAH-production-token")
    monkeypatch.setenv("TG_SECRET", "9f2c4e7a1b3d5f60a8c2e4f6")
    production = load_settings(write_config(tmp_path, bots=[_telegram_bot()], environment="production"))
    assert production.bots[0].channels.telegram.webhook_secret == "9f2c4e7a1b3d5f60a8c2e4f6"
    monkeypatch.setenv("TG_SECRET", "abc")
    development = load_settings(write_config(tmp_path, bots=[_telegram_bot()]))
    assert development.bots[0].channels.telegram.webhook_secret == "abc"


def test_telegram_in_polling_mode_needs_no_webhook_secret_in_production(tmp_path, monkeypatch):
    """Polling asks Telegram for updates, so no request ever carries the secret: README says it is not needed,
    and production must not refuse it as an empty secret (webhook mode still does)."""
    monkeypatch.setenv("TG_TOKEN", "723738643:AAH-production-token")
    polling = {"name": "acme", "channels": {"telegram": {"token": "${TG_TOKEN}", "mode": "polling"}}}
    settings = load_settings(write_config(tmp_path, bots=[polling], environment="production"))
    assert settings.bots[0].channels.telegram.mode == "polling"
    webhook = {"name": "acme", "channels": {"telegram": {"token": "${TG_TOKEN}", "webhook_secret": ""}}}
    with pytest.raises(ConfigError, match=r"telegram.webhook_secret is required .* in webhook mode"):
        load_settings(write_config(tmp_path, bots=[webhook], environment="production"))
    # A short secret left in a polling channel's config guards nothing, so it is no reason to refuse the file.
    monkeypatch.setenv("TG_SECRET", "abc")
    polling["channels"]["telegram"]["webhook_secret"] = "${TG_SECRET}"
    assert load_settings(write_config(tmp_path, bots=[polling], environment="production")).bots[0].name == "acme"
    monkeypatch.setenv("TG_SECRET", "changeme")  # nor is a placeholder
    assert load_settings(write_config(tmp_path, bots=[polling], environment="production")).bots[0].name == "acme"
