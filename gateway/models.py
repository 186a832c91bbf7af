"""Normalized messages: what every channel turns its payloads into.

They hold no live client, so they can be stored and replayed as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

_INVISIBLE = re.compile(r"[\s\u00ad\u180e\u200b-\u200f\u2060-\u2064\ufeff]")


CHANNELS = ("web", "telegram", "slack", "discord", "whatsapp")
"""Every channel's name, as messages, conversations and contacts store it (and `ChannelsSettings` keys it)."""

CLIENT_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
"""An id a client chooses: a web chat `session_id`, a web chat or operator reply `message_id`."""
CLIENT_ID_RULE = "1-128 characters of letters, digits, '_', '-', '.', ':'"

SESSION_ID_MIN_LENGTH = 16
"""What README recommends for `channels.web.min_session_id_length` in production. A session id is the whole proof
of who a web visitor is (it reads the transcript and writes as them), so one a caller could guess (`me-1`) is worth
refusing: the widget makes `web-` and 32 random hex digits (128 bits). Not the default: the contract puts no rule
on the id, and a client integration's own ids (`user-42`) would start to get 422s."""


def weak_session_id(session_id: str, min_length: int) -> str | None:
    """Why `session_id` is too easy to guess to be a web chat session, or None. At least `min_length`
    characters, of which at least half (up to 8) are different ones: `aaaaaaaaaaaaaaaa` or `1212121212121212`
    is as guessable as a short id."""
    distinct = min(8, min_length // 2)
    if len(session_id) >= min_length and len(set(session_id)) >= distinct:
        return None
    return (f"session_id must be at least {min_length} characters, at least {distinct} of them different "
            "(a random id, as the widget's 'web-' and 32 hex digits): anyone who guesses a session id reads its "
            "transcript and writes as its visitor (channels.web.min_session_id_length)")


def is_blank(text: str) -> bool:
    """Nothing a reader would see: whitespace and invisible format characters (zero-width space,
    joiners, direction marks, BOM), the set the web widget refuses to send (`widget.js`'s `isBlank`)."""
    return not _INVISIBLE.sub("", text)


def utcnow() -> datetime:
    """Timezone-aware now, in UTC."""
    return datetime.now(timezone.utc)


NEVER_STORED_EDIT_WINDOW = timedelta(hours=23)
"""How recent (by its own date) a private chat's message must be for an edit of it, never stored, to be stored as
the question (`InboundMessage.new_if_never_stored`): its first delivery failed, and the platform may still send it
(Telegram resends an update for 24 hours, Slack retries for minutes). Below the shortest retention (`retention_days`
is 1 or more, counted from a message's store) by an hour for clocks: a message never stored that is older was sent
before the bot had the chat, or purged since, and its edit is no question asked now."""


def may_still_come(sent_at: datetime, now: datetime | None = None) -> bool:
    """Whether a private chat's message sent at `sent_at` (the platform's date of it) is recent enough that, never
    stored, its first delivery failed and may still come (`NEVER_STORED_EDIT_WINDOW`)."""
    return (now or utcnow()) - sent_at < NEVER_STORED_EDIT_WINDOW


def as_utc(value: datetime) -> datetime:
    """`value` as an aware UTC datetime: SQLite returns stored timestamps naive (they are UTC)."""
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class ConversationRef:
    """Where a conversation lives on its platform. `chat` is where replies go; `thread` narrows it to
    one conversation (a Slack thread's ts, a Telegram topic, a Discord thread, or "member:<id>" for one
    member of a Telegram group or a Discord server channel) and is empty when there is nothing to narrow."""

    channel: str
    workspace: str = ""
    chat: str = ""
    thread: str = ""

    @property
    def member(self) -> str | None:
        """The member whose conversation this is, in a shared chat; None for a DM, thread or topic."""
        return self.thread.removeprefix(MEMBER_SCOPE) if self.thread.startswith(MEMBER_SCOPE) else None


MEMBER_SCOPE = "member:"


def member_thread(member_id: str) -> str:
    """`ConversationRef.thread` for one member's questions in a shared group chat or server channel.

    Why per member: with one conversation for a whole group, a member's follow-up was rewritten with
    another member's question, what a tool returned for one member was in the history the model read
    when answering another, and one member's escalation held the bot for everyone."""
    return MEMBER_SCOPE + member_id


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent a message, by the platform's own id."""

    external_id: str
    display_name: str = ""
    is_bot: bool = False


@dataclass(frozen=True, slots=True)
class Attachment:
    """Media metadata. We never download media; we record where it is."""

    # "contact": a Telegram contact card, whose name and number are read into the message's text.
    kind: Literal["image", "audio", "video", "document", "sticker", "location", "contact", "other"]
    url: str | None = None
    file_id: str | None = None
    mime_type: str | None = None
    caption: str | None = None


# The `command` of a WhatsApp STOP and START (Twilio's opt-out keywords): they set or lift the contact's opt-out
# (storage.repositories.store_inbound). Twilio answers them only under a Messaging Service's Advanced Opt-Out,
# which marks them `OptOutType` (the `_answered` ones): a bare STOP or START is confirmed by the gateway, once.
OPT_OUT, OPT_IN = "opt_out", "opt_in"
OPT_OUT_ANSWERED, OPT_IN_ANSWERED = "opt_out_answered", "opt_in_answered"
OPT_OUTS = frozenset({OPT_OUT, OPT_OUT_ANSWERED})
OPT_COMMANDS = frozenset({OPT_OUT, OPT_IN, OPT_OUT_ANSWERED, OPT_IN_ANSWERED})
# WhatsApp's HELP as Twilio's Advanced Opt-Out marks it (`OptOutType=HELP`): Twilio has answered it already.
HELP_ANSWERED = "help_answered"
ANSWERED_BY_PLATFORM = frozenset({OPT_OUT_ANSWERED, OPT_IN_ANSWERED, HELP_ANSWERED})
"""Commands the platform answers itself: a reply of ours would be the person's second."""


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message from a customer, normalized. Idempotency key: (channel, external_id)."""

    channel: str
    external_id: str
    conversation: ConversationRef
    sender: Sender
    text: str
    attachments: tuple[Attachment, ...] = ()
    reply_to: str | None = None
    sent_at: datetime = field(default_factory=utcnow)
    # The platform's own order of messages in a chat, where `sent_at` cannot tell two apart (Telegram's
    # `date` is whole seconds; its message_id, and Discord's snowflake id, count up): pieces of a burst
    # are joined in this order (`sent_at`, then this), not in the order their webhooks were stored.
    sequence: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    # The platform shows the sender a pending state until this message gets a reply (a deferred
    # Discord `/ask`): it is answered even while an operator holds the thread, with a notice.
    needs_reply: bool = False
    # Stored only into a conversation that already exists, else ignored (`Inbox.accept`): a Slack thread
    # reply without a mention is the bot's to answer only in a thread the bot was asked in.
    existing_conversation_only: bool = False
    # Stored only into a conversation a person holds or is asked for (`waiting`, `operator`), else ignored:
    # a group member's message with no mention is for the bot only while it is the operator's to read.
    only_while_held: bool = False
    # Not a new message: an edit of the one with this platform id in `conversation.chat` (its new `text`),
    # or with `deleted` its deletion. Applied while that message waits for its answer, else ignored
    # (`Inbox.accept`): an answered question is not answered again for a typo fix.
    revises: str | None = None
    deleted: bool = False
    # An edit that is a message of its own when the one it revises was never stored: a group member's
    # message ignored for want of the bot's @mention, edited to add it; a private chat's message whose first
    # delivery failed, edited before the platform's retry of it, which is then its duplicate (only a message sent
    # within `NEVER_STORED_EDIT_WINDOW`: an older one never stored was sent before the bot had the chat, or purged).
    new_if_never_stored: bool = False
    # An edit or deletion that is a message of its own when the one it revises was answered already (stored
    # with `meta.revises` and `meta.deleted`): an operator's, in a Slack operator thread, of a reply relayed
    # to the customer, which the operator channel passes on (`gateway/operators/slack_edits.py`).
    stored_if_answered: bool = False
    # An edit's place among the edits of its message, where the platform orders them, compared item by item
    # (Telegram's: its `edit_date`, then its update_id, which Telegram restarts at random after a week without
    # updates): an older edit handled after a newer one (two webhooks at once) does not undo it.
    revision: tuple[int, ...] | None = None
    # A shared live location (Telegram's, with its `live_period`), or a move of one (an edit, `revises` set):
    # the place changes as the person moves, every few seconds for hours. A move is no question and no edit to
    # answer: applied to its message, answered or not, so the record keeps the newest place (`Inbox.accept`).
    live_location: bool = False
    # Not a message: the chat `conversation.chat` lives on under this id now (a Telegram group upgraded to
    # a supergroup). Its conversations, and what is queued for them, follow it there (`Inbox.accept`).
    moves_to: str | None = None
    # Not a message: the bot was removed from `conversation.chat` (True: kicked, left, blocked in private) or
    # is back in it (False). Stored (`Inbox.accept`), so every replica fails replies there at once meanwhile.
    bot_removed: bool | None = None

    @property
    def idempotency_key(self) -> tuple[str, str]:
        """The platform's own identity of this delivery."""
        return (self.channel, self.external_id)


@dataclass(frozen=True, slots=True)
class Citation:
    """A source the answer actually cited."""

    source: str
    title: str
    url: str | None = None

    def as_dict(self) -> dict[str, str]:
        """The contract shape: `url` only when known."""
        out = {"source": self.source, "title": self.title}
        if self.url:
            out["url"] = self.url
        return out


SOURCES_HEADING = "Sources:"
"""The heading over a reply's citations where the bot sets none (`replies.sources_heading`)."""
USE_ASK = "Please use /ask."
"""Discord's answer to another slash command than /ask where the bot sets none (`replies.use_ask`)."""


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A reply to be rendered and sent by a channel adapter."""

    conversation: ConversationRef
    text: str
    citations: tuple[Citation, ...] = ()
    reply_to: str | None = None
    # Set (by the outbox) on a message that answers none of the person's messages, such as an operator's
    # reply: the display name of the person the conversation is with. In a shared chat the adapter
    # addresses it to that member (Telegram's mention needs words to link). None on an answer and on
    # the later parts of a streamed one, which must not repeat a mention mid-answer.
    addressee: str | None = None
    # The outbox's message id and send attempt: an adapter whose platform can be asked what it
    # already holds (Slack) uses them to finish an interrupted reply without posting a part twice.
    idempotency_key: str | None = None
    attempt: int = 1
    # Platform ids of the parts an earlier attempt of this same reply delivered, in order, as the outbox
    # recorded them (`meta.delivered_parts`): an adapter that sends a reply in parts resumes after them
    # (or after what it remembers itself, when that is more), also in a new process whose memory is
    # empty. The stored text and citations split the same way again.
    delivered_parts: tuple[str, ...] = ()
    # The bot's `replies.sources_heading`, over the citations (each adapter sets it in its own bold).
    sources_heading: str = SOURCES_HEADING
    # The Discord `/ask` that `reply_to` names, as stored with it (`meta.interaction`: application_id, token,
    # expires_at): its answer goes to the interaction's follow-ups in a process that never saw it. A
    # credential, kept out of the repr (and so out of any log line that prints the message).
    interaction: Mapping[str, Any] | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class CallerIdentity:
    """The verified identity of the customer behind a conversation, given to every tool by the gateway.

    It comes from the channel's verified webhook (or the web session), never from the model, so tools
    can authorize in code.
    """

    bot: str
    channel: str
    contact_external_id: str
    contact_id: int | None = None
    conversation_id: int | None = None
