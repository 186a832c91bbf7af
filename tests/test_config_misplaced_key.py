"""A key written one level too high (a channel beside `channels:` rather than under it) names where it goes."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


@pytest.mark.parametrize(("bot", "said"), [
    ({"telegram": {"token": "${TG_TOKEN}"}}, "bots[0].telegram: unknown key; it goes under channels: (bots[0].channels.telegram)"),
    ({"k": 3}, "bots[0].k: unknown key; it goes under retrieval: (bots[0].retrieval.k)"),
])
def test_a_key_one_level_too_high_says_where_it_goes(tmp_path, bot, said):
    # It was "bots[0].telegram: unknown key", the slip of an indentation, with nothing to find it by.
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, **bot}])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value) == said


def test_a_misspelt_key_is_still_told_by_its_nearest_name(tmp_path):
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}, "sytem_prompt": "hi"}])
    with pytest.raises(ConfigError, match="did you mean system_prompt"):
        load_settings(config)


def test_a_key_of_a_list_item_is_not_said_to_go_under_the_list(tmp_path):
    config = write_config(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}], system_prompt="hi")
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value) == "system_prompt: unknown key"
