"""early receipts: delivery receipts that arrive before the send they name is recorded

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 03:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('early_receipts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=False),
    sa.Column('provider_id', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error_code', sa.String(length=64), nullable=True),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('channel', 'provider_id', name='uq_early_receipts_provider_id')
    )
    op.create_index(op.f('ix_early_receipts_received_at'), 'early_receipts', ['received_at'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_early_receipts_received_at'), table_name='early_receipts')
    op.drop_table('early_receipts')
