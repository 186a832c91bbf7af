"""delivery ids per message: a platform message id is unique only within its chat on Telegram
(numbered per chat) and Slack (`ts` per channel), so (channel, provider_id) is no longer unique

The second chat to get a reply with the same id made recording it fail, the row stayed `sending`,
and the reply was sent again. Now one reply's parts are unique, and receipts look ids up by index.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 05:00:00
"""
from __future__ import annotations

from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_constraint('uq_deliveries_provider_id', type_='unique')
        batch_op.create_unique_constraint('uq_deliveries_message_part', ['message_id', 'provider_id'])
        batch_op.create_index('ix_deliveries_provider_id', ['channel', 'provider_id'], unique=False)


def downgrade() -> None:
    # The old key cannot hold two chats' parts with one id: keep the first of each, as before 0007.
    op.execute(
        "DELETE FROM deliveries WHERE id NOT IN (SELECT MIN(id) FROM deliveries GROUP BY channel, provider_id)")
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_provider_id')
        batch_op.drop_constraint('uq_deliveries_message_part', type_='unique')
        batch_op.create_unique_constraint('uq_deliveries_provider_id', ['channel', 'provider_id'])
