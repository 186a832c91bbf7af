"""What storing an edit costs in a chat with many pending messages (`python -m bench.edits`).

Stores `--pending` Telegram messages in one chat (none answered: no worker runs, as in a chat a person
holds or a long burst), then applies `--edits` edits of the newest one through `Inbox.accept`, one at a
time. Prints the median and p90 wall time, the median CPU time of this process (less moved by the machine's
other work) and the statements per edit.

    HF_HUB_OFFLINE=1 LITELLM_LOCAL_MODEL_COST_MAP=True .venv/bin/python -m bench.edits \
        [--db sqlite|postgres] [--pending 200] [--edits 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from dataclasses import replace

from bench._timing import Spread, timed
from gateway.inbox import Inbox
from gateway.models import ConversationRef, InboundMessage, Sender
from gateway.observability.logs import configure_logging
from storage.engine import create_engine, session_factory
from tests.conftest import drop_postgres, fresh_postgres_url, upgrade
from tests.statement_log import StatementLog


async def run(db: str, pending: int, edits: int) -> None:
    url = await asyncio.to_thread(fresh_postgres_url, "perf_edits") if db == "postgres" \
        else f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='bench_edits_')}/gateway.db"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url)
    try:
        inbox = Inbox(session_factory(engine))
        base = InboundMessage(channel="telegram", external_id="m", conversation=ConversationRef("telegram", chat="c1"),
                              sender=Sender("u1", display_name="Ann"), text="")
        for i in range(pending):
            await inbox.accept("acme", replace(base, external_id=f"m{i}", text=f"message {i} " + "word " * 40))
        log = StatementLog(engine)
        wall, cpu = [], []
        for j in range(edits):
            edit = replace(base, external_id=f"e{j}", text=f"edited {j}", revises=f"m{pending - 1}")
            with timed() as took:
                await inbox.accept("acme", edit)
            wall.append(took.wall_s)
            cpu.append(took.cpu_s)
    finally:
        await engine.dispose()
        if db == "postgres":
            await asyncio.to_thread(drop_postgres, url)
    wall_ms, cpu_ms = Spread.of(s * 1000 for s in wall), Spread.of(s * 1000 for s in cpu)
    print(f"{db}: {edits} edits of one message in a chat of {pending} pending messages; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}\nwall median {wall_ms.median:.2f} ms, p90 {wall_ms.p90:.2f} ms; "
          f"CPU median {cpu_ms.median:.2f} ms; statements per edit {len(log.statements) / edits:g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--edits", type=int, default=100)
    args = parser.parse_args()
    configure_logging(level="WARNING")  # not a line per message stored
    asyncio.run(run(args.db, args.pending, args.edits))
