"""removed_chats: chats a bot was removed from, kept in the store rather than in one process's memory

Telegram tells a bot it was removed from a chat (kicked from a group, blocked in private) once, by
`my_chat_member`, to whichever replica received that update: only that process failed later replies there
at once, and only until it restarted; every other replica, and the restarted one, sent each reply for a 403.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 22:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('removed_chats',
    sa.Column('bot', sa.String(length=64), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=False),
    sa.Column('chat', sa.String(length=255), nullable=False),
    sa.Column('removed_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('bot', 'channel', 'chat')
    )


def downgrade() -> None:
    op.drop_table('removed_chats')
