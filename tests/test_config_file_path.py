"""The config file itself: one that is missing, a folder, unreadable or not UTF-8 is one `config error:` line
that says where it was looked for, never a traceback."""

from __future__ import annotations

import pytest

from gateway.cli import main
from gateway.errors import ConfigError
from gateway.settings import load_settings


def test_a_missing_default_config_names_its_full_path_and_how_to_give_another(tmp_path, monkeypatch):
    # Run from another folder, it said only "config file not found: config.yaml".
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == (f"config file not found: config.yaml ({tmp_path / 'config.yaml'}, relative to the "
                               "working directory; give --config FILE or set GATEWAY_CONFIG)")


def test_a_missing_config_from_the_environment_says_it_came_from_there(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "gw.yaml"))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == f"config file not found: {tmp_path / 'gw.yaml'} (from $GATEWAY_CONFIG)"


def test_a_config_path_that_is_a_folder_is_one_config_error_line(tmp_path, capsys):
    # `--config .` ended in IsADirectoryError's traceback, exit 1.
    assert main(["ingest-runs", "--config", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"config error: {tmp_path} is a folder, not a config file: give the file, "
                                       f"as {tmp_path / 'config.yaml'}\n")


def test_a_config_file_that_is_not_utf8_is_one_config_error_line(tmp_path, capsys):
    # A file saved as UTF-16 (Windows PowerShell's `>`) ended in UnicodeDecodeError's traceback, exit 1.
    path = tmp_path / "config.yaml"
    path.write_text("bots: []\n", encoding="utf-16")
    assert main(["ingest-runs", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (f"config error: {path} is not UTF-8 text (byte 0xff at position 0): "
                                       "save it as UTF-8\n")


def test_a_config_nested_past_what_the_yaml_reader_follows_is_one_config_error_line(tmp_path, capsys):
    # PyYAML recurses once per level: a file of a few hundred `[` ended in RecursionError's traceback, exit 1.
    path = tmp_path / "config.yaml"
    path.write_text("[" * 5000 + "\n", encoding="utf-8")
    assert main(["ingest-runs", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (f"config error: {path} is not valid YAML: it is nested too deeply to read "
                                       "(hundreds of levels of lists or mappings)\n")


@pytest.mark.parametrize("text", ["[]", "false", "0", "''"])
def test_an_empty_list_or_a_falsy_scalar_at_the_top_is_refused_as_a_list_or_scalar_is(tmp_path, capsys, text):
    # `[1]` was refused ("must hold a mapping"), while `[]`, `false`, `0` or `''` were read as an empty mapping:
    # a config of no bots, started without a word.
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    assert main(["ingest-runs", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"config error: {path} must hold a mapping at the top level\n"
