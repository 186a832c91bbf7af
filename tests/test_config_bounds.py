"""Numbers that made no sense loaded, and then failed or surprised at run time: now config errors."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


@pytest.mark.parametrize(("bot", "key"), [
    ({"channels": {"web": {"max_message_chars": 0}}}, "max_message_chars"),  # every web message was a 413
    ({"channels": {"web": {}}, "escalation": {"max_unanswered_turns": -1}}, "max_unanswered_turns"),
])
def test_a_limit_below_its_floor_is_a_config_error_naming_the_key(tmp_path, bot, key):
    config = write_config(tmp_path, bots=[{"name": "acme", **bot}])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert key in str(caught.value) and "greater than or equal" in str(caught.value)


def test_max_unanswered_turns_0_loads_as_never_by_count(tmp_path):
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}},
                                           "escalation": {"max_unanswered_turns": 0}}])
    assert load_settings(config).bots[0].escalation.max_unanswered_turns == 0


def test_a_qdrant_timeout_under_a_second_is_refused(tmp_path):
    """qdrant-client takes whole seconds: 0.5 became 0, and every request to the server timed out at once."""
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, qdrant={"url": "http://127.0.0.1:6333", "timeout": 0.5}))
    assert str(caught.value).startswith("qdrant.timeout: ") and "greater than or equal to 1" in str(caught.value)
    assert load_settings(write_config(tmp_path, qdrant={"url": "http://127.0.0.1:6333", "timeout": 1.5})).qdrant.timeout == 1.5
