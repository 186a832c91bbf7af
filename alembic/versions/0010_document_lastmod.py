"""documents.lastmod: a sitemap page's <lastmod> when it was read, so an unchanged one is not fetched

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06 17:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('documents', sa.Column('lastmod', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('documents', schema=None) as batch_op:
        batch_op.drop_column('lastmod')
