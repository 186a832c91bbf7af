"""SQLite never gives an id again: every table with an `id` is rebuilt with AUTOINCREMENT (nothing on PostgreSQL)

Without AUTOINCREMENT SQLite gives a new row the highest id + 1, so once the newest rows were deleted (`gateway
forget`, the retention purge) their ids were given again: a new chat got the conversation id just forgotten, and
an operator's console link, a log line, an audit note or a Slack operator post naming it then named another
customer's conversation (the same for a message, escalation, contact). PostgreSQL's sequences never go back.

SQLite cannot add AUTOINCREMENT to a table: each is copied into a new one made with it (Alembic's batch mode: same
columns, keys, indexes, the partial one too, and rows). Copying the rows sets each table's counter
(`sqlite_sequence`) to its highest id: an id freed before this migration and above that is given once more (it
cannot be known now), none after. A table already made so (an upgrade again after a downgrade) is left as it is,
its counter with it. One transaction: a table is locked while it is copied, every row (3.3 s for 200,000
messages, 100 MB, on a 2-core machine), and the file needs room for a copy of the largest table.

The downgrade leaves the tables as they are: the columns are the same, a gateway of an older version runs on them
as it did (migrations only add), and tables made without it again would only give freed ids again.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 10:50:00
"""
from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = '0018'
down_revision = '0017'
branch_labels = None
depends_on = None

TABLES = ('contacts', 'conversations', 'messages', 'escalations', 'escalation_events', 'usage', 'documents',
          'ingest_runs', 'deliveries', 'early_receipts', 'data_deletions')
"""Every table whose primary key is an integer `id` (storage.models: their `NEVER_REUSED`)."""
AUTOINCREMENT = re.compile(r"\bAUTOINCREMENT\b", re.IGNORECASE)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != 'sqlite':
        return  # PostgreSQL's serial ids come from sequences, which never give an id twice
    if bind.execute(sa.text("PRAGMA foreign_keys")).scalar():
        # Each old table is dropped once copied: with foreign keys on, dropping `conversations` deletes every
        # message and escalation (ON DELETE CASCADE). alembic/env.py turns them off; a connection given to
        # Alembic by other means must too (outside a transaction: SQLite ignores the PRAGMA inside one).
        raise RuntimeError("migration 0018 copies tables: run it with PRAGMA foreign_keys=OFF (as `gateway db "
                           "upgrade` does), or dropping a copied table would delete the rows that refer to it")
    for table in TABLES:
        created = bind.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
                               {"name": table}).scalar_one()
        if AUTOINCREMENT.search(created):
            continue
        with op.batch_alter_table(table, recreate='always', table_kwargs={'sqlite_autoincrement': True}):
            pass


def downgrade() -> None:
    pass
