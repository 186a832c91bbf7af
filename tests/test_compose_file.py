"""docker-compose.yml, read as a first install reads it: its inline gateway config and its images.

There is no Docker engine here, so the file is checked by parsing it, not by running it."""

from __future__ import annotations

import importlib.metadata

import yaml
from qdrant_client.common.version_check import is_compatible

from tests.conftest import ROOT


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_qdrant_image_is_one_the_locked_client_supports():
    # qdrant/qdrant:v1.15.0 beside qdrant-client 1.20: every start logged qdrant.server_check_failed,
    # "upgrade one of them", for the file as shipped.
    image = _compose()["services"]["qdrant"]["image"]
    tag = image.rsplit(":", 1)[1].removeprefix("v")
    assert is_compatible(importlib.metadata.version("qdrant-client"), tag), image
