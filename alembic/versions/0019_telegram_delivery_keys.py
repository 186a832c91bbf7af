"""Telegram messages stored in the last two days get their delivery key as the gateway now makes it

A Telegram message's `external_id` was its update id; it is now `update_id:chat:message_id`
(`channels.telegram_updates.delivery_key`: Telegram restarts update ids after a week without updates). An update
stored by the older gateway and sent again after the upgrade (Telegram resends a webhook delivery it got no answer
to, and getUpdates one whose offset was not moved past before the stop, for 24 hours) came under its new key,
was stored as a new message and answered a second time. The inbound Telegram messages of the last two days whose
key is an update id alone get the new one (their chat, and the message id in `meta.platform_message_id`); older
ones are never sent again. Values only, no column: the downgrade leaves them (an older gateway reads any key).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 11:10:00
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from alembic import op

revision = '0019'
down_revision = '0018'
branch_labels = None
depends_on = None

RESENT_FOR = timedelta(days=2)  # Telegram keeps an update for 24 hours; a clock's skew besides


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(sa.text(
        "SELECT m.id, m.external_id, m.meta, c.chat FROM messages m JOIN conversations c ON c.id = m.conversation_id "
        "WHERE m.channel = 'telegram' AND m.direction = 'in' AND m.created_at >= :since").bindparams(
        sa.bindparam("since", type_=sa.DateTime(timezone=True))), {"since": datetime.now(timezone.utc) - RESENT_FOR})
    keys = []
    for row in rows:
        meta = json.loads(row.meta) if isinstance(row.meta, str) else row.meta or {}
        message_id = meta.get("platform_message_id")
        if (row.external_id or "").isdigit() and message_id:
            keys.append({"id": row.id, "key": f"{row.external_id}:{row.chat}:{message_id}"})
    if keys:
        bind.execute(sa.text("UPDATE messages SET external_id = :key WHERE id = :id"), keys)


def downgrade() -> None:
    pass
