"""A customer's burst of messages ("hi" / "my order" / "is late" / "?") is one question, answered once.

People on chat platforms type a question in pieces. Answered piece by piece, each was a question of its
own: the greeting, three "I couldn't find that", then a handoff for the unanswered turns. A Telegram
album is one update per photo, the caption on one of them: the caption was answered, and every other
photo got "I can only read text".

So before it answers a message, the handler waits until the customer has paused for
`worker.burst_seconds` after their newest message (`BURST_MAX_WAIT_S` after the first in all at most, so
someone who keeps typing is still answered), and answers the message with the ones after it that belong
to the same burst: their texts joined line by line, their attachments together, in the order the customer
sent them (`in_sent_order`: the platform's time and sequence, not the order their webhooks were stored
in). The others are marked done with it, in the same transaction as its reply (`MessageHandler._finish`),
so a crash leaves all or none answered. The wait holds no worker turn: the conversation is parked until
the time to look again (`Burst.not_before`), as a reply waiting out a rate limit is, and that lease keeps
every replica from answering meanwhile.

The wait ends early when what came so far reads as a whole question (`reads_whole`: text only, the last
piece ending a sentence, a few words in all): "How do I reset my password?" is answered at once, as is
"my order" / "is late" / "?" at its "?". Waiting would cost every such question `burst_seconds` for the
rare customer who adds to it.

A message belongs to the burst when it is from the same sender, arrived within `burst_seconds` of the one
before, and is plain (no command such as /start, no Discord `/ask` awaiting its own answer). The web chat,
whose request waits for its own message's answer, is never merged; `burst_seconds: 0` turns it all off.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.models import as_utc, utcnow
from storage.models import Message

BURST_MAX_WAIT_S = 8.0
"""The longest the answer to a burst waits for the customer to pause."""
MAX_PIECES = 10
"""Messages answered together at most; the rest of a longer run are turns of their own."""
UNMERGED_CHANNELS = frozenset({"web"})
BURST_OWNER = "burst-wait"
"""Lease owner of a conversation parked while its customer may still be typing; the inbox ends that
park when another message comes in (it may end the question)."""
WHOLE_QUESTION_WORDS = 3
"""A text of at least this many words ending a sentence is answered without waiting for more."""
# Not `pipeline.sentences`' ends of a whole sentence: there "…" ends one (a model's answer), while a
# customer's "my order is…" says more is coming.
_SENTENCE_END = ("?", "!", ".", "？", "！", "。", "؟", "۔", "।")


def _plain(message: Message) -> bool:
    meta = message.meta or {}
    return not meta.get("command") and not meta.get("needs_reply")


def in_sent_order(pieces: list[Message]) -> list[Message]:
    """The pieces in the order the customer sent them: the platform's time and sequence (Telegram's
    message_id, Discord's snowflake; `InboundMessage.sequence`), then the order they were stored. Webhooks
    delivered side by side are stored in any order, and "the Plus plan cost?" / "How much does" was asked so."""
    def key(message: Message) -> tuple:
        return (as_utc(message.sent_at or message.created_at), (message.meta or {}).get("sequence") or 0, message.id)
    return sorted(pieces, key=key)


def reads_whole(pieces: list[Message]) -> bool:
    """Text with no attachment whose last piece ends a sentence, a few words in all: likely the
    customer's whole question ("How do I reset my password?", or "my order" / "is late" / "?"). An
    album's caption is not (its other photos follow), nor is "hi" or "my order"."""
    last = (pieces[-1].text or "").strip()
    return (not any(m.attachments for m in pieces) and last.endswith(_SENTENCE_END) and not last.endswith("...")
            and sum(len((m.text or "").split()) for m in pieces) >= WHOLE_QUESTION_WORDS)


def same_burst(first: Message, later: list[Message], *, window_s: float) -> list[Message]:
    """The messages of `later` (pending, in order) that continue `first`'s burst."""
    run: list[Message] = []
    previous = first
    sender = (first.meta or {}).get("sender")
    for message in later:
        gap = (as_utc(message.created_at) - as_utc(previous.created_at)).total_seconds()
        if len(run) + 1 >= MAX_PIECES or gap > window_s or not _plain(message) \
                or (message.meta or {}).get("sender") != sender:
            break
        run.append(message)
        previous = message
    return run


async def burst_up_to(session: AsyncSession, message: Message, *, window_s: float, after: int = 0) -> list[Message]:
    """`message` with the customer's messages before it (after the message id `after`, none taken back) that a burst
    joins it with, as `burst_followers` takes them pending after the first: in sent order. `message` alone when
    bursts are off, on a channel never merged, or when it is no plain message."""
    if window_s <= 0 or message.channel in UNMERGED_CHANNELS or not _plain(message):
        return [message]
    earlier = (await session.execute(select(Message).where(
        Message.conversation_id == message.conversation_id, Message.direction == "in", Message.status != "ignored",
        Message.id < message.id, Message.id > after).order_by(Message.id.desc()).limit(MAX_PIECES - 1))).scalars()
    run = [message]
    for previous in earlier:  # the newest first: each continued by the piece after it, or the burst began after it
        if not _plain(previous) or not same_burst(previous, [run[0]], window_s=window_s):
            break
        run.insert(0, previous)
    return in_sent_order(run)


class Burst(NamedTuple):
    """The pending messages answered with the first, or the time to look again: the customer may still be
    typing. Nothing waits in between: the worker parks the conversation until `not_before` and takes
    other conversations meanwhile, and the next look reads the first, its conversation (taken by a
    person meanwhile?) and its followers afresh (edited, taken back, more of them)."""

    followers: list[Message]
    not_before: datetime | None = None
    seen: tuple[tuple[int, str], ...] = ()
    """The pending messages the wait was decided on, from the first: (id, text) in order."""


NO_BURST = Burst([])


async def burst_followers(sessions: async_sessionmaker[AsyncSession], first: Message, *, window_s: float,
                          max_wait_s: float = BURST_MAX_WAIT_S) -> Burst:
    """The pending messages answered with `first` now, or when to look again: after the customer's
    newest piece has aged `window_s`, and at most `max_wait_s` after `first` was stored."""
    if window_s <= 0 or first.channel in UNMERGED_CHANNELS or not _plain(first):
        return NO_BURST
    async with sessions() as session:
        later = list((await session.execute(
            select(Message).where(Message.conversation_id == first.conversation_id, Message.direction == "in",
                                  Message.status == "pending", Message.id > first.id)
            .order_by(Message.id).limit(MAX_PIECES))).scalars())
    run = same_burst(first, later, window_s=window_s)
    seen = tuple((m.id, m.text) for m in [first, *later])
    if reads_whole(in_sent_order([first, *run])) or len(run) + 1 >= MAX_PIECES:
        return Burst(run)
    newest = run[-1] if run else first
    due = min(as_utc(newest.created_at) + timedelta(seconds=window_s),
              as_utc(first.created_at) + timedelta(seconds=max_wait_s))
    return Burst(run, not_before=due if due > utcnow() else None, seen=seen)


async def unchanged(session: AsyncSession, conversation_id: int, seen: tuple[tuple[int, str], ...]) -> bool:
    """Whether the conversation's pending messages from the first are still `seen`: none came in, was
    edited or was taken back since the wait was decided on. The worker asks under the conversation's row
    lock as it parks (`Worker._park_burst`): a piece committed after the read but before the park found no
    park to end, and waited the park out."""
    rows = await session.execute(
        select(Message.id, Message.text).where(Message.conversation_id == conversation_id, Message.direction == "in",
                                               Message.status == "pending", Message.id >= seen[0][0])
        .order_by(Message.id).limit(MAX_PIECES + 1))
    return tuple(tuple(row) for row in rows) == seen
