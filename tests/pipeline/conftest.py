"""Fixtures for the pipeline tests: the real Pipeline, Answerer, Rewriter, BotTools and LLMRouter,
talking through the real LiteLLM to the local scripted OpenAI-compatible fake."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gateway.llm import LLMRouter  # noqa: E402
from gateway.llm_retry import RetryPolicy  # noqa: E402
from gateway.models import CallerIdentity  # noqa: E402
from gateway.pipeline import Pipeline, Turn  # noqa: E402
from gateway.pipeline.answer import Answerer  # noqa: E402
from gateway.pipeline.rewrite import Rewriter  # noqa: E402
from gateway.pipeline.tools import BotTools  # noqa: E402
from gateway.settings import BotSettings  # noqa: E402
from rag.search import Hit, SearchResult  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.llm.conftest import fake_model, openai_fake  # noqa: E402,F401  (re-exported fixture)

FAST_RETRY = RetryPolicy(num_retries=1, backoff_base=0.01, backoff_max=0.05)
MODELS = ("primary", "backup")


def hit(text: str, *, source: str = "help", document: str = "plans.md", title: str = "Plans and pricing",
        heading: tuple[str, ...] = ("Plans",), n: int = 0, url: str | None = "https://help.example.com/plans") -> Hit:
    """A real rag.search.Hit."""
    return Hit(chunk_id=f"{document}-{n}", text=text, source=source, document=document, title=title,
               heading_path=heading, url=url, dense_score=0.8, sparse_score=3.0, fused_score=0.5, arms=("dense",))


PLUS = hit("Plus is for individuals. It costs $6 per month or $60 per year.", n=0)
TEAM = hit("Team is for companies of 3 users or more. It costs $12 per user per month.", n=1,
           document="team.md", title="Team plan")


class RecordingSearch:
    """Stands in for `Knowledge.search`: returns fixed hits and records the queries it got."""

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.calls: list[list[str]] = []

    async def search(self, bot: str, queries: list[str], retrieval: Any) -> SearchResult:
        """Record, then answer with the fixed hits (refused when there are none)."""
        self.calls.append(list(queries))
        return SearchResult(tuple(self.hits), not self.hits, "fixed", 0.8 if self.hits else None)


@dataclass
class Rig:
    """One wired pipeline and what it talks to."""

    fake: FakeOpenAI
    bot: BotSettings
    search: RecordingSearch
    pipeline: Pipeline
    bots: list[BotSettings] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # what a streamed turn shows now: a reset empties it
    resets: int = 0

    def turn(self, text: str, *, history: list[dict[str, Any]] | None = None, stream: bool = False,
             contact: str = "demo-alice-session", bot: BotSettings | None = None) -> Turn:
        """A turn from `contact` on the web channel."""
        bot = bot or self.bot

        async def on_token(token: str) -> None:
            self.tokens.append(token)

        async def on_reset() -> None:
            self.tokens.clear()
            self.resets += 1

        return Turn(bot=bot, message_id=1, conversation_id=1, state="bot", text=text,
                    identity=CallerIdentity(bot=bot.name, channel="web", contact_external_id=contact),
                    history=history or [], on_token=on_token if stream else None,
                    on_reset=on_reset if stream else None)


def make_rig(fake: FakeOpenAI, *, bots: list[dict[str, Any]] | None = None, hits: list[Hit] | None = None,
             timeout: float = 5.0, model_params: dict[str, Any] | None = None, budget: Any = None,
             metrics: Any = None) -> Rig:
    """Build the real pipeline for `bots` (the first is the default), with models on the fake."""
    specs = bots or [{"name": "acme"}]
    settings = [BotSettings(**{"model": "primary", "fallbacks": ["backup"], **spec}) for spec in specs]
    router = LLMRouter([fake_model(fake, name, **(model_params or {})) for name in MODELS], timeout=timeout,
                       retry=FAST_RETRY)
    search = RecordingSearch([PLUS, TEAM] if hits is None else hits)
    tools = {b.name: BotTools(b) for b in settings}
    pipeline = Pipeline(search=search, answerer=Answerer(router, tools=tools), rewriter=Rewriter(router),
                        budget=budget, metrics=metrics)
    return Rig(fake=fake, bot=settings[0], search=search, pipeline=pipeline, bots=settings)


@pytest.fixture
def rig(openai_fake: FakeOpenAI) -> Rig:  # noqa: F811 - pytest passes the fixture by its name
    """The default rig: bot `acme` on primary → backup, no tools, two hits."""
    return make_rig(openai_fake)
