"""Rate limits per contact and per bot, with the notice once per window, on memory and Redis storage."""

from __future__ import annotations

import importlib.util

import pytest

from gateway.errors import ConfigError
from gateway.ratelimit import RateLimiter, storage_uri
from gateway.settings import RateLimitSettings

REDIS_URL = "redis://127.0.0.1:6379/15"
HAS_REDIS_CLIENT = importlib.util.find_spec("coredis") is not None


def _limiter(redis_url: str | None = None, **limits) -> RateLimiter:
    return RateLimiter({"acme": RateLimitSettings(**limits)}, redis_url=redis_url, namespace="test-rl")


@pytest.fixture(params=["memory", "redis"])
async def backend(request):
    if request.param == "memory":
        return None
    if not HAS_REDIS_CLIENT:
        pytest.skip("the async Redis client for `limits` (coredis) is not installed in this environment")
    return REDIS_URL


async def test_ratelimit_per_contact_refuses_over_limit_and_notifies_once(backend) -> None:
    limiter = _limiter(backend, per_contact_per_minute=3)
    await limiter.reset()
    decisions = [await limiter.check(bot="acme", channel="telegram", contact="u1") for _ in range(6)]
    assert [d.allowed for d in decisions] == [True, True, True, False, False, False]
    assert [d.notify for d in decisions[3:]] == [True, False, False]
    assert decisions[3].scope == "contact"
    # Another contact has its own budget.
    assert (await limiter.check(bot="acme", channel="telegram", contact="u2")).allowed


async def test_ratelimit_per_bot_counts_every_contact(backend) -> None:
    limiter = _limiter(backend, per_bot_per_minute=2)
    await limiter.reset()
    first = [await limiter.check(bot="acme", channel="web", contact=f"c{i}") for i in range(3)]
    assert [d.allowed for d in first] == [True, True, False]
    assert first[2].scope == "bot" and first[2].notify


async def test_ratelimit_unlimited_bot_never_counts() -> None:
    limiter = _limiter()
    assert not limiter.enabled_for("acme") and not limiter.enabled_for("other")
    assert all([(await limiter.check(bot="acme", channel="web", contact="x")).allowed for _ in range(100)])


def test_ratelimit_storage_uri_maps_redis_urls() -> None:
    assert storage_uri(None) == "async+memory://"
    assert storage_uri("redis://h:6379/0") == "async+redis://h:6379/0"
    assert storage_uri("rediss://h:6380") == "async+rediss://h:6380"
    with pytest.raises(ValueError):
        storage_uri("http://h")


@pytest.mark.skipif(HAS_REDIS_CLIENT, reason="only meaningful without the Redis client")
def test_ratelimit_redis_without_client_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="redis_url"):
        _limiter(REDIS_URL, per_contact_per_minute=1)


async def test_ratelimit_loop_held_by_other_work_is_not_a_storage_outage(monkeypatch) -> None:
    import asyncio
    import time

    import structlog

    limiter = _limiter(per_contact_per_minute=5)
    limiter.timeout = 0.1
    hits: list[str] = []

    async def answers_in_10_ms(item, *keys):  # the storage answers at once ...
        await asyncio.sleep(0.01)
        hits.append(keys[1])
        return True

    async def first_model_call() -> None:  # ... while another turn holds the loop past the deadline
        time.sleep(0.3)

    monkeypatch.setattr(limiter._strategy, "hit", answers_in_10_ms)
    with structlog.testing.capture_logs() as logs:
        decision, _ = await asyncio.gather(limiter.check(bot="acme", channel="web", contact="u1"), first_model_call())
    assert decision.allowed and hits == ["contact"]
    assert [e["event"] for e in logs] == []  # was `ratelimit.unavailable` TimeoutError, the message uncounted

    async def never_answers(item, *keys):
        await asyncio.sleep(10)

    monkeypatch.setattr(limiter._strategy, "hit", never_answers)
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        assert (await limiter.check(bot="acme", channel="web", contact="u1")).allowed  # fails open, as before
    assert time.monotonic() - started < 5  # its 0.1 s timeout, with a loaded machine's margin, not the 10 s
    assert [(e["event"], e["error"]) for e in logs] == [("ratelimit.unavailable", "TimeoutError")]
