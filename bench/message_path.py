"""Where a message's time and SQL go: signed Telegram webhook in → reply sent to a fake Telegram API.

One real app in this process (as the channel end-to-end tests run it), the bot's model on the local
OpenAI-compatible fake (scripted, instant: the gateway's own overhead is what is left), the help
center's pricing page as the knowledge. Messages are sent one at a time, each waited for until its reply
was sent and the worker is idle again, so every statement in between belongs to that message. Prints per
message: the statements by verb and table, the transactions, the round trips (statements + BEGIN and
COMMIT each), the webhook's acknowledgement and webhook → sendMessage times (median, p90), the process's
CPU time (less moved by other work on the machine than the wall times), and the load average.
`--profile FILE` writes a cProfile of the whole run (loop thread only).

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.message_path \
        [--db sqlite|postgres] [--n 50] [--chats 5] [--stream] [--profile out.prof]

`--stream`: the Telegram channel streams its answers (`stream: true`): a message sent, then edited into
the reply, its id kept on the question meanwhile.

Not a test: the times depend on the machine and its load (the counts do not).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import HELP_CENTER, drop_postgres, fresh_postgres_url, upgrade, write_config
from tests.fakes.openai_server import FakeOpenAI, Turn
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.statement_log import StatementLog

TOKEN = "723738643:AAH-bench-token"
SECRET = "bench-secret_1"
ANSWER = "The Plus plan costs $8 per user per month [1]."


def _update(update_id: int, chat: int, text: str) -> dict:
    return {"update_id": update_id, "message": {
        "message_id": update_id, "date": 1700000000, "chat": {"id": chat, "type": "private"},
        "from": {"id": chat, "is_bot": False, "first_name": "Ann"}, "text": text}}


async def _idle(services, fake_tg: FakeTelegramAPI, sent: int, deadline: float) -> None:
    while len(fake_tg.sent) < sent or services.worker._active:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reply {sent} not sent")
        await asyncio.sleep(0.002)


async def run(db: str, n: int, chats: int, profile_to: str | None, stream: bool = False) -> None:
    from gateway.app import create_app
    from gateway.settings import load_settings

    tmp = Path(tempfile.mkdtemp(prefix="perf_message_path_"))
    url = await asyncio.to_thread(fresh_postgres_url, "perf_bench") if db == "postgres" \
        else f"sqlite+aiosqlite:///{tmp / 'gateway.db'}"
    docs = tmp / "docs"
    docs.mkdir()
    shutil.copy(HELP_CENTER / "plans-and-pricing.md", docs)
    llm = FakeOpenAI().start()
    try:
        async with FakeTelegramAPI(TOKEN) as fake_tg:
            bot = {"name": "acme", "model": "fast", "sources": [
                {"name": "help", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}],
                "channels": {"telegram": {"token": "${PERF_TG_TOKEN}", "webhook_secret": "${PERF_TG_SECRET}",
                                          "api_base": fake_tg.base_url, "stream": stream}}}
            models = [{"model_name": "fast", "litellm_params": {"model": "openai/fast", "api_base": llm.base_url,
                                                                 "api_key": "${PERF_LLM_KEY:-sk-fake}"}}]
            # A long poll interval: only the message's own wake-ups claim work, not the idle polls.
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("PERF_TG_TOKEN", TOKEN)
                patch.setenv("PERF_TG_SECRET", SECRET)
                settings = load_settings(write_config(tmp, database_url=url, bots=[bot], models=models,
                                                      worker={"poll_interval": 30, "burst_seconds": 0}))
            await asyncio.to_thread(upgrade, settings.database_url)
            app = create_app(settings, start_scheduler=False, start_channels=False)
            services = app.state.services
            async with app.router.lifespan_context(app):
                await services.knowledge.ingest()
                log = StatementLog(services.engine)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test", timeout=60) as client:
                    acks, replies, cpu, per_message, transactions = [], [], [], [], []
                    profile = cProfile.Profile() if profile_to else None
                    for i in range(n + 1):  # the first message warms up and is not counted
                        if i >= chats:  # a follow-up in its chat: the rewrite call comes first
                            llm.script("fast", Turn(text=json.dumps({"queries": ["How much is the Plus plan?"]})))
                        llm.script("fast", Turn(text=ANSWER))
                        await _idle(services, fake_tg, i, time.monotonic() + 30)
                        log.clear()
                        if profile and i == 1:
                            profile.enable()
                        t0, cpu0 = time.perf_counter(), time.process_time()
                        response = await client.post("/webhooks/acme/telegram", headers={
                            "X-Telegram-Bot-Api-Secret-Token": SECRET, "content-type": "application/json"},
                            content=json.dumps(_update(1000 + i, 5000 + i % chats, f"How much is Plus? ({i})")))
                        ack = time.perf_counter() - t0
                        response.raise_for_status()
                        while len(fake_tg.sent) < i + 1:  # a streamed answer's first send comes first
                            if time.perf_counter() - t0 > 30:
                                raise TimeoutError(f"message {i}: no reply sent")
                            await asyncio.sleep(0.001)
                        reply = time.perf_counter() - t0
                        await _idle(services, fake_tg, i + 1, time.monotonic() + 30)
                        if i:
                            cpu.append(time.process_time() - cpu0)
                            acks.append(ack)
                            replies.append(reply)
                            per_message.append(log.counts())
                            transactions.append(log.transactions)
                    if profile:
                        profile.disable()
                        profile.dump_stats(profile_to)
                    sample_sql = list(log.sql)
    finally:
        llm.stop()
        if db == "postgres" and url:
            await asyncio.to_thread(drop_postgres, url)
        shutil.rmtree(tmp, ignore_errors=True)
    _print(db + (" (streamed)" if stream else ""), n, chats, acks, replies, cpu, per_message, transactions, sample_sql)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def _print(db, n, chats, acks, replies, cpu, per_message, transactions, sample_sql) -> None:
    labels = sorted({k for c in per_message for k in c})
    statements = [sum(c.values()) for c in per_message]
    print(f"\n{db}: {n} messages one at a time over {chats} chats, model on the OpenAI fake; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"statements per message: median {statistics.median(statements)}, min {min(statements)}, "
          f"max {max(statements)}; transactions: median {statistics.median(transactions)}; round trips: "
          f"median {statistics.median(s + 2 * t for s, t in zip(statements, transactions))}")
    print(f"webhook ack: median {_pct(acks, 0.5):.1f} ms, p90 {_pct(acks, 0.9):.1f} ms; webhook → sendMessage: "
          f"median {_pct(replies, 0.5):.1f} ms, p90 {_pct(replies, 0.9):.1f} ms; CPU of this process (all its "
          f"threads, the fakes' included) per message: median {_pct(cpu, 0.5):.1f} ms\n")
    print("| statement | per message (median) | min | max |\n|---|---:|---:|---:|")
    for key in labels:
        values = [c.get(key, 0) for c in per_message]
        print(f"| {key} | {statistics.median(values):g} | {min(values)} | {max(values)} |")
    if os.environ.get("BENCH_SQL"):
        print("\nthe last message's statements:\n" + "\n".join(" ".join(s.split())[:200] for s in sample_sql))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--chats", type=int, default=5)
    parser.add_argument("--stream", action="store_true", help="the Telegram channel streams its answers")
    parser.add_argument("--profile", metavar="FILE")
    args = parser.parse_args()
    asyncio.run(run(args.db, args.n, args.chats, args.profile, args.stream))
