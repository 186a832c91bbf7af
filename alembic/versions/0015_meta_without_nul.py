"""meta made storable as jsonb: NUL (and a lone surrogate) taken out of the `meta` of messages stored before

PostgreSQL's `json` column took `\\u0000` (and a lone `\\ud800`) in a message's `meta`, from a platform's
payload, before what meta keeps was made storable (`storage.message_meta.inbound_meta`); `jsonb` refuses
both, and the one-statement merge of a key (storage/meta_keys.py) casts `meta` to it, so a streamed
answer's message id or a tool's run on such a message failed with "unsupported Unicode escape sequence".
Each such row's `meta` is rewritten as writers store it now (`storage.text.storable_json`: NUL dropped, a
lone surrogate U+FFFD). SQLite's JSON functions take both: nothing to do there.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07 01:00:00
"""
from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from storage.text import storable_json

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

BATCH = 500
# An escape of NUL or of a surrogate anywhere in the text (maybe one of an escaped backslash, `\\u0000`:
# parsed below, such a row is found unchanged and left as it is).
_SUSPECT = r"\\u(0000|[dD][89a-fA-F])"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    messages = sa.table("messages", sa.column("id", sa.Integer), sa.column("meta", sa.JSON))
    after = 0
    while True:
        rows = bind.execute(sa.text(
            "SELECT id, CAST(meta AS TEXT) FROM messages WHERE id > :after AND CAST(meta AS TEXT) ~ :suspect "
            "ORDER BY id LIMIT :batch"), {"after": after, "suspect": _SUSPECT, "batch": BATCH}).all()
        if not rows:
            return
        changed = []
        for message_id, stored in rows:
            meta = json.loads(stored)
            cleaned = storable_json(meta)
            if json.dumps(cleaned) != json.dumps(meta):
                changed.append({"message_id": message_id, "cleaned": cleaned})
        if changed:
            bind.execute(messages.update().where(messages.c.id == sa.bindparam("message_id"))
                         .values(meta=sa.bindparam("cleaned", type_=sa.JSON)), changed)
        after = rows[-1][0]


def downgrade() -> None:
    pass  # what was taken out is not kept
