"""Every id list the retention purge and `gateway forget` name stays under a statement's parameters.

PostgreSQL takes 32,767 parameters a statement: 1,000 expired group conversations of 40 writers each
are more people than that. `IDS_PER_STATEMENT` and `PURGE_BATCH` small here stand in for those sizes.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import event

import gateway.retention as retention
from gateway.models import utcnow
from gateway.retention import forget_contact, purge_expired
from gateway.settings import Settings
from storage.engine import create_engine, session_factory
from storage.models import Contact, Conversation
from tests.scale.test_retention import _age_everything, _count, _member_writes, _store

LIMIT = 3  # ids a statement may name here


def _largest_parameter_lists(engine) -> list[int]:
    """The parameter count of every statement `engine` runs from now on."""
    sizes: list[int] = []
    event.listen(engine.sync_engine, "before_cursor_execute",
                 lambda _c, _cur, _sql, parameters, _ctx, _many: sizes.append(len(parameters or ())))
    return sizes


async def test_a_batch_of_groups_with_many_writers_is_purged_within_a_statements_parameters(
        migrated_url, monkeypatch) -> None:
    monkeypatch.setattr(retention, "PURGE_BATCH", 2)
    monkeypatch.setattr(retention, "IDS_PER_STATEMENT", LIMIT, raising=False)
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    settings = Settings(database_url=migrated_url, bots=[{"name": "acme", "retention_days": 30}])
    try:
        for group in range(2):
            await _store(sessions, bot="acme", channel="telegram", user=f"first-{group}", chat=f"-100g{group}")
            for member in range(9):
                await _member_writes(sessions, bot="acme", chat=f"-100g{group}", member=f"m{group}-{member}",
                                     text="me too")
        await _age_everything(sessions, utcnow() - timedelta(days=45))
        sizes = _largest_parameter_lists(engine)
        report = await purge_expired(sessions, settings)
        assert report.conversations == 2 and report.contacts == 20
        assert await _count(sessions, Contact) == 0 and await _count(sessions, Conversation) == 0
        # Each statement: at most LIMIT ids, besides a few values of its own (bot, cutoff, now, channel…).
        assert max(sizes) <= LIMIT + 8, sorted(sizes)[-5:]
    finally:
        await engine.dispose()


async def test_forgetting_a_contact_of_many_conversations_names_them_a_part_at_a_time(
        migrated_url, monkeypatch) -> None:
    monkeypatch.setattr(retention, "IDS_PER_STATEMENT", LIMIT, raising=False)
    engine = create_engine(migrated_url)
    sessions = session_factory(engine)
    try:
        for group in range(LIMIT * 4):  # a customer who started many groups (or Slack threads)
            await _store(sessions, bot="acme", channel="telegram", user="4242", chat=f"-100f{group}", n=1)
        sizes = _largest_parameter_lists(engine)
        report = await forget_contact(sessions, channel="telegram", user="4242")
        assert report.conversations == LIMIT * 4 and report.contacts == 1
        assert await _count(sessions, Conversation) == 0
        assert max(sizes) <= LIMIT + 8, sorted(sizes)[-5:]
    finally:
        await engine.dispose()
