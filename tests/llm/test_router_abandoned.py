"""A model call that did not finish was billed all the same: the router reports its estimated usage to
`on_abandoned` (cut off by the caller, timed out, or a stream broken after the model wrote)."""

from __future__ import annotations

import asyncio

import litellm
import pytest

from gateway.llm import LLMResult, LLMRouter
from gateway.llm_pricing import Pricing
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.llm.test_router import MESSAGES, Collector, make_router

PRICES = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}


class TwoTokens(Collector):
    """Remembers the tokens, and says when two have arrived: the moment to cut the call off."""

    def __init__(self) -> None:
        super().__init__()
        self.two = asyncio.Event()

    async def __call__(self, token: str) -> None:
        await super().__call__(token)
        if len(self.tokens) >= 2:
            self.two.set()


async def test_a_stream_cut_off_by_the_caller_reports_the_prompt_and_what_was_written(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="one two three four five six seven eight", chunk_delay=0.3))
    router = make_router(openai_fake, "primary", **PRICES)
    seen, cut = TwoTokens(), []

    call = asyncio.ensure_future(router.complete(model="primary", messages=MESSAGES, on_token=seen,
                                                 on_abandoned=cut.append))
    await asyncio.wait_for(seen.two.wait(), 30)
    call.cancel()  # as the turn's deadline or a caller's timeout does
    with pytest.raises(asyncio.CancelledError):
        await call

    [report] = cut
    assert isinstance(report, LLMResult) and report.finish_reason == "abandoned" and report.model_used == "primary"
    assert report.text == "".join(seen.tokens) and report.text.startswith("one two")  # what the customer had seen
    expected_prompt = litellm.token_counter(model="openai/primary", messages=MESSAGES)
    expected_written = litellm.token_counter(model="openai/primary", text=report.text)
    assert (report.usage.prompt_tokens, report.usage.completion_tokens) == (expected_prompt, expected_written)
    assert report.usage.partial  # an estimate, not the provider's bill
    assert report.usage.cost_usd == pytest.approx(expected_prompt * 1e-6 + expected_written * 2e-6)


async def test_each_timed_out_attempt_is_reported_and_the_answer_is_not(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="late", delay=2))
    openai_fake.script("backup", Turn(text="Backup answers [1].", usage=(30, 5)))
    router = make_router(openai_fake, "primary", "backup", timeout=0.4)
    cut: list[LLMResult] = []

    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_abandoned=cut.append)

    assert result.model_used == "backup" and (result.usage.prompt_tokens, result.usage.completion_tokens) == (30, 5)
    assert [r.model_used for r in cut] == ["primary"]  # its one try: a timeout goes on to the fallback
    assert all(r.usage.prompt_tokens > 10 and r.usage.completion_tokens == 0 for r in cut)


async def test_a_refused_call_is_not_reported(openai_fake: FakeOpenAI) -> None:
    # A 429 or a 500 before any token: the provider did no work and bills none.
    openai_fake.script("primary", Turn(status=429, retry_after=0), Turn(status=500))
    openai_fake.script("backup", Turn(text="fine [1]."))
    router = make_router(openai_fake, "primary", "backup")
    cut: list[LLMResult] = []

    await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_abandoned=cut.append)

    assert cut == []


async def test_a_stream_broken_after_tokens_is_reported(openai_fake: FakeOpenAI) -> None:
    openai_fake.script("primary", Turn(text="one two three four five", break_after=2), Turn(text="whole answer [1]."))
    router = make_router(openai_fake, "primary")
    cut: list[LLMResult] = []

    result = await router.complete(model="primary", messages=MESSAGES, on_token=Collector(), on_abandoned=cut.append)

    assert result.text == "whole answer [1]."
    [report] = cut
    assert report.text == "one two" and report.usage.completion_tokens == 2


async def test_the_offline_responder_cut_off_bills_nobody() -> None:
    router = LLMRouter([])
    cut: list[LLMResult] = []
    task = asyncio.ensure_future(router.complete(model="offline", messages=MESSAGES, on_token=_slow_token,
                                                 on_abandoned=cut.append))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cut == []


async def _slow_token(_: str) -> None:
    await asyncio.sleep(1)


def test_an_estimate_counts_characters_when_the_tokenizer_cannot_read_the_messages(monkeypatch) -> None:
    def unreadable(**_):
        raise ValueError("unsupported content part")

    monkeypatch.setattr(litellm, "token_counter", unreadable)
    pricing = Pricing({"m": {"model": "openai/m", **PRICES}}, free_model="offline-x")

    usage = pricing.estimate("m", [{"role": "user", "content": "x" * 400}], None, "y" * 41)

    assert usage.prompt_tokens > 100 and usage.completion_tokens == 11 and usage.partial
    assert usage.cost_usd == pytest.approx(usage.prompt_tokens * 1e-6 + 11 * 2e-6)


async def test_a_failing_estimate_costs_the_record_never_the_calls_outcome(openai_fake: FakeOpenAI, monkeypatch) -> None:
    openai_fake.script("primary", Turn(text="late", delay=2))
    openai_fake.script("backup", Turn(text="Backup answers [1]."))
    router = make_router(openai_fake, "primary", "backup", timeout=0.4)

    def broken(*_):
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(router._pricing, "estimate", broken)
    cut: list[LLMResult] = []
    # A timed-out attempt still falls back, and a cut-off one still ends as the caller's timeout.
    result = await router.complete(model="primary", fallbacks=["backup"], messages=MESSAGES, on_abandoned=cut.append)
    assert result.model_used == "backup"
    openai_fake.script("primary", Turn(text="one two three four five", chunk_delay=0.3))
    router = make_router(openai_fake, "primary")
    monkeypatch.setattr(router._pricing, "estimate", broken)
    seen = TwoTokens()
    call = asyncio.ensure_future(router.complete(model="primary", messages=MESSAGES, on_token=seen,
                                                 on_abandoned=cut.append))
    await asyncio.wait_for(seen.two.wait(), 30)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert cut == []
