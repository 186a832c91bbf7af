"""Stopping a server: bounded waits, and no new turn started once the stop is asked for."""

from __future__ import annotations

import asyncio
import time

from tests.conftest import app_client


async def _hanging_post(event) -> None:
    await asyncio.sleep(3600)  # Slack's operator channel, not answering


async def test_a_stop_is_not_held_by_a_hanging_operator_channel_post(tmp_path, capsys) -> None:
    # Escalations.drain() waited for every operator-channel post without a limit, so a hanging one held
    # the stop past the 20 s docs/deployment.md gives it (and past a container's grace period).
    async def serve_and_stop() -> float:
        async with app_client(tmp_path, bots=[{"name": "acme", "channels": {"web": {}}}]) as client:
            client.services.escalations.listeners.append(_hanging_post)
            client.services.escalations._spawn({"type": "opened", "escalation_id": 7, "bot": "acme"})
            await asyncio.sleep(0.05)
            started = time.monotonic()
        return time.monotonic() - started

    took = await asyncio.wait_for(serve_and_stop(), timeout=30)
    assert took < 10
    logs = capsys.readouterr().err
    assert "escalation.side_effects_abandoned count=1 events=['opened:7']" in logs
