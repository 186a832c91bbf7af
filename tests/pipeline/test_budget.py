"""The per-bot daily budget, on both databases, and the pipeline's cut-off before any model call."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gateway.budget import BUDGET_ESCALATION, BUDGET_REPLY, DailyBudget, usage_row
from gateway.llm import LLMResult
from gateway.llm import Usage as CallUsage
from gateway.settings import BotSettings
from storage.engine import create_engine, session_factory
from storage.models import Usage
from tests.fakes.openai_server import Turn
from tests.pipeline.conftest import make_rig

NOON = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


async def _budget_with(url: str, rows: list[tuple[str, float, datetime]]) -> tuple[DailyBudget, object]:
    engine = create_engine(url)
    sessions = session_factory(engine)
    async with sessions() as session, session.begin():
        for bot, cost, at in rows:
            session.add(Usage(bot=bot, model="m", prompt_tokens=1, completion_tokens=1, cost_usd=cost,
                              partial=False, created_at=at))
    return DailyBudget(sessions, clock=lambda: NOON), engine


async def test_budget_counts_only_this_bots_spending_of_today(migrated_url) -> None:
    budget, engine = await _budget_with(migrated_url, [
        ("acme", 0.30, NOON - timedelta(hours=11)), ("acme", 0.25, NOON),
        ("acme", 5.00, NOON - timedelta(days=1)),  # yesterday
        ("other", 7.00, NOON),
    ])
    try:
        assert await budget.spent_today("acme") == 0.55
        assert not await budget.exhausted(BotSettings(name="acme", daily_budget_usd=0.56))
        assert await budget.exhausted(BotSettings(name="acme", daily_budget_usd=0.55))
        assert not await budget.exhausted(BotSettings(name="acme"))  # no budget, no limit
    finally:
        await engine.dispose()


async def test_budget_spent_pipeline_makes_no_model_call(migrated_url, openai_fake) -> None:
    budget, engine = await _budget_with(migrated_url, [("acme", 1.0, NOON)])
    rig = make_rig(openai_fake, bots=[{"name": "acme", "daily_budget_usd": 1.0}], budget=budget)
    openai_fake.script("primary", Turn(text="Plus costs $6 per month [1]."))
    try:
        result = await rig.pipeline.handle(rig.turn("and yearly?", history=[{"role": "user", "content": "Plus?"}]))
    finally:
        await engine.dispose()

    assert result.reply == BUDGET_REPLY and result.escalate == BUDGET_ESCALATION and not result.answered
    assert openai_fake.requests == [] and rig.search.calls == []


def test_budget_usage_row_marks_unknown_price_partial() -> None:
    priced = LLMResult("a", (), "primary", CallUsage(10, 2, 0.003, False), "stop")
    unpriced = LLMResult("a", (), "primary", CallUsage(10, 2, None, True), "stop")

    assert usage_row(priced) == {"model": "primary", "prompt_tokens": 10, "completion_tokens": 2,
                                 "cost_usd": 0.003, "partial": False}
    assert usage_row(unpriced)["partial"] is True and usage_row(unpriced)["cost_usd"] == 0.0
