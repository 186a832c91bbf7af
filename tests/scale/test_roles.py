"""`serve --role web` beside one `serve` process on PostgreSQL: the web process only receives, the other
answers, and LISTEN/NOTIFY wakes it at once instead of on its next poll."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.fakes.telegram_api import FakeTelegramAPI
from tests.scale.replicas import SECRET, TOKEN, Replica, db_upgrade, replica_config, telegram_update

SLOW_POLL_S = 30.0  # so a reply within seconds can only come from the notification


async def test_web_role_receives_and_the_worker_process_answers_at_once(postgres_url, tmp_path) -> None:
    async with FakeTelegramAPI(TOKEN) as fake:
        worker_cfg, web_cfg = (
            replica_config(tmp_path, database_url=postgres_url, telegram_api=fake.base_url, index=i,
                           worker={"lease_seconds": 5, "poll_interval": SLOW_POLL_S, "reply_timeout": 30})
            for i in range(2))
        await asyncio.to_thread(db_upgrade, worker_cfg)
        worker, web = Replica(worker_cfg), Replica(web_cfg, role="web")
        for process in (worker, web):
            process.start()
        try:
            await asyncio.gather(worker.wait_ready(), web.wait_ready())
            await asyncio.sleep(1.0)  # the worker's first poll is over: from now on only a notification wakes it
            async with httpx.AsyncClient() as client:
                ready = (await client.get(f"{web.url}/readyz")).json()
                assert ready["role"] == "web" and ready["checks"] == {"database": "ok"}
                refused = await client.post(f"{web.url}/v1/admin/ingest", headers={"Authorization": "Bearer x"})
                assert refused.status_code == 503 and "role web" in refused.json()["error"]
                started = time.monotonic()
                for k in range(3):
                    response = await client.post(
                        f"{web.url}/webhooks/shop/telegram", json=telegram_update(700 + k, chat_id=77, text=f"q{k}"),
                        headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}, timeout=10)
                    assert response.status_code == 200
            while len(fake.sent) < 3 and time.monotonic() - started < 20:
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - started
        finally:
            web.stop()
            worker.stop()
        assert [s.reply_to for s in fake.sent] == [700, 701, 702], worker.log() + web.log()
        assert elapsed < SLOW_POLL_S / 3, f"replies took {elapsed:.1f}s: woken by polling, not by NOTIFY"
