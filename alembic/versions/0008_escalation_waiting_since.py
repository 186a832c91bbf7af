"""escalations.waiting_since: when the current wait for a claim began

A claim can now be released (back to open); the claim timeout and its reminder count again from the
release, not from when the escalation opened. NULL means `created_at`.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 07:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('escalations', schema=None) as batch_op:
        batch_op.add_column(sa.Column('waiting_since', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('escalations', schema=None) as batch_op:
        batch_op.drop_column('waiting_since')
