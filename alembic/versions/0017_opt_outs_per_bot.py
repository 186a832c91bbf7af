"""opt_outs: a WhatsApp STOP holds for the bot it was sent to, not for every bot (was contacts.opted_out_at)

A contact is one per (channel, user id), shared by the bots: a STOP to one bot's number silenced the customer
for every bot, and a START to another re-enabled the first. Each contact's STOP is carried over to every bot
that has a conversation with them, or that they wrote to (never messaging someone who said STOP); one with
neither (a contact kept for its STOP alone, after `gateway forget` or the purge) to bot "", every bot, until
a START. `contacts.opted_out_at` stays (migrations only add: a gateway rolled back to before 0017 may run on
this schema and reads it), set by the code while a contact has a STOP to any bot. The downgrade gives each
contact its earliest STOP back, for every bot.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 07:20:00
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0017'
down_revision = '0016'
branch_labels = None
depends_on = None

STOPPED = "c.opted_out_at IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        'opt_outs',
        sa.Column('contact_id', sa.Integer(), nullable=False),
        sa.Column('bot', sa.String(length=64), nullable=False),
        sa.Column('opted_out_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['contact_id'], ['contacts.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('contact_id', 'bot'),
    )
    op.execute(
        "INSERT INTO opt_outs (contact_id, bot, opted_out_at) "
        f"SELECT c.id, v.bot, c.opted_out_at FROM contacts c JOIN conversations v ON v.contact_id = c.id WHERE {STOPPED} "
        "UNION SELECT c.id, m.bot, c.opted_out_at FROM contacts c JOIN messages m ON m.direction = 'in' "
        f"AND m.channel = c.channel AND m.sender = c.external_id WHERE {STOPPED}")
    op.execute("INSERT INTO opt_outs (contact_id, bot, opted_out_at) SELECT c.id, '', c.opted_out_at FROM contacts c "
               f"WHERE {STOPPED} AND NOT EXISTS (SELECT 1 FROM opt_outs o WHERE o.contact_id = c.id)")


def downgrade() -> None:
    op.execute("UPDATE contacts SET opted_out_at = "
               "(SELECT MIN(o.opted_out_at) FROM opt_outs o WHERE o.contact_id = contacts.id)")
    op.drop_table('opt_outs')
