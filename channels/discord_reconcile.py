"""A retried Discord send first looks for its chunks in the channel, as Slack's does in its thread.

Why: every chunk carries a nonce with `enforce_nonce`, but Discord checks nonces only for a few minutes. A
send whose answer was lost (a timeout after the request went out) may have posted; its retry within those
minutes is deduplicated by the nonce, but one after them (the outbox's backoff after more failures, a paused
channel, a restart) posted the chunk a second time. So a retry reads the channel's messages after the
question (or after the reply's last chunk known to have landed) and adopts this bot's own messages that
carry the next chunks' text (the first one replying to the question) instead of posting them again.

Discord's fetched messages carry no nonce, so the text is what tells them apart, and only after an anchor:
a reply with no question and no landed chunk (an operator's message) is posted again as before, and so is
any when the bot cannot read the channel's history (no Read Message History): a duplicate, as before. A rate limit
on that read is not such a case: it is waited out within the send's budget, as a post's is, or the send goes back
to the outbox with its `retry_after` (`translate`) and posts nothing until the channel can be read.
"""

from __future__ import annotations

import logging

import discord

from channels.discord_errors import translate
from channels.sent_parts import Landed
from gateway.models import OutboundMessage

log = logging.getLogger(__name__)

LOOK_BACK = 50
"""Messages read after the anchor: a busy channel's other posts come between ours."""


async def adopt_landed(client: discord.Client, channel: discord.abc.Messageable, message: OutboundMessage,
                       chunks: list[str], ids: Landed) -> None:
    """Add to `ids` the chunks after them that the channel shows this bot posted already."""
    anchor = ids[-1] if ids else message.reply_to
    me = client.user.id if client.user is not None else None
    if not anchor or not anchor.isdigit() or me is None or len(ids) >= len(chunks):
        return
    try:
        posted = [m async for m in channel.history(limit=LOOK_BACK, after=discord.Object(int(anchor)),
                                                   oldest_first=True)]
    except Exception as exc:  # no history permission, an outage: posted again, as before
        if isinstance(exc, discord.RateLimited) or getattr(exc, "status", None) == 429:
            raise translate(exc) from exc  # the channel can be read, later: posting blindly made a duplicate
        log.warning("discord.reconcile_failed", extra={"channel_id": getattr(channel, "id", None),
                                                       "error": str(exc)[:200]})
        return
    for found in posted:
        index = len(ids)
        if index >= len(chunks):
            break
        replies_to_question = index > 0 or not message.reply_to or (
            found.reference is not None and str(found.reference.message_id) == message.reply_to)
        # Discord trims a message's content: a chunk starting with an indented line is stored without it.
        if found.author.id == me and found.content == chunks[index].strip() and replies_to_question:
            await ids.add(str(found.id), more=index + 1 < len(chunks))
            log.info("discord.reconciled", extra={"message_id": found.id, "chunk": index})
