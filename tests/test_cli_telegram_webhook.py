"""`gateway telegram set-webhook` told without a traceback what to fix in the config."""

from __future__ import annotations

from gateway.cli import main
from tests.conftest import write_config


def test_cli_set_webhook_on_a_bot_without_telegram_says_how_to_add_it(tmp_path, capsys):
    # It said only "bot 'acme' has no telegram channel": which file, and which keys, were left to find.
    config = write_config(tmp_path)
    assert main(["telegram", "set-webhook", "--config", str(config), "--bot", "acme",
                 "--url", "https://bots.example.com"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: bot 'acme' has no telegram channel: add `channels.telegram` to it in "
                               f"{config}"), lines[0]
    assert "token: ${TELEGRAM_BOT_TOKEN}" in lines[0] and "webhook_secret: ${TELEGRAM_WEBHOOK_SECRET}" in lines[0]
