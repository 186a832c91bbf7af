"""Shared by the Slack adapter tests: the fake Slack fixture, the adapter factory and the signing secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.slack import SlackAdapter
from gateway.settings import SlackChannel
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SLACK_FIXTURES = FIXTURES / "payloads" / "slack"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


@pytest.fixture(name="fake")
async def fake_fixture():
    server = await FakeSlack.start()
    yield server
    await server.stop()


class Sleeps(list):
    """Records the waits the adapter asked for instead of sleeping."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make_adapter(fake: FakeSlack | None = None, *, sleeps: Sleeps | None = None, **overrides) -> SlackAdapter:
    cfg = {"bot_token": BOT_TOKEN, "signing_secret": SECRET} | overrides
    if fake is not None:
        cfg["api_base"] = fake.api_base
    return SlackAdapter("demo", SlackChannel(**cfg), sleep=sleeps if sleeps is not None else Sleeps())
