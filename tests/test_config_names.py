"""A bot's name is checked when the config loads, with a message that says what a name may hold."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


@pytest.mark.parametrize("name", ["Acme", "acme support", "-acme", "a" * 64])
def test_a_bot_name_that_cannot_be_a_url_segment_says_what_a_name_is(tmp_path, name):
    # It was "String should match pattern '^[a-z0-9][a-z0-9_-]{0,62}$'".
    config = write_config(tmp_path, bots=[{"name": name, "channels": {"web": {}}}])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value) == (f"bots[0].name: {name!r} is not a bot name: 1-63 lower-case letters, digits, _ or "
                                 "-, starting with a letter or digit (it is part of the bot's URLs)")


@pytest.mark.parametrize("name", ["acme", "a", "acme_2-eu", "a" * 63])
def test_a_lower_case_bot_name_loads(tmp_path, name):
    config = write_config(tmp_path, bots=[{"name": name, "channels": {"web": {}}}])
    assert load_settings(config).bots[0].name == name
