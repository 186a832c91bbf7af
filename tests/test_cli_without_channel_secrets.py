"""`db upgrade` and `forget` use no channel: on a deploy box without SLACK_BOT_TOKEN and the others they refused
with a config error ("slack.bot_token is required when slack is enabled") before doing anything."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, write_config

SECRETS = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET")
CHANNELS = {"web": {}, "slack": {"bot_token": "${SLACK_BOT_TOKEN}", "signing_secret": "${SLACK_SIGNING_SECRET}",
                                 "operator_channel": "C0OPS"},
            "telegram": {"token": "${TELEGRAM_BOT_TOKEN}", "webhook_secret": "${TELEGRAM_WEBHOOK_SECRET}"}}


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    full_env.update({"HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env})
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("environment", ["development", "production"])
def test_db_upgrade_and_forget_run_without_the_channel_secrets(tmp_path, environment):
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": CHANNELS}], environment=environment)
    upgrade = _run("db", "upgrade", "--config", str(config))
    assert upgrade.returncode == 0, upgrade.stderr
    assert "database was created at the latest migration" in upgrade.stdout
    forget = _run("forget", "--channel", "telegram", "--user", "42", "--json", "--config", str(config))
    assert forget.returncode == 0, forget.stderr
    assert "config error" not in forget.stderr


def test_serve_still_names_the_missing_channel_secret(tmp_path):
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": CHANNELS}])
    proc = _run("chat", "--config", str(config))
    assert proc.returncode == 2
    assert proc.stderr.startswith("config error: ") and "is required when" in proc.stderr


def _escalated(tmp_path) -> None:
    """Telegram user 42's conversation with acme, escalated to the thread 1700000000.000100 in C0OPS."""
    import asyncio

    from sqlalchemy import update

    from storage.engine import create_engine, session_factory
    from storage.models import Escalation
    from tests.scale.test_retention import _store

    async def escalated() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}")
        try:
            sessions = session_factory(engine)
            conversation = await _store(sessions, bot="acme", channel="telegram", user="42", chat="42")
            async with sessions() as session, session.begin():
                await session.execute(update(Escalation).where(Escalation.conversation_id == conversation).values(
                    slack_channel="C0OPS", slack_ts="1700000000.000100"))
        finally:
            await engine.dispose()

    asyncio.run(escalated())


def test_forget_without_the_slack_token_names_it_for_the_operator_threads(tmp_path):
    """Forget's database part needs no secret; deleting the gateway's posts in the Slack operator channel needs the
    bot's Slack bot token, and the warning said only "the bot has no Slack token in the config"."""
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": CHANNELS}])
    assert _run("db", "upgrade", "--config", str(config)).returncode == 0
    _escalated(tmp_path)
    forget = _run("forget", "--channel", "telegram", "--user", "42", "--config", str(config))
    assert forget.returncode == 1, forget.stderr  # not done: the posts are still in Slack
    assert forget.stdout.startswith("deleted 1 contact, 1 conversation, 3 messages, 1 escalation")
    assert ("warning: Slack operator thread 1700000000.000100 (bot acme, channel C0OPS) was not deleted: deleting "
            "the gateway's posts in the Slack operator channel needs bot acme's slack.bot_token, and "
            "${SLACK_BOT_TOKEN} is unset;") in forget.stderr


def test_forget_in_production_with_placeholder_channel_secrets_erases_the_rows_and_names_the_slack_thread(tmp_path):
    """A deploy box's .env still holding SLACK_BOT_TOKEN=changeme refused forget ("placeholder secret refused in
    production", exit 2, nothing erased), though its database part needs no channel secret. The rows go; the
    thread in Slack, which a placeholder cannot reach, is named as not deleted (and the placeholder never sent)."""
    from sqlalchemy import create_engine as sync_engine
    from sqlalchemy import text

    config = write_config(tmp_path, bots=[{"name": "acme", "channels": CHANNELS}], environment="production")
    placeholders = dict.fromkeys(SECRETS, "changeme")
    assert _run("db", "upgrade", "--config", str(config), **placeholders).returncode == 0
    _escalated(tmp_path)
    forget = _run("forget", "--channel", "telegram", "--user", "42", "--config", str(config), **placeholders)
    assert "placeholder secret refused" not in forget.stderr
    assert forget.returncode == 1, forget.stderr  # not done: the posts are still in Slack
    assert forget.stdout.startswith("deleted 1 contact, 1 conversation, 3 messages, 1 escalation")
    assert ("warning: Slack operator thread 1700000000.000100 (bot acme, channel C0OPS) was not deleted: deleting "
            "the gateway's posts in the Slack operator channel needs bot acme's slack.bot_token, and "
            "${SLACK_BOT_TOKEN} is a placeholder (changeme) refused in production;") in forget.stderr
    engine = sync_engine(f"sqlite:///{tmp_path / 'gateway.db'}")
    try:
        with engine.connect() as db:
            assert db.execute(text("SELECT count(*) FROM contacts")).scalar_one() == 0
            assert db.execute(text("SELECT count(*) FROM messages")).scalar_one() == 0
    finally:
        engine.dispose()
    # serve, which does use the channels, still refuses the placeholder.
    chat = _run("chat", "--config", str(config), **placeholders)
    assert chat.returncode == 2 and "placeholder secret refused in production" in chat.stderr
