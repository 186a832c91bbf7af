"""The retention purge's batches on a large PostgreSQL store, people looked up by `meta->>'sender'` (the code
before migration 0016, `before_0016`: both look-ups by sender) and by the indexed `messages.sender` column (now).

Creates a database at `0015`, fills it with `--conversations` Telegram conversations of `--messages`
messages (half of them inbound, each naming its sender in `meta`; one contact per conversation), times
`gateway db upgrade` to head (0016: the column's backfill and index), ANALYZEs, prints both plans of the
purge's "has this contact written anything left?" look-up, and times `--runs` purge batches each way:
`--before-batch` expired conversations a batch with the old look-ups (their cost grows with the batch),
`--batch` (the purge's own 1,000) with the column. Each way purges a bot of its own, so both read the same
store; a batch is timed from its locks to its last statement (`_purge_batch`: its commit is not in it).

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.retention_purge [--conversations 20000] [--messages 20] \
        [--runs 3] [--batch 1000] [--before-batch 100]

Not a test: times depend on the machine, its load and PostgreSQL's statistics.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import asyncpg
from sqlalchemy import delete, exists, select
from sqlalchemy.dialects import postgresql

import gateway.retention as retention
from gateway.models import utcnow
from gateway.settings import Settings
from storage.engine import create_engine, session_factory
from storage.models import Contact, Conversation, Message
from tests.conftest import drop_postgres, fresh_postgres_url, upgrade

# Conversations 1..{old} belong to bot "before", the next {new} to "after", the rest to "keep"; those of the
# first two are 45 days old (a 30-day period expires them), the rest written today.
SEED = """
INSERT INTO contacts (channel, external_id, display_name, created_at, last_inbound_at)
  SELECT 'telegram', 'u' || i, 'User ' || i, CASE WHEN i <= {expired} THEN now() - interval '45 days' ELSE now() END,
         CASE WHEN i <= {expired} THEN now() - interval '45 days' ELSE now() END FROM generate_series(1, {n}) i;
INSERT INTO conversations (bot, channel, workspace, chat, thread, contact_id, state, unanswered_turns, created_at, updated_at)
  SELECT CASE WHEN i <= {old} THEN 'before' WHEN i <= {expired} THEN 'after' ELSE 'keep' END, 'telegram', '', 'c' || i,
         '', i, 'bot', 0, CASE WHEN i <= {expired} THEN now() - interval '45 days' ELSE now() END, now()
  FROM generate_series(1, {n}) i;
INSERT INTO messages (conversation_id, bot, channel, direction, author, external_id, text, attachments, meta, citations,
                      tool_calls, retrieved, status, attempts, provider_ids, created_at, updated_at)
  SELECT c.id, c.bot, 'telegram', CASE WHEN k % 2 = 0 THEN 'in' ELSE 'out' END,
         CASE WHEN k % 2 = 0 THEN 'contact' ELSE 'bot' END, c.id || '-' || k, 'message ' || k, '[]',
         CAST(CASE WHEN k % 2 = 0 THEN json_build_object('sender', 'u' || c.id, 'platform_message_id', k)::text
              ELSE '{{}}' END AS json),
         '[]', '[]', '[]', CASE WHEN k % 2 = 0 THEN 'done' ELSE 'sent' END, 1, '[]', c.created_at, c.created_at
  FROM conversations c, generate_series(0, {m} - 1) k;
"""


def _meta_sender():
    """An inbound message's sender as the code before 0016 read it, everywhere: from `meta` alone."""
    return Message.meta["sender"].as_string()


def _by_meta():
    """The purge's "has this contact written anything left?" look-up as it was before 0016 (gateway/retention.py
    then)."""
    return (Message.direction == "in") & (Message.channel == Contact.channel) & (_meta_sender() == Contact.external_id)


@contextmanager
def before_0016() -> Iterator[None]:
    """The purge's two look-ups by sender as the code before 0016 made them: the one above, and that of the
    writers of the conversations a batch deletes (`_people_of`, which reads `stored_sender`: the column,
    else `meta`, since a gateway older than 0016 may still write)."""
    patched = {"_sent_by_contact": _by_meta, "stored_sender": _meta_sender}  # as gateway/retention.py names them
    original = {name: getattr(retention, name) for name in patched}
    for name, function in patched.items():
        setattr(retention, name, function)
    try:
        yield
    finally:
        for name, function in original.items():
            setattr(retention, name, function)


def _orphans(sent, part: list[int]):
    """The purge's delete of the people of a batch left with nothing (`_purge_batch`), as it writes it."""
    cutoff = utcnow() - timedelta(days=30)
    orphans = select(Contact.id).where(~exists().where(Conversation.contact_id == Contact.id), ~exists().where(sent),
                                       Contact.created_at < cutoff,
                                       Contact.last_inbound_at.is_(None) | (Contact.last_inbound_at < cutoff))
    return delete(Contact).where(Contact.id.in_(orphans.where(Contact.id.in_(part)).with_for_update(skip_locked=True)))


async def _plans(dsn: str) -> None:
    """The plan of the delete of a batch's orphans, 1,000 contacts, each way (EXPLAIN only: the old one
    runs for long)."""
    conn = await asyncpg.connect(dsn)
    try:
        for what, sent in (("meta->>'sender'", _by_meta()), ("messages.sender", retention._sent_by_contact())):
            query = _orphans(sent, list(range(1, 1001)))
            sql = str(query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
            plan = [r[0] for r in await conn.fetch(f"EXPLAIN {sql}")]
            print(f"plan, look-up by {what}:")
            print("\n".join("    " + (line if len(line) < 150 else line[:146] + " ...") for line in plan))
    finally:
        await conn.close()


async def _purge(url: str, bot: str, batch: int, runs: int) -> list[float]:
    """Seconds of each of `runs` purge batches of `batch` conversations of `bot`."""
    times: list[float] = []
    original = retention._purge_batch

    async def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return await original(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - started)

    retention._purge_batch, retention.PURGE_BATCH = timed, batch
    engine = create_engine(url)
    try:
        settings = Settings(database_url=url, bots=[{"name": bot, "retention_days": 30}])
        report = await retention.purge_expired(session_factory(engine), settings)
    finally:
        retention._purge_batch = original
        await engine.dispose()
    assert report.conversations == batch * runs and report.contacts == batch * runs, report.as_dict()
    return times[:runs]  # the last call finds nothing left


async def main(n: int, m: int, runs: int, batch: int, before_batch: int) -> None:
    url = await asyncio.to_thread(fresh_postgres_url, "perf_retention")
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    old, new = before_batch * runs, batch * runs
    try:
        await asyncio.to_thread(upgrade, url, "0015")
        conn = await asyncpg.connect(dsn)
        await conn.execute(SEED.format(n=n, m=m, old=old, expired=old + new))
        total = await conn.fetchval("SELECT count(*) FROM messages")
        version = (await conn.fetchval("SHOW server_version")).split()[0]
        await conn.close()
        started = time.perf_counter()
        await asyncio.to_thread(upgrade, url)
        migrated = time.perf_counter() - started
        conn = await asyncpg.connect(dsn)
        await conn.execute("ANALYZE")
        await conn.close()
        print(f"\n{n} conversations and contacts, {total} messages ({total // 2} inbound), PostgreSQL {version}, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"migration 0015 -> head (0016: backfill of messages.sender and its index): {migrated:.1f} s\n")
        await _plans(dsn)
        print()
        with before_0016():
            before = await _purge(url, "before", before_batch, runs)
        after = await _purge(url, "after", batch, runs)
        for what, size, times in (("meta->>'sender' (before 0016)", before_batch, before),
                                  ("messages.sender (0016)", batch, after)):
            print(f"purge batch of {size} conversations, look-up by {what}: "
                  f"{', '.join(f'{t:.2f}' for t in times)} s ({len(times)} batches; "
                  f"{1000 * min(times) / size:.1f} ms a conversation at best)")
    finally:
        await asyncio.to_thread(drop_postgres, url)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=20000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="batches timed each way")
    parser.add_argument("--batch", type=int, default=1000, help="conversations a batch, with the column")
    parser.add_argument("--before-batch", type=int, default=100, help="conversations a batch, the old look-up")
    args = parser.parse_args()
    asyncio.run(main(args.conversations, args.messages, args.runs, args.batch, args.before_batch))
