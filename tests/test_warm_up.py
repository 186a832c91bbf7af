"""What a first turn would load is loaded at start, before the server reports ready: each bot's BM25 term
statistics and LiteLLM's first call (bench/first_turns.py measured both on the event loop)."""

from __future__ import annotations

import structlog

from gateway.knowledge import Knowledge
from gateway.llm import LLMRouter
from gateway.worker import Worker
from tests.conftest import app_client


async def test_start_warms_up_the_index_and_the_model_before_the_worker(tmp_path, help_center_bot, monkeypatch):
    order: list[str] = []
    for cls, name in ((Knowledge, "warm_up"), (LLMRouter, "warm_up"), (Worker, "start")):
        real = getattr(cls, name)

        async def spy(self, *args, _real=real, _label=f"{cls.__name__}.{name}", **kwargs):
            order.append(_label)
            return await _real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
    async with app_client(tmp_path, bots=[help_center_bot]) as client:
        assert order == ["Knowledge.warm_up", "LLMRouter.warm_up", "Worker.start"]
        # The bot's term statistics are read: its first query does not scan the collection.
        assert "acme" in client.services.knowledge.index._term_stats._entries
        assert (await client.get("/readyz")).status_code == 200


async def test_llm_warm_up_answers_with_the_offline_model_and_logs_no_turn():
    router = LLMRouter([])
    with structlog.testing.capture_logs() as logs:
        await router.warm_up()
    assert logs == []  # no `llm.answered` (not a turn), no `llm.warm_up_failed`
