"""forgotten_messages: a sha256 of each inbound message `gateway forget` deleted, so an edit of it is not stored again

A private chat's edit of a message never stored is the question (its first delivery failed), and so is a group
member's edit that adds the bot's @mention: after `gateway forget`, an edit of one of the person's messages found no
message and stored the text the forget had erased. The forget now keeps a sha256 of each message's bot, channel,
chat and platform message id (nothing it said, nor whose it was), which the retention job drops after
`FORGOTTEN_KEPT_DAYS`. The downgrade drops the table.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 19:10:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0022'
down_revision = '0021'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'forgotten_messages',
        sa.Column('key', sa.String(length=64), nullable=False),
        sa.Column('forgotten_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('key'),
    )
    op.create_index('ix_forgotten_messages_forgotten_at', 'forgotten_messages', ['forgotten_at'])


def downgrade() -> None:
    op.drop_index('ix_forgotten_messages_forgotten_at', table_name='forgotten_messages')
    op.drop_table('forgotten_messages')
