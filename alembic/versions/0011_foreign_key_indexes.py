"""indexes on the foreign keys that queries and deletions look rows up by

PostgreSQL indexes no foreign key by itself. The web chat found a message's replies (`reply_to_id`)
among every outbound message, once per message; a hand-back asked the same. Deleting messages,
conversations or contacts (retention, `forget`) set `reply_to_id`, `usage.message_id`,
`usage.conversation_id` and `conversations.contact_id` to NULL, and deleted a conversation's
escalations and their events, each with a scan of the whole referencing table per deleted row.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 16:40:00
"""
from __future__ import annotations

from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

INDEXES = (
    ('ix_messages_reply_to', 'messages', ['reply_to_id']),
    ('ix_usage_message', 'usage', ['message_id']),
    ('ix_usage_conversation', 'usage', ['conversation_id']),
    ('ix_escalations_conversation', 'escalations', ['conversation_id', 'id']),
    ('ix_escalation_events_conversation', 'escalation_events', ['conversation_id']),
    ('ix_conversations_contact', 'conversations', ['contact_id']),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns, unique=False)


def downgrade() -> None:
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table)
