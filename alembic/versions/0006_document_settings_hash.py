"""document settings hash: the ingest settings a document's chunks were made with

A page's HTTP validators are sent only when its chunks were made under the current settings; a 304
to a page chunked by another chunker version, model or chunk size would keep those chunks.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 05:00:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('documents', sa.Column('settings_hash', sa.String(length=64), nullable=True))


def downgrade() -> None:
    op.drop_column('documents', 'settings_hash')
