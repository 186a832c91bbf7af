"""purged_operator_threads.tried: when a thread's last attempt was made, so each run takes the threads waiting longest

A run took the threads tried the fewest times first, up to its bound of 500: a thread Slack had refused waited
behind every new one, so with more new threads a run than the bound (a daily purge of over 500 escalated
conversations) it was never tried again. A run now takes them by their last attempt, a thread never tried by
when it was stored (`since`). Existing rows keep NULL (none tried yet as far as the order knows: they go by their
`since`). The downgrade drops the column.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 16:10:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('purged_operator_threads') as batch:
        batch.add_column(sa.Column('tried', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('purged_operator_threads') as batch:
        batch.drop_column('tried')
