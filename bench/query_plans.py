"""PostgreSQL's plans for the queries the worker, the web chat and the console run per message or per view.

Creates a database, migrates it to head, fills it with `--conversations` conversations of `--messages`
messages each (one in ten escalated, half of those resolved, a usage row per reply) and one long-lived
chat of `--long` messages, ANALYZEs, then prints for each query its plan's top line, whether it scans a
whole table, and the time of `EXPLAIN ANALYZE` (best of 3). The statements are written as the code writes
them (storage/repositories.py, the web chat, escalations, retention), compiled with their values.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.query_plans [--conversations 3000] [--messages 20] [--long 20000] \
        [--revision head]

Not a test: plans depend on the data's size and PostgreSQL's statistics.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
from datetime import timedelta

import asyncpg
from sqlalchemy import delete, exists, func, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import aliased

from gateway.models import utcnow
from storage import repositories as repo
from storage.models import Escalation, EscalationEvent, Message, Usage
from tests.conftest import drop_postgres, fresh_postgres_url, upgrade

SEED = """
INSERT INTO contacts (channel, external_id, display_name, created_at)
  SELECT 'telegram', 'u' || i, 'User ' || i, now() FROM generate_series(1, {n}) i;
INSERT INTO conversations (bot, channel, workspace, chat, thread, contact_id, state, unanswered_turns, created_at, updated_at)
  SELECT 'acme', 'telegram', '', 'c' || i, '', i, 'bot', 0, now(), now() FROM generate_series(1, {n}) i;
INSERT INTO messages (conversation_id, bot, channel, direction, author, external_id, text, attachments, meta, citations,
                      tool_calls, retrieved, status, attempts, provider_ids, created_at, updated_at)
  SELECT c, 'acme', 'telegram', CASE WHEN k % 2 = 0 THEN 'in' ELSE 'out' END,
         CASE WHEN k % 2 = 0 THEN 'contact' ELSE 'bot' END, CASE WHEN k % 2 = 0 THEN c || '-' || k END,
         'message ' || k, '[]', '{{}}', '[]', '[]', '[]', CASE WHEN k % 2 = 0 THEN 'done' ELSE 'sent' END, 1, '[]',
         now(), now()
  FROM generate_series(1, {n}) c, generate_series(0, {m} - 1) k;
INSERT INTO messages (conversation_id, bot, channel, direction, author, external_id, text, attachments, meta, citations,
                      tool_calls, retrieved, status, attempts, provider_ids, created_at, updated_at)
  SELECT 1, 'acme', 'telegram', CASE WHEN k % 2 = 0 THEN 'in' ELSE 'out' END, 'contact',
         CASE WHEN k % 2 = 0 THEN 'long-' || k END, 'message ' || k, '[]', '{{}}', '[]', '[]', '[]',
         CASE WHEN k % 2 = 0 THEN 'done' ELSE 'sent' END, 1, '[]', now(), now()
  FROM generate_series(0, {long} - 1) k;
UPDATE messages SET reply_to_id = id - 1 WHERE direction = 'out';
INSERT INTO usage (bot, conversation_id, message_id, model, prompt_tokens, completion_tokens, cost_usd, partial, created_at)
  SELECT 'acme', conversation_id, id, 'fast', 100, 20, 0.001, false, now() FROM messages WHERE direction = 'out';
INSERT INTO escalations (conversation_id, bot, state, reason, notes, created_at)
  SELECT i, 'acme', CASE WHEN i % 20 = 0 THEN 'resolved' ELSE 'open' END, 'asked', '[]', now()
  FROM generate_series(10, {n}, 10) i;
INSERT INTO escalation_events (escalation_id, conversation_id, kind, actor, reason, created_at)
  SELECT id, conversation_id, 'opened', 'bot', '', now() FROM escalations;
ANALYZE;
"""


def queries(long_last_id: int) -> list[tuple[str, object]]:
    """(what, statement) for the queries on a message's path and the console's views."""
    now = utcnow()
    reply = aliased(Message)
    return [
        ("worker: conversations with work", select(Message.conversation_id).where(
            Message.direction.in_(("in", "out")), Message.status == "pending").distinct()),
        ("worker: next pending message (long chat)", repo.next_pending_query(1)),
        ("worker: history (long chat)", select(Message).where(
            Message.conversation_id == 1, Message.status.not_in(("ignored",)), Message.id < long_last_id)
            .order_by(Message.id.desc()).limit(10)),
        ("worker: requeue stalled sends", select(Message.id).where(
            Message.direction == "out", Message.status == "sending", Message.updated_at < now - timedelta(seconds=60))),
        ("web chat: the replies to a message", select(Message).where(
            Message.reply_to_id == long_last_id - 1, Message.direction == "out").order_by(Message.id)),
        ("escalation: live escalation of a conversation", select(Escalation).where(
            Escalation.conversation_id == 20, Escalation.state.in_(("open", "claimed")))
            .order_by(Escalation.id.desc()).limit(1)),
        ("hand-back: requeue a message nothing answered", select(Message.id).where(
            Message.id == long_last_id - 1, ~exists().where(reply.reply_to_id == long_last_id - 1,
                                                            reply.direction == "out"))),
        ("console: escalation queue", select(Escalation).where(Escalation.bot.in_(["acme"]),
                                                               Escalation.state.in_(["open"]))
            .order_by(Escalation.id.desc()).limit(200)),
        ("console: last customer messages", select(func.max(Message.id)).where(
            Message.conversation_id.in_(list(range(10, 2010, 10))), Message.direction == "in",
            Message.author == "contact").group_by(Message.conversation_id)),
        ("console: escalation events", select(EscalationEvent).where(EscalationEvent.escalation_id == 5)
            .order_by(EscalationEvent.id)),
        ("retention: usage of deleted messages (ON DELETE SET NULL)", select(Usage.id).where(
            Usage.message_id == long_last_id - 1)),
        ("retention: replies to deleted messages (ON DELETE SET NULL)", select(Message.id).where(
            Message.reply_to_id == long_last_id - 1)),
        ("retention: delete a conversation's escalations", delete(Escalation).where(
            Escalation.conversation_id.in_([20, 40]))),
        ("budget: today's spending", select(func.sum(Usage.cost_usd)).where(
            Usage.bot == "acme", Usage.created_at >= now - timedelta(days=1))),
    ]


def _sql(statement) -> str:
    return str(statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))


async def explain(dsn: str, long_last_id: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        print("| query | plan (top node) | whole-table scan | ms (best of 3) |\n|---|---|---|---:|")
        for what, statement in queries(long_last_id):
            sql = _sql(statement)
            times, plan = [], []
            for _ in range(3):
                transaction = conn.transaction()  # rolled back: the DELETE deletes nothing
                await transaction.start()
                try:
                    plan = [r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")]
                finally:
                    await transaction.rollback()
                times.append(float(re.search(r"Execution Time: ([\d.]+)", plan[-1]).group(1)))
            seq = sorted({m.group(1) for line in plan if (m := re.search(r"Seq Scan on (\w+)", line))})
            top = plan[0].split("  (")[0].strip()
            print(f"| {what} | {top} | {', '.join(seq) or 'no'} | {min(times):.2f} |")
            if os.environ.get("BENCH_PLANS"):
                print("\n".join("    " + line for line in plan))
    finally:
        await conn.close()


async def main(n: int, m: int, long: int, revision: str) -> None:
    url = await asyncio.to_thread(fresh_postgres_url, "perf_plans")
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    try:
        await asyncio.to_thread(upgrade, url, revision)
        conn = await asyncpg.connect(dsn)
        await conn.execute(SEED.format(n=n, m=m, long=long))
        long_last_id = await conn.fetchval("SELECT max(id) FROM messages WHERE conversation_id = 1")
        total = await conn.fetchval("SELECT count(*) FROM messages")
        await conn.close()
        print(f"\n{n} conversations, {total} messages (one chat of {long}), PostgreSQL "
              f"{await _version(dsn)}, schema at {revision}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
        await explain(dsn, long_last_id)
    finally:
        await asyncio.to_thread(drop_postgres, url)


async def _version(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return (await conn.fetchval("SHOW server_version")).split()[0]
    finally:
        await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--long", type=int, default=20000)
    parser.add_argument("--revision", default="head", help="migrate only this far (the schema before a change)")
    args = parser.parse_args()
    asyncio.run(main(args.conversations, args.messages, args.long, args.revision))
