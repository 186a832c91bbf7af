"""`serve --role web` beside one `serve` process on PostgreSQL: the web process only receives, the other
answers; LISTEN/NOTIFY wakes it at once instead of on its next poll, and carries the bus's events back."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from tests.fakes.telegram_api import FakeTelegramAPI
from tests.scale.replicas import (
    OPERATOR_TOKEN,
    ROOT,
    SECRET,
    TOKEN,
    Replica,
    db_upgrade,
    replica_config,
    telegram_update,
)

SLOW_POLL_S = 120.0  # so a reply within a minute can only come from the notification
WAKE_BOUND_S = SLOW_POLL_S / 2  # generous: a busy 2-core CI machine took 16.6 s for three first turns


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
            async with httpx.AsyncClient() as client:
                ready = (await client.get(f"{web.url}/readyz")).json()
                assert ready["role"] == "web" and ready["checks"] == {"database": "ok"} and ready["scheduler_leader"] is False
                refused = await client.post(f"{web.url}/v1/admin/ingest", headers={"Authorization": "Bearer x"})
                assert refused.status_code == 503 and "role web" in refused.json()["error"]
                # A first message, answered: the worker's start-up poll is over by then, so from now on only a
                # notification wakes it (a fixed second was not always enough for that start-up poll, which
                # then answered the three below without any notification).
                response = await client.post(
                    f"{web.url}/webhooks/shop/telegram", json=telegram_update(699, chat_id=76, text="hello"),
                    headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}, timeout=10)
                assert response.status_code == 200
                started = time.monotonic()
                while not fake.sent and time.monotonic() - started < WAKE_BOUND_S:
                    await asyncio.sleep(0.05)
                assert [s.reply_to for s in fake.sent] == [699], worker.log() + web.log()
                started = time.monotonic()
                for k in range(3):
                    response = await client.post(
                        f"{web.url}/webhooks/shop/telegram", json=telegram_update(700 + k, chat_id=77, text=f"q{k}"),
                        headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}, timeout=10)
                    assert response.status_code == 200
            while len(fake.sent) < 4 and time.monotonic() - started < WAKE_BOUND_S:
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - started
        finally:
            web.stop()
            worker.stop()
        assert [s.reply_to for s in fake.sent] == [699, 700, 701, 702], worker.log() + web.log()
        assert elapsed < WAKE_BOUND_S, f"replies took {elapsed:.1f}s: woken by polling, not by NOTIFY"


async def test_live_events_cross_processes_operator_stream_and_web_chat_tokens(postgres_url, tmp_path) -> None:
    """The console's live stream and the web chat's token stream are fed by the bus; on PostgreSQL the
    bus spans processes, so both work on a web process while another process answers."""
    operators = [{"name": "ann", "token": "${GW_REPLICA_OP_TOKEN}", "bots": ["shop"]}]
    help_center = {"name": "help", "type": "directory", "path": str(ROOT / "examples" / "help-center"),
                   "schedule": "0 3 * * *"}
    async with FakeTelegramAPI(TOKEN) as fake:
        worker_cfg, web_cfg = (
            replica_config(tmp_path, database_url=postgres_url, telegram_api=fake.base_url, index=i,
                           operators=operators, extra_bot={"escalation": {"enabled": True}, "sources": [help_center]},
                           web_chat=True)
            for i in range(2))
        await asyncio.to_thread(db_upgrade, worker_cfg)
        worker, web = Replica(worker_cfg), Replica(web_cfg, role="web")
        for process in (worker, web):
            process.start()
        events: list[tuple[str, dict]] = []
        try:
            await asyncio.gather(worker.wait_ready(), web.wait_ready())
            async with httpx.AsyncClient(timeout=30) as client:
                async with client.stream("GET", f"{web.url}/v1/escalations/stream",
                                         headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}) as stream:
                    lines = stream.aiter_lines()

                    async def next_event() -> tuple[str, dict]:
                        name = None
                        async for line in lines:
                            if line.startswith("event:"):
                                name = line.split(":", 1)[1].strip()
                            elif line.startswith("data:") and name:
                                return name, json.loads(line.split(":", 1)[1])
                        raise AssertionError("stream ended")

                    events.append(await asyncio.wait_for(next_event(), 10))  # ready
                    await client.post(f"{web.url}/webhooks/shop/telegram",
                                      json=telegram_update(800, chat_id=88, text="Can I talk to a human please?"),
                                      headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
                    events.append(await asyncio.wait_for(next_event(), 20))
                # The worker process holds the index: ingest through it, then ask the web process, streaming.
                token = (tmp_path / "qdrant-0.admin.token").read_text().strip()  # the worker: replica 0
                ingested = await client.post(f"{worker.url}/v1/admin/ingest", headers={"Authorization": f"Bearer {token}"},
                                             timeout=300)
                assert ingested.status_code == 200, ingested.text
                names = []
                async with client.stream("POST", f"{web.url}/v1/bots/shop/chat", headers={"Accept": "text/event-stream"},
                                         json={"session_id": "sse-1", "text": "How much does the Plus plan cost?"}) as sse:
                    assert sse.status_code == 200, (sse.status_code, await sse.aread())
                    async for line in sse.aiter_lines():
                        if line.startswith("event:"):
                            names.append(line.split(":", 1)[1].strip())
        finally:
            web.stop()
            worker.stop()
        assert [name for name, _ in events] == ["ready", "opened"], (events, worker.log(), web.log())
        assert events[1][1]["bot"] == "shop"
        assert names[-1] == "done" and names.count("token") >= 1, names
