"""A bad value that an environment override (DATABASE_URL, ENVIRONMENT, …) gave says it came from there."""

from __future__ import annotations

import pytest

from gateway.errors import ConfigError
from gateway.settings import load_settings
from tests.conftest import write_config


@pytest.mark.parametrize("name, value, key", [
    ("ENVIRONMENT", "prod", "environment"),  # was "environment: Input should be …", of a file without the key
    ("DATABASE_URL", "mysql://db/gateway", "database_url"),
    ("log_format", "xml", "log_format"),
])
def test_a_bad_override_from_the_environment_names_its_variable(tmp_path, monkeypatch, name, value, key):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path))
    assert caught.value.key == key
    assert str(caught.value).endswith(f"(from the environment variable {name}, which overrides the file)")


def test_a_bad_value_in_the_file_names_no_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(ConfigError) as caught:
        load_settings(write_config(tmp_path, database_url="mysql://db/gateway"))
    assert "environment variable" not in str(caught.value)
