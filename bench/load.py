"""Load benchmark: N signed Telegram webhooks at a concurrency against real server processes on PostgreSQL.

Prints acknowledgement latency p50/p99 and end-to-end replies/s (webhook in → sendMessage observed at a
fake Telegram API) for 1 and 2 replicas, for one `serve --role web` receiver in front of one worker
process, and, side by side, a bare FastAPI endpoint that only acknowledges, with the ratio. The LLM is the offline responder (in process, no network: zero model
latency), the knowledge base is empty, so this measures the gateway's own overhead.

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.load --n 300 --concurrency 20

Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

from tests.fakes.telegram_api import FakeTelegramAPI
from tests.scale.replicas import SECRET, TOKEN, Replica, _env, db_upgrade, free_port, replica_config, telegram_update

ADMIN_DSN = "postgresql://root@127.0.0.1:5432/test"
BARE_APP = ("from fastapi import FastAPI, Request\napp = FastAPI()\n"
            "@app.post('/webhooks/{bot}/telegram')\nasync def ack(bot: str, request: Request):\n"
            "    await request.body()\n    return {'ok': True}\n"
            "@app.get('/healthz')\nasync def health():\n    return {'status': 'ok'}\n")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def _fire(urls: list[str], n: int, concurrency: int, chat_base: int) -> tuple[list[float], float]:
    """Send n updates (round-robin over urls) with `concurrency` in flight; returns ack latencies, start."""
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    started = time.monotonic()

    async def sender(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            update = telegram_update(chat_base + i, chat_id=chat_base + i % 50, text=f"load question {i}")
            t0 = time.monotonic()
            response = await client.post(f"{urls[i % len(urls)]}/webhooks/shop/telegram", json=update,
                                          headers={"X-Telegram-Bot-Api-Secret-Token": SECRET}, timeout=30)
            latencies.append(time.monotonic() - t0)
            response.raise_for_status()

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(limits=limits) as client:
        await asyncio.gather(*(sender(client) for _ in range(concurrency)))
    return latencies, started


async def _gateway_run(replicas_n: int, n: int, concurrency: int, tmp: Path, *, web_n: int = 0) -> dict:
    """`replicas_n` full processes plus `web_n` receive-only ones; webhooks go to the receivers if any."""
    name = f"gw_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(ADMIN_DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    url = ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://") + f"/{name}"
    replicas: list[Replica] = []
    try:
        async with FakeTelegramAPI(TOKEN) as fake:
            configs = [replica_config(tmp, database_url=url, telegram_api=fake.base_url, index=i, lease_seconds=10)
                       for i in range(replicas_n + web_n)]
            await asyncio.to_thread(db_upgrade, configs[0])
            replicas = [Replica(c, role="all" if i < replicas_n else "web") for i, c in enumerate(configs)]
            for replica in replicas:
                replica.start()
            await asyncio.gather(*(r.wait_ready() for r in replicas))
            receivers = replicas[replicas_n:] or replicas
            latencies, started = await _fire([r.url for r in receivers], n, concurrency, chat_base=1_000_000)
            while len(fake.sent) < n and time.monotonic() - started < 300:
                await asyncio.sleep(0.05)
            elapsed = time.monotonic() - started
            setup = f"gateway x{replicas_n}" + (f" + web x{web_n}" if web_n else "") + " (PostgreSQL)"
            return {"setup": setup, "p50": _pct(latencies, 0.5),
                    "p99": _pct(latencies, 0.99), "replies_s": len(fake.sent) / elapsed, "replies": len(fake.sent)}
    finally:
        for replica in replicas:
            replica.stop()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _bare_run(n: int, concurrency: int, tmp: Path) -> dict:
    (tmp / "bare_app.py").write_text(BARE_APP)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(port), "--log-level",
                             "warning"], cwd=tmp, env=_env())
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(100):
                try:
                    await client.get(f"http://127.0.0.1:{port}/healthz")
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
        latencies, started = await _fire([f"http://127.0.0.1:{port}"], n, concurrency, chat_base=1)
        elapsed = time.monotonic() - started
        return {"setup": "bare FastAPI ack", "p50": _pct(latencies, 0.5), "p99": _pct(latencies, 0.99),
                "replies_s": None, "acks_s": n / elapsed}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def main(n: int, concurrency: int) -> None:
    """Run the four setups and print the table."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        bare = await _bare_run(n, concurrency, tmp)
        rows = []
        for full, web in ((1, 0), (2, 0), (1, 1)):
            (tmp / f"r{full}{web}").mkdir()
            rows.append(await _gateway_run(full, n, concurrency, tmp / f"r{full}{web}", web_n=web))
    print(f"\nN={n} webhooks, concurrency={concurrency}, offline LLM, fake Telegram API\n")
    print("| setup | ack p50 ms | ack p99 ms | p50 vs bare | end-to-end replies/s |")
    print("|---|---:|---:|---:|---:|")
    print(f"| {bare['setup']} | {bare['p50']:.1f} | {bare['p99']:.1f} | 1.0x | n/a (acks/s {bare['acks_s']:.0f}) |")
    for row in rows:
        print(f"| {row['setup']} | {row['p50']:.1f} | {row['p99']:.1f} | {row['p50'] / bare['p50']:.1f}x "
              f"| {row['replies_s']:.1f} ({row['replies']}/{n}) |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.n, args.concurrency))
