"""`gateway telegram set-webhook` told without a traceback what to fix in the config."""

from __future__ import annotations

import asyncio

import pytest

from gateway.cli import main
from gateway.settings import load_settings
from tests.conftest import write_config
from tests.fakes.telegram_api import FakeTelegramAPI


def test_cli_set_webhook_on_a_bot_without_telegram_says_how_to_add_it(tmp_path, capsys):
    # It said only "bot 'acme' has no telegram channel": which file, and which keys, were left to find.
    config = write_config(tmp_path)
    assert main(["telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                 "--url", "https://bots.example.com"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: bot 'acme' has no telegram channel: add `channels.telegram` to it in "
                               f"{config}"), lines[0]
    assert "token: \"${TELEGRAM_BOT_TOKEN}\"" in lines[0] and "webhook_secret: \"${TELEGRAM_WEBHOOK_SECRET}\"" in lines[0]


def test_cli_set_webhook_suggests_a_telegram_channel_that_loads_as_written(tmp_path, capsys, monkeypatch):
    # It suggested `telegram: {token: ${TELEGRAM_BOT_TOKEN}, …}`, which, pasted under `channels:`, is not valid
    # YAML (a bare ${VAR} inside { } opens a mapping after the "$"): the next command failed on the file.
    config = write_config(tmp_path)
    assert main(["telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                 "--url", "https://bots.example.com"]) == 2
    suggested = capsys.readouterr().err.split("`")[3]
    assert suggested.startswith("telegram: {"), suggested
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123456:cli-test-token")
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", "s3cret-Value_1")
    config.write_text(f"bots:\n  - name: acme\n    channels:\n      {suggested}\n")
    telegram = load_settings(config).bot("acme").channels.telegram
    assert (telegram.token, telegram.webhook_secret) == ("123456:cli-test-token", "s3cret-Value_1")


@pytest.mark.parametrize(("telegram", "said"), [
    ({"mode": "polling"}, "is in `mode: polling` in {config}, which fetches the updates itself (a webhook would stop "
                          "it): set `mode: webhook`, with a `webhook_secret`, to receive them on a webhook"),
    ({"enabled": False, "webhook_secret": "${CLI_TG_SECRET}"},
     "is off (`enabled: false`) in {config}, so the gateway would refuse every update sent to the webhook: turn it on first"),
], ids=["polling", "disabled"])
def test_cli_set_webhook_on_a_telegram_channel_that_takes_no_webhook_says_why(tmp_path, capsys, monkeypatch,
                                                                              telegram, said):
    # A polling bot without a secret was told "telegram.webhook_secret: 1-256 characters … are required"; with one,
    # the webhook was registered, and Telegram refused the running server's polling from then on (409).
    monkeypatch.setenv("CLI_TG_TOKEN", "123456:cli-test-token")
    monkeypatch.setenv("CLI_TG_SECRET", "s3cret-Value_1")
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"telegram": {
        "token": "${CLI_TG_TOKEN}", "api_base": "http://127.0.0.1:9", **telegram}}}])
    assert main(["telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                 "--url", "https://bots.example.com"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: the telegram channel of bot 'acme' " + said.format(config=config)]


def _telegram_config(tmp_path, monkeypatch, api_base: str):
    monkeypatch.setenv("CLI_TG_TOKEN", "123456:cli-test-token")
    monkeypatch.setenv("CLI_TG_SECRET", "s3cret-Value_1")
    return write_config(tmp_path, bots=[{"name": "acme", "channels": {"telegram": {
        "token": "${CLI_TG_TOKEN}", "webhook_secret": "${CLI_TG_SECRET}", "api_base": api_base}}}])


@pytest.mark.parametrize("given", ["https://bots.example.com", "https://bots.example.com/",
                                   "https://bots.example.com/webhooks/acme/telegram"])
async def test_cli_set_webhook_takes_the_base_or_the_whole_webhook_url(tmp_path, capsys, monkeypatch, given):
    """The page shows the whole webhook URL first; given it, the command registered
    `…/webhooks/acme/telegram/webhooks/acme/telegram`, which Telegram took and the gateway answered 404."""
    async with FakeTelegramAPI("123456:cli-test-token") as fake:
        config = _telegram_config(tmp_path, monkeypatch, fake.base_url)
        code = await asyncio.to_thread(main, ["telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                                              "--url", given])
    assert code == 0, capsys.readouterr().err
    assert fake.webhook["url"] == "https://bots.example.com/webhooks/acme/telegram"
    assert capsys.readouterr().out.strip() == "webhook set: https://bots.example.com/webhooks/acme/telegram"


@pytest.mark.parametrize("given", ["bots.example.com", "https://bots.example.com/gw?x=1", "https:///gw",
                                   "ftp://bots.example.com"])
async def test_cli_set_webhook_refuses_a_url_that_is_no_public_base_url(tmp_path, capsys, monkeypatch, given):
    """`bots.example.com` was registered as `bots.example.com/webhooks/acme/telegram`, and a query as
    `…/gw?x=1/webhooks/acme/telegram`: a URL that cannot reach the gateway's route."""
    async with FakeTelegramAPI("123456:cli-test-token") as fake:
        config = _telegram_config(tmp_path, monkeypatch, fake.base_url)
        code = await asyncio.to_thread(main, ["telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                                              "--url", given])
    assert code == 2 and fake.webhook == {}
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --url {given!r} is not the gateway's public base URL: give an http(s) URL with a host and no "
        "query, as https://bots.example.com (the command adds /webhooks/acme/telegram)"]
