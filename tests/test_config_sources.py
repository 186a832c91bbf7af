"""Source names are checked when the config loads (review finding 5)."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


def _bot(*sources: dict) -> dict:
    return {"name": "alpha", "sources": list(sources), "channels": {"web": {}}}


def test_a_source_name_twice_in_one_bot_is_a_config_error_but_fine_across_bots(tmp_path):
    source = {"name": "s", "type": "directory", "path": str(tmp_path)}
    config = write_config(tmp_path, bots=[_bot(source), {**_bot(source), "name": "beta"}])
    assert [b.sources[0].name for b in load_settings(config).bots] == ["s", "s"]

    config = write_config(tmp_path, bots=[_bot(source, {"name": "s", "type": "urls", "urls": ["http://example.test/a"]})])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value) == ("bots[0].sources: bot 'alpha' has two sources named 's' (sources[0] and sources[1]); "
                                 "source names must be unique")


@pytest.mark.parametrize("name", ["", "x" * 129])
def test_an_empty_or_overlong_source_name_is_a_config_error(tmp_path, name):
    config = write_config(tmp_path, bots=[_bot({"name": name, "type": "directory", "path": str(tmp_path)})])
    with pytest.raises(ConfigError, match=r"^bots\[0\]\.sources\[0\]\.name: String should have at (least 1|most 128)"):
        load_settings(config)


@pytest.mark.parametrize("source, words", [
    ({"type": "urls", "urls": ["https://help.example.test/a", "not a url"]}, "'not a url' is not an http(s) URL"),
    ({"type": "urls", "urls": ["ftp://files.example.test/a"]}, "is not an http(s) URL"),
    ({"type": "urls", "urls": ["127.0.0.1:8765/x"]}, "is not an http(s) URL"),
    ({"type": "urls", "urls": ["http://"]}, "with a host"),
    ({"type": "sitemap", "url": "htp:/broken"}, "'htp:/broken' is not an http(s) URL"),
    ({"type": "sitemap", "url": "/var/www/sitemap.xml"}, "is not an http(s) URL"),
    ({"type": "directory", "path": "docs", "urls": ["https://a.test/x"]}, "`urls` is not read by a directory source"),
    ({"type": "urls", "urls": ["https://a.test/x"], "path": "docs"}, "`path` is not read by a urls source"),
])
def test_a_source_location_that_cannot_be_read_is_a_config_error(tmp_path, source, words):
    """These loaded before and then failed, or were ignored, on every run while `serve` looked fine."""
    config = write_config(tmp_path, bots=[_bot({"name": "s", **source})])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert caught.value.key == "bots[0].sources[0]" and words in str(caught.value)


def test_a_source_type_misspelt_is_named_with_what_was_written(tmp_path):
    """`type: dir` said only "Input should be 'directory', 'urls' or 'sitemap'", which left the reader
    to find which of a bot's sources held the wrong word."""
    config = write_config(tmp_path, bots=[_bot({"name": "s", "type": "dir", "path": str(tmp_path)})])
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert str(caught.value) == "bots[0].sources[0].type: Input should be 'directory', 'urls' or 'sitemap'; got 'dir'"


async def test_a_path_written_with_a_tilde_is_read_from_the_home_folder(tmp_path, monkeypatch):
    # `path: ~/docs` was read as a folder named "~" in the working directory: the source "not found" at
    # <repo>/~/docs, and `qdrant.path: ~/index` made a folder named "~" there (which `rm -rf ~` then reads as home).
    from rag.sources import load_source

    home = tmp_path / "home"
    (home / "docs").mkdir(parents=True)
    (home / "docs" / "hours.md").write_text("# Hours\n\nWe open at 9 and close at 17 on weekdays.\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, qdrant={"path": "~/index"},
                          bots=[_bot({"name": "s", "type": "directory", "path": "~/docs"})])
    settings = load_settings(config)
    assert settings.qdrant.path == str(home / "index")
    loaded = await load_source(settings.bots[0].sources[0])
    assert [doc.doc_id for doc in loaded.documents] == ["hours.md"] and not loaded.errors, loaded.errors
