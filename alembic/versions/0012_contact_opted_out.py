"""contacts.opted_out_at: when a WhatsApp customer sent STOP (cleared by START)

Twilio stops delivering to a number that opted out (error 21610); the bot answered STOP as a question
and kept answering, and operators' replies to such a customer failed one by one.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 17:05:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('contacts') as batch:
        batch.add_column(sa.Column('opted_out_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('contacts') as batch:
        batch.drop_column('opted_out_at')
