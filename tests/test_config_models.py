"""A bot's `model` names an entry of `models:`; when it names none, the error shows one that loads."""

from __future__ import annotations

import pytest
import yaml

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


def test_an_unknown_model_error_shows_a_models_entry_that_loads(tmp_path, monkeypatch):
    # `model: gpt-4o-mini` (LiteLLM's own name) was "unknown model …; known: offline", with no word on
    # the `models:` entry a bot's model must name.
    monkeypatch.setenv("YOUR_KEY", "sk-test")
    with pytest.raises(ConfigError) as info:
        load_settings(write_config(tmp_path, bots=[{"name": "b", "model": "gpt-4o-mini"}]))
    shown = str(info.value).split(" as ", 1)[1].removesuffix(")")
    entry = yaml.safe_load(shown.replace("<provider>/<model>", "openai/gpt-4o-mini"))
    settings = load_settings(write_config(tmp_path, models=[entry], bots=[{"name": "b", "model": "gpt-4o-mini"}]))
    assert settings.models[0].litellm_params["api_key"] == "sk-test"
