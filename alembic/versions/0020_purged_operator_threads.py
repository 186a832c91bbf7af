"""purged_operator_threads: the Slack operator threads of purged conversations, kept until Slack has them deleted

The retention job deleted the gateway's posts in those threads after the purge, at most 500 a run, from a list
only that run held: the threads past the bound, those Slack refused and those of a run stopped meanwhile were
named in a warning and never tried again. They are stored with the purge now, and each run takes up to 500 of
them (gateway/operators/slack_purged.py). The downgrade drops the table: the threads still in it stay in Slack.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 13:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0020'
down_revision = '0019'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'purged_operator_threads',
        sa.Column('bot', sa.String(length=64), nullable=False),
        sa.Column('channel', sa.String(length=255), nullable=False),
        sa.Column('ts', sa.String(length=64), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('why', sa.Text(), nullable=True),
        sa.Column('since', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('bot', 'channel', 'ts'),
    )


def downgrade() -> None:
    op.drop_table('purged_operator_threads')
