"""A secret written in the clear: the error names the variable to write, as a missing secret's does."""

from __future__ import annotations

import pytest
import yaml

from gateway.errors import ConfigError
from gateway.settings import load_settings


@pytest.mark.parametrize("channel, key, value, var", [
    ("slack", "bot_token", "xoxb-1-abc", "${SLACK_BOT_TOKEN}"),
    ("slack", "signing_secret", "0123abcd", "${SLACK_SIGNING_SECRET}"),
    ("telegram", "token", "123:abc", "${TELEGRAM_BOT_TOKEN}"),
    ("whatsapp", "auth_token", "abc", "${TWILIO_AUTH_TOKEN}"),
])
def test_literal_channel_secret_names_the_variable_to_write(tmp_path, channel, key, value, var):
    # It said `write it as ${SOME_ENV_VAR}`, where a missing one says `write it as ${SLACK_BOT_TOKEN}`:
    # a placeholder to rename, and not the name README's examples (and the other hint) use.
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"bots": [{"name": "b", "channels": {channel: {key: value}}}]}))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value) == (f"bots[0].channels.{channel}.{key}: secrets come from the environment only; "
                                 f"write it as {var} and set that variable")
    assert value not in str(caught.value)


def test_literal_secret_elsewhere_keeps_the_generic_hint(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"operators": [{"name": "sam", "token": "t0ken", "bots": ["*"]}]}))
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert str(caught.value).endswith("secrets come from the environment only; write it as ${SOME_ENV_VAR}")
