"""WhatsApp's 24-hour window, a contact's opt-out and a chat the bot was removed from, checked before a reply
is sent (`Outbox.deliver`).

Only the gateway knows when the contact last wrote: outside the window the configured Content template is
sent instead, or the reply fails visibly (`OutsideWindow`). The window is one business number's, so one bot's:
it is read from the customer's last message in the reply's conversation (`last_written_to_bot`), not from the
contact's `last_inbound_at`, which a message to any bot refreshes.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ScalarSelect, select

from channels.base import ChannelAdapter
from gateway.errors import RecipientUnreachable
from gateway.models import OutboundMessage, utcnow
from storage.models import Conversation, Message

OUTSIDE_WINDOW = "outside the 24-hour window"


class RefusedHere(RecipientUnreachable):
    """Refused by the gateway, the platform not asked: it tells nothing of the platform (`SendBreaker.released`)."""


class OutsideWindow(RefusedHere):
    """WhatsApp: the contact last wrote more than 24 h ago and no template is configured."""


def last_written_to_bot() -> ScalarSelect:
    """When the customer last wrote in the conversation (of the enclosing query), so to its bot; NULL if never.
    On WhatsApp a bot has one conversation per customer (its number and theirs). The newest inbound row by
    `ix_messages_conversation`, read backwards: not a scan of the conversation."""
    return (select(Message.created_at).where(Message.conversation_id == Conversation.id, Message.direction == "in")
            .order_by(Message.id.desc()).limit(1).correlate(Conversation).scalar_subquery())


CONFIRMS_OPT_OUT = "confirms_opt_out"
"""The `meta` key the STOP's own turn sets on its confirmation (`PipelineResult.confirms_opt_out`)."""


def confirms_opt_out(message: Message) -> bool:
    """Whether `message` is the gateway's confirmation of a bare STOP (which Twilio did not answer), as that STOP's
    turn marked it: the one message an opted-out contact is sent, so they know the STOP was heard. Why marked,
    not read off its author and the message it replies to: any notice of ours replying to the STOP passed, the
    acknowledgement of a STOP turn handed to a person ("I've asked a person…") as well."""
    return bool((message.meta or {}).get(CONFIRMS_OPT_OUT))


async def send_within_window(adapter: ChannelAdapter, outbound: OutboundMessage, *,
                             last_inbound_at: datetime | None, window_closed: bool = False,
                             opted_out_at: datetime | None = None,
                             removed_at: datetime | None = None) -> tuple[list[str], str | None]:
    """Send through the adapter; on WhatsApp outside the window, the template or OutsideWindow; to a
    contact who opted out (STOP), nothing: Twilio would refuse it (21610), a template too; nor to a chat the
    bot was removed from (storage/removed_chats.py), which would refuse it (Telegram's 403)."""
    if removed_at is not None:
        raise RefusedHere(f"the bot was removed from chat {outbound.conversation.chat} at {removed_at}; "
                                   "nothing is sent there until it is added back")
    if opted_out_at is not None:
        raise RefusedHere(f"the contact opted out (STOP) at {opted_out_at}; nothing is sent to them "
                                   "until they send START")
    if outbound.conversation.channel == "whatsapp" and hasattr(adapter, "send_template"):
        from channels.whatsapp import within_window  # Twilio is imported only where WhatsApp is used

        if window_closed or not within_window(last_inbound_at, utcnow()):
            content_sid = getattr(getattr(adapter, "settings", None), "content_sid", None)
            if not content_sid:
                raise OutsideWindow(f"{OUTSIDE_WINDOW} (the contact last wrote at {last_inbound_at}; "
                                    "configure whatsapp.content_sid to reach them with a template)")
            return list(await adapter.send_template(outbound.conversation, content_sid=content_sid)), content_sid
    return list(await adapter.send(outbound)), None
