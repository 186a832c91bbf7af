"""The per-bot daily spending limit (`bots[].daily_budget_usd`).

What a bot spent today is the sum of the `usage` rows the worker stores with each turn, from
LiteLLM's own accounting, since midnight UTC. Once it reaches the budget, the pipeline makes no
more model calls for that bot until the next UTC day: the customer gets its `replies.budget_spent` and the
conversation is escalated with `BUDGET_ESCALATION`, which is how operators hear of it.

Model calls made outside a turn (the summary an operator reads, `gateway.operators.summary`) are
stored by `DailyBudget.charge` and count the same way; once the budget is spent, summaries are
extractive. A call that was cut off or timed out counts by its estimate (`gateway.llm_pricing`).

Usage whose price was unknown (`partial`) counts as zero: the limit can only be as exact as the
prices LiteLLM knows. Give hosted models `input_cost_per_token`/`output_cost_per_token` in
`litellm_params` when LiteLLM has no price for them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.models import utcnow
from gateway.settings import BotSettings
from storage.models import Usage

log = structlog.get_logger("gateway.budget")

BUDGET_ESCALATION = "daily budget spent"


def start_of_day(now: datetime) -> datetime:
    """Midnight UTC of `now`'s day, in the same naive/aware form as `now`."""
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


class DailyBudget:
    """Answers "may this bot call a model now?" from the stored usage of the current UTC day."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *,
                 clock: Callable[[], datetime] = utcnow, metrics=None) -> None:
        self._sessions = sessions
        self._clock = clock
        self._metrics = metrics  # gateway.observability.metrics.Metrics: tokens and cost of `charge`d calls

    async def spent_today(self, bot: str) -> float:
        """US dollars the bot's model calls cost since midnight UTC."""
        since = start_of_day(self._clock())
        async with self._sessions() as session:
            total = (await session.execute(
                select(func.coalesce(func.sum(Usage.cost_usd), 0.0))
                .where(Usage.bot == bot, Usage.created_at >= since, Usage.created_at < since + timedelta(days=1))
            )).scalar_one()
        return float(total or 0.0)

    async def exhausted(self, bot: BotSettings) -> bool:
        """True when the bot has a daily budget and today's spending reached it."""
        if bot.daily_budget_usd is None:
            return False
        spent = await self.spent_today(bot.name)
        if spent >= bot.daily_budget_usd:
            log.warning("budget.spent", bot=bot.name, spent_usd=round(spent, 6), budget_usd=bot.daily_budget_usd)
            return True
        return False

    async def charge(self, bot: str, usage: list[dict[str, Any]], *, conversation_id: int | None = None) -> None:
        """Store the `usage_row`s of model calls made outside a turn, so they count toward the bot's
        budget and its token metrics like a turn's (a turn's are stored with its reply)."""
        if not usage:
            return
        async with self._sessions() as session, session.begin():
            await store_usage(session, bot, usage, conversation_id=conversation_id)
        if self._metrics is not None:
            self._metrics.record_usage(bot, usage)


async def store_usage(session: AsyncSession, bot: str, usage: list[dict[str, Any]], *,
                      conversation_id: int | None = None, message_id: int | None = None) -> None:
    """Store `usage_row`s as `usage` rows, all in one INSERT (added to the session, each was an INSERT of
    its own: a follow-up's rewrite and answer, two round trips)."""
    if usage:
        with session.no_autoflush:  # the session's other changes go at the commit, each row's once, as before
            await session.execute(insert(Usage).values([{
                "bot": bot, "conversation_id": conversation_id, "message_id": message_id, "model": row["model"],
                "prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"],
                "cost_usd": row["cost_usd"] or 0.0, "partial": row["partial"]} for row in usage]))


def usage_row(result: Any) -> dict[str, Any]:
    """One model call's accounting (an `LLMResult`), in the shape the worker stores as a `usage` row."""
    usage = getattr(result, "usage", None)
    cost = getattr(usage, "cost_usd", None)
    return {
        "model": getattr(result, "model_used", "") or "",
        "prompt_tokens": getattr(usage, "prompt_tokens", 0) or 0,
        "completion_tokens": getattr(usage, "completion_tokens", 0) or 0,
        "cost_usd": float(cost or 0.0),
        # Unknown tokens or price: stored, but marked so nobody mistakes the sum for the bill.
        "partial": usage is None or cost is None or bool(getattr(usage, "partial", False)),
    }
