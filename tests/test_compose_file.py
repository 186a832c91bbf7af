"""docker-compose.yml, read as a first install reads it: its inline gateway config and its images.

There is no Docker engine here, so the file is checked by parsing it, not by running it."""

from __future__ import annotations

import importlib.metadata

import yaml
from qdrant_client.common.version_check import is_compatible

from gateway.settings import load_settings
from tests.conftest import ROOT


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _inline_config(tmp_path, monkeypatch, **env: str):
    """The gateway's config as the container reads it: Compose turns `$$` into `$`, then the gateway
    fills each `${VAR}` from the container's environment."""
    compose = _compose()
    text = compose["configs"]["gateway_config"]["content"].replace("$$", "$")
    path = tmp_path / "config.yaml"
    path.write_text(text)
    container_env = {"DATABASE_URL": "sqlite+aiosqlite:///var/gateway.db", "REDIS_URL": "redis://redis:6379/0"}
    for name, value in {**container_env, **env}.items():
        monkeypatch.setenv(name, value)
    return load_settings(path)


def test_the_qdrant_image_is_one_the_locked_client_supports():
    # qdrant/qdrant:v1.15.0 beside qdrant-client 1.20: every start logged qdrant.server_check_failed,
    # "upgrade one of them", for the file as shipped.
    image = _compose()["services"]["qdrant"]["image"]
    tag = image.rsplit(":", 1)[1].removeprefix("v")
    assert is_compatible(importlib.metadata.version("qdrant-client"), tag), image


def test_the_operator_token_compose_passes_on_signs_an_operator_in(tmp_path, monkeypatch):
    # The service passed OPERATOR_TOKEN to a config without operators: /operator refused every token.
    assert "OPERATOR_TOKEN" in _compose()["services"]["gateway"]["environment"]
    settings = _inline_config(tmp_path, monkeypatch, OPERATOR_TOKEN="a-token-of-24-characters")
    assert [(op.token, op.bots) for op in settings.operators] == [("a-token-of-24-characters", ["*"])]
    assert settings.qdrant.url == "http://qdrant:6333" and settings.qdrant.path is None
