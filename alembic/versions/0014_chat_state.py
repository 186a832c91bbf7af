"""removed_chats, unfinished_chat_moves: what one process's memory held, kept in the store

Telegram tells a bot it was removed from a chat (kicked from a group, blocked in private) once, by
`my_chat_member`, to whichever replica received that update: only that process failed later replies there
at once, and only until it restarted; every other replica, and the restarted one, sent each reply for a 403.

A group's move to its supergroup's id that found workers in both conversations of a pair was tried again
only by the process that made it, before the next message it stored: after its restart, or when other
replicas stored the chat's messages, the pair stayed apart, since Telegram does not tell the upgrade again.

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
    op.create_table('unfinished_chat_moves',
    sa.Column('bot', sa.String(length=64), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=False),
    sa.Column('workspace', sa.String(length=255), nullable=False),
    sa.Column('chat', sa.String(length=255), nullable=False),
    sa.Column('new_chat', sa.String(length=255), nullable=False),
    sa.Column('since', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('bot', 'channel', 'workspace', 'chat')
    )


def downgrade() -> None:
    op.drop_table('unfinished_chat_moves')
    op.drop_table('removed_chats')
