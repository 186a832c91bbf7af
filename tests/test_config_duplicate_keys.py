"""A key written twice in one mapping of config.yaml is a config error: YAML keeps the last one silently."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.test_cli import ROOT, _run


def test_config_a_second_top_level_key_appended_to_the_shipped_config_is_refused_before_ingest(tmp_path):
    # README's "Plugging in a real LLM" snippet appended as it is: its `bots:` replaced the sample bot, and
    # the next `gateway ingest` deleted the help center's chunks as "no longer in the config".
    config = tmp_path / "config.yaml"
    shipped = (ROOT / "config.yaml").read_text().replace("var/", f"{tmp_path}/")  # not the repository's index
    assert f"{tmp_path}/gateway.db" in shipped and f"{tmp_path}/qdrant" in shipped
    config.write_text(shipped + "models:\n  - model_name: main\n    litellm_params: {model: openai/gpt-4o-mini}\n"
                                "bots:\n  - name: acme\n    model: main\n")
    lines = shipped.splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("models:"))
    proc = _run("ingest", "--config", str(config))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"config error: models: duplicate key, at lines {first} and {len(lines) + 1} of {config}; YAML would keep "
        "only the last one, so write it once"]


@pytest.mark.parametrize("text, key, lines", [
    ("bots:\n  - name: a\n    tools:\n      - name: t\n        type: builtin\n        type: python\n",
     "bots[0].tools[0].type", (5, 6)),
    ("llm:\n  timeout: 5\n  num_retries: 1\n  timeout: 50\n", "llm.timeout", (2, 4)),
    ("bots:\n  - {name: a, name: b}\n", "bots[0].name", (2, 2)),
])
def test_config_a_duplicate_key_at_any_depth_names_its_path_and_lines(tmp_path, text, key, lines):
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert caught.value.key == key
    assert caught.value.problem.startswith(f"duplicate key, at lines {lines[0]} and {lines[1]} of {config}")


def test_config_a_merge_key_may_be_overridden_and_an_alias_reused(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("llm: &llm\n  timeout: 5\nworker:\n  lease_seconds: 9\n"
                      "bots:\n  - &bot {name: a, retrieval: &r {k: 3}}\n  - {<<: *bot, name: b, retrieval: *r}\n")
    settings = load_settings(config)
    assert [(b.name, b.retrieval.k) for b in settings.bots] == [("a", 3), ("b", 3)]
