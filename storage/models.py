"""ORM models of the conversation store. Alembic migrations in `alembic/` mirror these exactly."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gateway.models import utcnow

# Inbound messages whose sender is not in their column (stored by a gateway older than migration 0016).
UNKNOWN_SENDER = "direction = 'in' AND sender IS NULL"
# Every table with an `id`: SQLite gives an id once, never again after its row is deleted (as PostgreSQL's
# sequences), so a link, log line or audit note naming one never comes to name another's (migration 0018).
NEVER_REUSED = {"sqlite_autoincrement": True}


class Base(DeclarativeBase):
    """Declarative base; `metadata` is what Alembic compares against."""

    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Contact(Base):
    """A person's identity on one channel."""

    __tablename__ = "contacts"
    __table_args__ = (UniqueConstraint("channel", "external_id", name="uq_contacts_channel_external_id"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    channel: Mapped[str] = mapped_column(String(32))
    external_id: Mapped[str] = mapped_column(String(255))
    display_name: Mapped[str] = mapped_column(String(255), default="")
    last_inbound_at: Mapped[datetime | None] = mapped_column(default=None)
    # Their earliest STOP while one to any bot holds (`opt_outs` says to which): read by a gateway older than
    # 0017 still running (a rollback), which then sends them nothing; this one reads `opt_outs` alone.
    stopped_any_bot_at: Mapped[datetime | None] = mapped_column("opted_out_at", default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class OptOut(Base):
    """A person's STOP to one bot (WhatsApp: said to that bot's business number): the bot sends them nothing
    until they send it START (storage/opt_outs.py). Bot `""` is a STOP kept from before opt-outs were per bot
    (migration 0017) by a person no bot had a conversation with: it holds for every bot, until a START."""

    __tablename__ = "opt_outs"

    contact_id: Mapped[int] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"), primary_key=True)
    bot: Mapped[str] = mapped_column(String(64), primary_key=True)
    opted_out_at: Mapped[datetime] = mapped_column()


class Conversation(Base):
    """One thread with one bot. `state` is bot, waiting or operator."""

    __tablename__ = "conversations"
    __table_args__ = (
        UniqueConstraint("bot", "channel", "workspace", "chat", "thread", name="uq_conversations_ref"),
        Index("ix_conversations_lease", "lease_until"),
        Index("ix_conversations_contact", "contact_id"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    bot: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(255), default="")
    chat: Mapped[str] = mapped_column(String(255))
    thread: Mapped[str] = mapped_column(String(255), default="")
    contact_id: Mapped[int | None] = mapped_column(ForeignKey("contacts.id", ondelete="SET NULL"), default=None)
    state: Mapped[str] = mapped_column(String(16), default="bot")
    assigned_operator: Mapped[str | None] = mapped_column(String(128), default=None)
    unanswered_turns: Mapped[int] = mapped_column(Integer, default=0)
    # A worker leases a conversation to process its messages in order; an expired lease is free.
    lease_owner: Mapped[str | None] = mapped_column(String(128), default=None)
    lease_until: Mapped[datetime | None] = mapped_column(default=None)
    # WhatsApp: the newest reply sent as the Content template (outside the 24 hours), whose own text waits
    # for the customer's next message; only then does storing that message look for such replies.
    held_template_id: Mapped[int | None] = mapped_column(Integer, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Message(Base):
    """Every message in or out. Inbound is unique per (bot, channel, external_id).

    Inbound status: pending → done | failed | ignored. Outbound status: pending → sending → sent | failed
    (then delivered/read from receipts); a send to retry, or one a dead replica left `sending`, goes back
    to pending.
    """

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("bot", "channel", "direction", "external_id", name="uq_messages_delivery"),
        Index("ix_messages_conversation", "conversation_id", "id"),
        Index("ix_messages_status", "direction", "status"),
        Index("ix_messages_reply_to", "reply_to_id"),  # a message's replies (web chat), and deletions' SET NULL
        Index("ix_messages_sender", "sender"),  # a person's messages: retention's orphans, `gateway forget`
        # `gateway forget` reads the `meta` of these: without the index, of every outbound row too.
        Index("ix_messages_sender_unknown", "id", postgresql_where=text(UNKNOWN_SENDER), sqlite_where=text(UNKNOWN_SENDER)),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    bot: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(32))
    direction: Mapped[str] = mapped_column(String(8))  # in | out
    author: Mapped[str] = mapped_column(String(16), default="contact")  # contact | bot | operator | system
    external_id: Mapped[str | None] = mapped_column(String(255), default=None)
    reply_to_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"), default=None)
    # Inbound: who sent it (the platform's user id, `Contact.external_id`), as `meta["sender"]` says, in a
    # column for its index; None outbound. In a group the conversation's contact is only its first writer.
    sender: Mapped[str | None] = mapped_column(String(255), default=None)
    text: Mapped[str] = mapped_column(Text, default="")
    attachments: Mapped[list[Any]] = mapped_column(default=list)
    # Small facts a later step needs: from the platform (its message id to reply to, a bot command, the
    # sender), and what earlier attempts at this message did (parts delivered, the next attempt's time,
    # a streamed draft, tool runs), so a retry or a restart resumes instead of repeating.
    meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    citations: Mapped[list[Any]] = mapped_column(default=list)
    tool_calls: Mapped[list[Any]] = mapped_column(default=list)
    retrieved: Mapped[list[Any]] = mapped_column(default=list)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    error: Mapped[str | None] = mapped_column(Text, default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    provider_ids: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    # Outbound: when it was sent. Inbound: when the platform says the customer sent it (the order a burst's
    # pieces are joined in, with `meta.sequence`).
    sent_at: Mapped[datetime | None] = mapped_column(default=None)


ESCALATION_STATES = ("open", "claimed", "resolved")
"""An escalation's states, in order (a conversation's are bot, waiting and operator)."""


class Escalation(Base):
    """A handoff to a person: open → claimed → resolved."""

    __tablename__ = "escalations"
    __table_args__ = (Index("ix_escalations_bot_state", "bot", "state"),
                      Index("ix_escalations_conversation", "conversation_id", "id"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    bot: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), default="open")
    reason: Mapped[str] = mapped_column(Text, default="")
    operator: Mapped[str | None] = mapped_column(String(128), default=None)
    notes: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(default=None)
    resolved_at: Mapped[datetime | None] = mapped_column(default=None)
    # When the last reminder went out (one replica wins the UPDATE): once per wait for a person.
    reminded_at: Mapped[datetime | None] = mapped_column(default=None)
    # When the current wait for a claim began: the release of a claim starts it again (None: `created_at`).
    waiting_since: Mapped[datetime | None] = mapped_column(default=None)
    # The Slack operator channel post for this escalation: its thread carries the relay.
    slack_channel: Mapped[str | None] = mapped_column(String(255), default=None)
    slack_ts: Mapped[str | None] = mapped_column(String(64), default=None, index=True)


class EscalationEvent(Base):
    """One stored transition or note of an escalation: who, when, why."""

    __tablename__ = "escalation_events"
    __table_args__ = (Index("ix_escalation_events_escalation", "escalation_id", "id"),
                      Index("ix_escalation_events_conversation", "conversation_id"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    escalation_id: Mapped[int] = mapped_column(ForeignKey("escalations.id", ondelete="CASCADE"))
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    # opened | claimed | taken_over | released | resolved | reminded | note
    kind: Mapped[str] = mapped_column(String(16))
    from_state: Mapped[str | None] = mapped_column(String(16), default=None)
    to_state: Mapped[str | None] = mapped_column(String(16), default=None)
    actor: Mapped[str] = mapped_column(String(128))  # "bot", "system" or an operator's name
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Usage(Base):
    """LLM tokens and cost for one turn, from LiteLLM's own accounting."""

    __tablename__ = "usage"
    __table_args__ = (Index("ix_usage_bot_created", "bot", "created_at"), Index("ix_usage_message", "message_id"),
                      Index("ix_usage_conversation", "conversation_id"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    bot: Mapped[str] = mapped_column(String(64))
    conversation_id: Mapped[int | None] = mapped_column(ForeignKey("conversations.id", ondelete="SET NULL"), default=None)
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"), default=None)
    model: Mapped[str] = mapped_column(String(128))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    partial: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Document(Base):
    """An ingested document: its content hash lets re-ingest skip it without embedding."""

    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("bot", "source", "doc_id", name="uq_documents_doc"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    bot: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(128))
    doc_id: Mapped[str] = mapped_column(String(1024))
    content_hash: Mapped[str] = mapped_column(String(64))
    chunk_ids: Mapped[list[Any]] = mapped_column(default=list)
    title: Mapped[str] = mapped_column(String(512), default="")
    url: Mapped[str | None] = mapped_column(String(2048), default=None)
    # A fetched page's HTTP validators (urls/sitemap sources): the next fetch asks "changed since?"
    # and a 304 skips the download too, not only the embedding.
    etag: Mapped[str | None] = mapped_column(String(512), default=None)
    last_modified: Mapped[str | None] = mapped_column(String(64), default=None)
    # Its sitemap's <lastmod> when it was read: while the sitemap gives the same, it is not fetched again.
    lastmod: Mapped[str | None] = mapped_column(String(64), default=None)
    # The ingest settings (chunker version, embedding model, chunk sizes) its chunks were made with:
    # the validators are sent only under the same settings, or a 304 would keep chunks made otherwise.
    settings_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class IngestRun(Base):
    """One ingest of one source: counts, duration, errors."""

    __tablename__ = "ingest_runs"
    __table_args__ = (Index("ix_ingest_runs_source", "bot", "source", "started_at"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    bot: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(128))
    trigger: Mapped[str] = mapped_column(String(16), default="manual")  # manual | schedule | startup
    status: Mapped[str] = mapped_column(String(16), default="running")  # running | ok | partial | failed | interrupted | skipped
    added: Mapped[int] = mapped_column(Integer, default=0)
    updated: Mapped[int] = mapped_column(Integer, default=0)
    deleted: Mapped[int] = mapped_column(Integer, default=0)
    unchanged: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[list[Any]] = mapped_column(default=list)
    # How many errors past `rag.ingest_runs.MAX_ERRORS` the run had and did not keep.
    errors_dropped: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    duration_s: Mapped[float | None] = mapped_column(Float, default=None)


class Delivery(Base):
    """One platform message id of a sent reply (a long reply may be split into several).

    Unique per reply, not per channel: Telegram numbers messages per chat and Slack's `ts` is per
    channel, so two chats' replies can carry the same id. Receipts (Twilio, whose ids are global)
    look a part up by (channel, provider_id)."""

    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("message_id", "provider_id", name="uq_deliveries_message_part"),
        Index("ix_deliveries_provider_id", "channel", "provider_id"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id", ondelete="CASCADE"), index=True)
    channel: Mapped[str] = mapped_column(String(32))
    provider_id: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16), default="sent")
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class EarlyReceipt(Base):
    """A delivery receipt that arrived before the outbox recorded the part it names (gateway/delivery/receipts.py)."""

    __tablename__ = "early_receipts"
    __table_args__ = (UniqueConstraint("channel", "provider_id", name="uq_early_receipts_provider_id"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(primary_key=True)
    channel: Mapped[str] = mapped_column(String(32))
    provider_id: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    received_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class DataDeletion(Base):
    """Audit of a deletion (`forget`, retention): what kind, where and how much; never whose data."""

    __tablename__ = "data_deletions"
    __table_args__ = NEVER_REUSED

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # forget | retention | source
    channel: Mapped[str | None] = mapped_column(String(32), default=None)
    bot: Mapped[str | None] = mapped_column(String(64), default=None)
    actor: Mapped[str] = mapped_column(String(128), default="system")
    counts: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RemovedChat(Base):
    """A chat the bot was removed from (kicked from a group, blocked in private), until it is added back:
    replies to it fail at once, on every replica (storage/removed_chats.py)."""

    __tablename__ = "removed_chats"

    bot: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(String(32), primary_key=True)
    chat: Mapped[str] = mapped_column(String(255), primary_key=True)
    removed_at: Mapped[datetime] = mapped_column(default=utcnow)


class UnfinishedChatMove(Base):
    """A chat's move to a new id (storage/chat_moves.py) that left a pair of conversations both held by workers:
    any process tries it again, until it is done (`Inbox.finish_moves`)."""

    __tablename__ = "unfinished_chat_moves"

    bot: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(String(32), primary_key=True)
    workspace: Mapped[str] = mapped_column(String(255), primary_key=True)
    chat: Mapped[str] = mapped_column(String(255), primary_key=True)  # the old id
    new_chat: Mapped[str] = mapped_column(String(255))
    since: Mapped[datetime] = mapped_column(default=utcnow)


class PurgedOperatorThread(Base):
    """A Slack operator thread of a conversation the retention job purged or `gateway forget` deleted, whose posts in
    Slack are still to be deleted (gateway/operators/slack_purged.py): stored with the delete, gone once they are,
    so a run (or forget) that did not get to it (its bound, Slack refusing, a stop) leaves it to the next run."""

    __tablename__ = "purged_operator_threads"

    bot: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(String(255), primary_key=True)  # "": the bot's operator channel
    ts: Mapped[str] = mapped_column(String(64), primary_key=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    why: Mapped[str | None] = mapped_column(Text, default=None)  # why its last attempt failed
    since: Mapped[datetime] = mapped_column(default=utcnow)
    tried: Mapped[datetime | None] = mapped_column(default=None)  # its last attempt: a run takes the longest waiting


class ForgottenMessage(Base):
    """An inbound message `gateway forget` deleted, as a sha256 of where it was (storage/forgotten.py): an edit of it
    that the platform sends later is not stored as the question it would be for a message never stored."""

    __tablename__ = "forgotten_messages"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)  # no text, name, user or chat id
    forgotten_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
