"""http validators: a fetched page's ETag and Last-Modified, for conditional re-fetches

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 11:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('documents', sa.Column('etag', sa.String(length=512), nullable=True))
    op.add_column('documents', sa.Column('last_modified', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('documents', 'last_modified')
    op.drop_column('documents', 'etag')
