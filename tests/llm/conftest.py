"""Fixtures for the LLM layer: a scripted OpenAI-compatible fake and routers pointed at it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# LiteLLM reads these at import; set them before any test module imports it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.fakes.provider_streams import FakeProviders  # noqa: E402


@pytest.fixture
def openai_fake() -> Iterator[FakeOpenAI]:
    """A fresh fake server on an ephemeral port, stopped after the test."""
    with FakeOpenAI() as fake:
        yield fake


def fake_model(fake: FakeOpenAI, name: str, **params: Any) -> dict[str, Any]:
    """A `models:` entry that sends `name` to the fake through the real LiteLLM OpenAI client."""
    return {
        "model_name": name,
        "litellm_params": {"model": f"openai/{name}", "api_base": fake.base_url, "api_key": "sk-fake", **params},
    }


@pytest.fixture
def provider_fake() -> Iterator[FakeProviders]:
    """A fresh fake of Anthropic's and Gemini's own endpoints (`tests.fakes.provider_streams`)."""
    with FakeProviders() as fake:
        yield fake
