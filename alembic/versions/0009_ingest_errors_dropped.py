"""ingest_runs.errors_dropped: how many errors a run had past the ones it keeps

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 16:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('ingest_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('errors_dropped', sa.Integer(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('ingest_runs', schema=None) as batch_op:
        batch_op.drop_column('errors_dropped')
