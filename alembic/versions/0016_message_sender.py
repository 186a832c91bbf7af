"""messages.sender: who sent an inbound message, in an indexed column (it was only in `meta`)

The retention purge asks, for each contact of the conversations it deletes, whether they wrote anything
else, and `gateway forget` looks for a person's messages: both compared `meta->>'sender'`, which no index
covers, so each contact read every message (at 400,000 messages a batch of 1,000 contacts ran for minutes
on PostgreSQL). An index on that expression would parse every row's `meta` as it is built. Each inbound
message's sender is copied from its `meta` here, parsed in Python (as 0015 reads them) a batch at a time;
`meta` keeps it too. The migration is one transaction: on PostgreSQL `messages` is locked (ADD COLUMN)
until it commits (95 s at 400,000 messages on a 2-core machine, bench/README.md).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 03:30:00
"""
from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None

BATCH = 1000
UNKNOWN_SENDER = "direction = 'in' AND sender IS NULL"


def upgrade() -> None:
    with op.batch_alter_table('messages') as batch:
        batch.add_column(sa.Column('sender', sa.String(length=255), nullable=True))
    bind = op.get_bind()
    messages = sa.table("messages", sa.column("id", sa.Integer), sa.column("sender", sa.String))
    after = 0
    while True:
        rows = bind.execute(sa.text(
            "SELECT id, CAST(meta AS TEXT) FROM messages WHERE id > :after AND direction = 'in' "
            "ORDER BY id LIMIT :batch"), {"after": after, "batch": BATCH}).all()
        if not rows:
            break
        senders = [{"message_id": message_id, "found": sender} for message_id, stored in rows
                   if (sender := _sender(stored)) is not None]
        if senders:
            bind.execute(messages.update().where(messages.c.id == sa.bindparam("message_id"))
                         .values(sender=sa.bindparam("found")), senders)
        after = rows[-1][0]
    # Built once the column is filled: one pass over it rather than an index update per row.
    op.create_index('ix_messages_sender', 'messages', ['sender'], unique=False)
    # The inbound messages without one (a gateway older than 0016 still running: a rollback, a replica not yet
    # replaced), which `gateway forget` reads `meta.sender` of: without it, every outbound row too.
    op.create_index('ix_messages_sender_unknown', 'messages', ['id'], unique=False,
                    postgresql_where=sa.text(UNKNOWN_SENDER), sqlite_where=sa.text(UNKNOWN_SENDER))


def _sender(stored: str | None) -> str | None:
    meta = json.loads(stored) if stored else None
    sender = meta.get("sender") if isinstance(meta, dict) else None
    return sender if isinstance(sender, str) else None


def downgrade() -> None:
    op.drop_index('ix_messages_sender_unknown', table_name='messages')
    op.drop_index('ix_messages_sender', table_name='messages')
    with op.batch_alter_table('messages') as batch:
        batch.drop_column('sender')
