"""conversations.held_template_id: the newest reply a WhatsApp template went out in place of

Storing each WhatsApp message looked through the conversation's last replies for ones a template stood in
for, one query more per message when almost none has any; the outbox now marks the conversation, and only
a marked one is looked at. Existing WhatsApp conversations with replies are marked, so a reply held before
the upgrade is still sent after the customer's next message (the first look clears the mark).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 19:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('conversations') as batch:
        batch.add_column(sa.Column('held_template_id', sa.Integer(), nullable=True))
    op.execute("UPDATE conversations SET held_template_id = (SELECT max(messages.id) FROM messages "
               "WHERE messages.conversation_id = conversations.id AND messages.direction = 'out') "
               "WHERE channel = 'whatsapp'")


def downgrade() -> None:
    with op.batch_alter_table('conversations') as batch:
        batch.drop_column('held_template_id')
