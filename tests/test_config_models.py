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


def test_a_model_without_a_provider_is_one_line_that_says_how_to_write_it(tmp_path, monkeypatch, capsys):
    # `model: gpt-4o-mni` (a typo, so no provider LiteLLM knows) printed LiteLLM's red "Provider List: …" banner on
    # stdout, then "config error: models: LiteLLM refused the model list: BadRequestError: litellm.BadRequestError:
    # LLM Provider NOT provided … For 'Huggingface' inference endpoints pass in `completion(model=…)`", naming
    # neither the entry nor the form a model is written in.
    from gateway.llm import LLMRouter
    from gateway.preflight import models_missing_keys

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("YOUR_KEY", "sk-test")
    settings = load_settings(write_config(tmp_path, models=[
        {"model_name": "main", "litellm_params": {"model": "openai/gpt-4o-mini", "api_key": "${YOUR_KEY}"}},
        {"model_name": "gpt", "litellm_params": {"model": "gpt-4o-mni", "api_key": "${YOUR_KEY}"}}],
        bots=[{"name": "b", "model": "gpt"}]))
    assert models_missing_keys(settings) == []
    with pytest.raises(ConfigError) as info:
        LLMRouter.from_settings(settings)
    assert str(info.value) == (
        "models[1].litellm_params.model: 'gpt-4o-mni' names no provider LiteLLM knows: write it as "
        "<provider>/<model>, as openai/gpt-4o-mini, anthropic/claude-3-5-haiku-latest or ollama/llama3 (the "
        "providers: https://docs.litellm.ai/docs/providers)")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("bot", "said"), [
    ({"name": "b", "fallbacks": "offline"}, "bots[0].fallbacks: Input should be a valid list; got 'offline': write "
                                            "a list, as [offline] (or one item a line, each starting with -)"),
    ({"name": "b", "sources": {"name": "s", "type": "urls", "urls": "http://docs.example.test/faq"}},
     "bots[0].sources: Input should be a valid list; got a mapping: write a list, its items each starting with -"),
    ({"name": "b", "sources": {"-name": "s", "type": "urls", "urls": ["http://docs.example.test/faq"]}},
     "bots[0].sources: Input should be a valid list; got a mapping: write a list, its items each starting with - "
     "and a space (- name, not -name)"),
], ids=["word", "mapping", "no-space-after-dash"])
def test_a_value_where_a_list_goes_says_how_to_write_the_list(tmp_path, bot, said):
    # `fallbacks: offline` was "Input should be a valid list", and a source written without its "- " the same.
    with pytest.raises(ConfigError) as info:
        load_settings(write_config(tmp_path, bots=[bot]))
    assert str(info.value) == said
