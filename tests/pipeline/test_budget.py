"""The per-bot daily budget, on both databases, and the pipeline's cut-off before any model call."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import select

from gateway.budget import BUDGET_ESCALATION, DailyBudget, usage_row
from gateway.llm import LLMResult
from gateway.llm import Usage as CallUsage
from gateway.settings import BotSettings
from storage.engine import create_engine, session_factory
from storage.models import Usage
from tests.english_replies import BUDGET_REPLY
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


async def test_an_unreadable_budget_answers_the_turn_and_logs_an_error(tmp_path, openai_fake) -> None:
    import structlog

    # A database that cannot be opened (its folder does not exist): the spending cannot be read. A blip
    # there used to fail the whole turn into a handoff to a person.
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'gateway.db'}")
    rig = make_rig(openai_fake, bots=[{"name": "acme", "daily_budget_usd": 1.0}],
                   budget=DailyBudget(session_factory(engine)))
    openai_fake.script("primary", Turn(text="Plus costs $6 per month [1]."))
    try:
        with structlog.testing.capture_logs() as logs:
            result = await rig.pipeline.handle(rig.turn("How much is Plus?"))
    finally:
        await engine.dispose()

    assert result.answered and result.escalate is None and result.reply.startswith("Plus costs $6 per month")
    assert [e for e in logs if e["event"] == "pipeline.budget_unreadable" and e["log_level"] == "error"]


def test_budget_usage_row_marks_unknown_price_partial() -> None:
    priced = LLMResult("a", (), "primary", CallUsage(10, 2, 0.003, False), "stop")
    unpriced = LLMResult("a", (), "primary", CallUsage(10, 2, None, True), "stop")

    assert usage_row(priced) == {"model": "primary", "prompt_tokens": 10, "completion_tokens": 2,
                                 "cost_usd": 0.003, "partial": False}
    assert usage_row(unpriced)["partial"] is True and usage_row(unpriced)["cost_usd"] == 0.0


async def test_an_operator_summary_is_the_bots_spending_and_a_spent_budget_makes_it_extractive(
        migrated_url, openai_fake) -> None:
    from gateway.llm import LLMRouter
    from gateway.llm_retry import RetryPolicy
    from gateway.operators.summary import summarize
    from tests.llm.conftest import fake_model
    from tests.llm.test_operator_summary import MESSAGES, Row

    engine = create_engine(migrated_url)
    budget = DailyBudget(session_factory(engine))  # today's clock: the rows `charge` stores are dated now
    prices = {"input_cost_per_token": 0.01, "output_cost_per_token": 0.01}
    router = LLMRouter([fake_model(openai_fake, "primary", **prices)], timeout=5,
                       retry=RetryPolicy(num_retries=0, backoff_base=0.01, backoff_max=0.05))
    # Its own name per database: summaries are cached per bot and conversation state, for the process.
    bot = BotSettings(name=f"acme-summary-{migrated_url.split(':')[0].split('+')[0]}", model="primary", daily_budget_usd=1.0)
    openai_fake.script("primary", Turn(text="Charged twice in March.", usage=(60, 40)))
    try:
        first = await summarize(router, bot, MESSAGES, reason="asked", budget=budget)
        # 100 tokens at a cent each: the budget is spent, so the next summary makes no call.
        later = await summarize(router, bot, [*MESSAGES, Row(3, "contact", "hello?")], reason="asked", budget=budget)
        async with budget._sessions() as session:
            rows = (await session.execute(select(Usage).where(Usage.bot == bot.name))).scalars().all()
    finally:
        await engine.dispose()

    assert first == {"kind": "llm", "text": "Charged twice in March."}
    assert [(r.model, r.prompt_tokens, r.completion_tokens, r.cost_usd) for r in rows] == [("primary", 60, 40, 1.0)]
    assert later["kind"] == "extractive" and len(openai_fake.requests_for("primary")) == 1


async def test_an_unreadable_budget_gives_the_extractive_summary_without_a_model_call(tmp_path, openai_fake) -> None:
    from gateway.llm import LLMRouter
    from gateway.operators.summary import summarize
    from tests.llm.conftest import fake_model
    from tests.llm.test_operator_summary import MESSAGES

    # A database that cannot be opened (its folder does not exist): the spending cannot be read.
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'gateway.db'}")
    router = LLMRouter([fake_model(openai_fake, "primary")], timeout=5)
    bot = BotSettings(name="acme-unreadable-budget", model="primary", daily_budget_usd=1.0)
    openai_fake.script("primary", Turn(text="never asked"))
    try:
        summary = await summarize(router, bot, MESSAGES, reason="asked", budget=DailyBudget(session_factory(engine)))
    finally:
        await engine.dispose()

    assert summary["kind"] == "extractive" and openai_fake.requests == []


def test_one_budget_is_shared_by_turns_the_console_and_slack_summaries(tmp_path) -> None:
    # Wiring: a summary charged to another DailyBudget (or to none) would spend past the limit unseen.
    from gateway.services import build_services
    from gateway.settings import load_settings
    from tests.conftest import write_config

    services = build_services(load_settings(write_config(tmp_path)), with_scheduler=False)

    assert isinstance(services.budget, DailyBudget)
    assert services.pipeline._budget is services.budget and services.slack_operator._budget is services.budget
    assert services.budget._metrics is services.metrics  # summaries count in the token metrics too
