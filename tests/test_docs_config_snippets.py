"""Every config snippet in the README and the docs loads with the real loader, as a user who copies it gets it.

docs/operators.md showed `slack: {bot_token: ..., signing_secret: ...}`: copied, the loader refused `...` as a
secret written in the file. Each ```yaml block is read, put where it goes in a config (a whole file's keys
at the top; a bot's keys, `sources:` or `tools:`, in a bot; a channel's under `channels:`) and loaded with
the `${VAR}`s it names set. A channel's block of a few keys alone (`whatsapp: {api_base: …}`) adds to the
snippet before it in its file, as its text says.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import yaml

from gateway.bot_settings import BotSettings
from gateway.channel_settings import ChannelsSettings
from gateway.settings import Settings, load_settings
from tests.conftest import ROOT, write_config

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "examples" / "README.md"]
_BLOCK = re.compile(r"^( *)```ya?ml\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}")

# What the variables the snippets name hold in a real deployment, in the form each key takes.
_VALUES = {
    "DISCORD_PUBLIC_KEY": "ab" * 32,
    "PUBLIC_URL": "https://bots.example.com",
    "TWILIO_ACCOUNT_SID": "AC" + "0" * 32,
    "TWILIO_WHATSAPP_FROM": "+14155238886",
    "TWILIO_CONTENT_SID": "HX" + "0" * 32,
}


def _snippets() -> list[tuple[str, str]]:
    """(file:line, text) of every yaml block, dedented."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", textwrap.dedent(match.group(2))))
    return found


SNIPPETS = _snippets()


def _level(snippet: dict) -> str:
    """Where a snippet's keys go: `file`, `bot` or `channels` (no key is of two levels)."""
    for level, keys in (("file", Settings.model_fields), ("bot", BotSettings.model_fields),
                        ("channels", ChannelsSettings.model_fields)):
        if set(snippet) <= set(keys):
            return level
    raise AssertionError(f"keys {sorted(snippet)} are no config's")


def _merged(base: dict, extra: dict) -> dict:
    return {**base, **{k: _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
                       for k, v in extra.items()}}


def _configs() -> dict[str, dict]:
    """file:line -> the config file's keys a user who copies the snippet there has."""
    configs: dict[str, dict] = {}
    whole: dict[str, dict] = {}  # file -> the config of its last snippet that was no channel's few keys
    for where, text in SNIPPETS:
        snippet, file = yaml.safe_load(text), where.split(":")[0]
        level, bot = _level(snippet), {"name": "acme"}
        if level == "channels" and file in whole:  # a few keys of a channel the snippet before configures
            bot = whole[file]["bots"][0]
            configs[where] = {"bots": [{**bot, "channels": _merged(bot.get("channels") or {}, snippet)}]}
            continue
        config = ({"bots": [bot], **snippet} if level == "file" else
                  {"bots": [{**bot, **(snippet if level == "bot" else {"channels": snippet})}]})
        configs[where] = whole[file] = config
    return configs


CONFIGS = _configs()


def test_docs_have_config_snippets_to_check():
    assert len(SNIPPETS) >= 10 and any(w.startswith("docs/operators.md") for w, _ in SNIPPETS)


@pytest.mark.parametrize(("where", "text"), SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_docs_config_snippet_loads(where, text, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # its relative paths are the repository's (`examples/help-center`)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The README's python tool, as it shows it, for its `weather_tool:city_weather`.
    (tmp_path / "weather_tool.py").write_text(
        "from gateway.models import CallerIdentity\n\n\ndef city_weather(identity: CallerIdentity, city: str) -> dict:\n"
        '    """Today\'s weather in a city."""\n    return {"city": city, "sky": "clear"}\n')
    config = CONFIGS[where]
    for name in _VARIABLE.findall(yaml.safe_dump(config)):
        monkeypatch.setenv(name, _VALUES.get(name, f"{name.lower()}-value-0123456789"))
    path = write_config(tmp_path, **config)
    settings = load_settings(path)  # a refusal is the snippet's `config error: …`, which the failure shows
    assert [b.name for b in settings.bots] == [b["name"] for b in config["bots"]]
