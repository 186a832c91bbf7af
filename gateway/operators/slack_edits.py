"""An operator's edit or deletion, in a Slack operator thread, of a reply already relayed to the customer.

Slack's `message_changed` / `message_deleted` of an operator's thread message is stored as a message of
its own once that message was relayed (`InboundMessage.stored_if_answered`), so it is handled after the
relay, in the thread's order, and survives a restart. Then, on the customer's channel:

- one that edits sent messages (`capabilities.edits`: Telegram, Discord, Slack) gets the new text in the
  messages it already has (each part of a reply split in several, when the new text splits alike); a
  deletion deletes them where the platform lets the bot (Telegram), else blanks them to "—"; a refusal that
  says the bot was removed from the chat (`BotRemoved`) is stored as the outbox stores a send's;
- the web chat keeps its transcript in the store: the stored reply takes the new text, which the widget
  shows when it loads the conversation again (an open page keeps the first version: the operator is told);
- any other (WhatsApp) cannot change a sent message: the operator is told, in a message only they see,
  that the customer still has the first version.

The stored reply takes the new text (or `meta.deleted_by_operator`) where the customer's copy changed,
so the console and the transcript show what the customer has.
"""

from __future__ import annotations

from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from channels.slack_render import mrkdwn_to_markdown
from gateway.delivery.streaming import remove_message
from gateway.errors import BotRemoved
from gateway.escalation.handoff import reply_key
from gateway.models import ConversationRef, OutboundMessage, utcnow
from gateway.operators.slack_text import plain
from storage import repositories as repo
from storage.models import Contact, Conversation, Escalation, Message
from storage.removed_chats import mark_removed

log = structlog.get_logger("gateway.operators.slack")

DELIVERED = ("sent", "delivered", "read")


async def first_of(session: AsyncSession, conversation_id: int, platform_message_id: str) -> Message | None:
    """The thread message stored for Slack's message `platform_message_id` (the first: an edit of it holds its id too)."""
    return (await session.execute(select(Message).where(
        Message.conversation_id == conversation_id, Message.direction == "in",
        Message.meta["platform_message_id"].as_string() == platform_message_id)
        .order_by(Message.id).limit(1))).scalar_one_or_none()


def _can_edit(adapter: Any) -> bool:
    return adapter is not None and getattr(adapter.capabilities, "edits", False) and hasattr(adapter, "edit")


async def _addressee(session: Any, reply: Message, customer: Conversation) -> str | None:
    """The `addressee` the outbox sent `reply` with (gateway/delivery/outbox.py): the contact's name when it
    replied to no message of theirs, else None."""
    answered = await session.get(Message, reply.reply_to_id) if reply.reply_to_id else None
    if answered is not None and (answered.meta or {}).get("platform_message_id"):
        return None
    contact = await session.get(Contact, customer.contact_id) if customer.contact_id else None
    return contact.display_name if contact is not None else ""


def _older(edit_meta: dict[str, Any], reply_meta: dict[str, Any] | None) -> bool:
    """Whether an operator's edit (its `meta.revision`: Slack's `edited.ts`) is no newer than the one the reply took
    last (the reply's `meta.revision`), as the inbox orders the edits of a waiting message (`gateway.inbox._newer`).
    Why: the edits were passed on in the order they were stored, so an older one stored late (its first delivery
    lost, Slack's retry after the next edit was stored) put the text the operator had replaced back."""
    edit, passed_on = edit_meta.get("revision"), (reply_meta or {}).get("revision")
    return isinstance(edit, list) and isinstance(passed_on, list) and tuple(edit) <= tuple(passed_on)


class RevisionRelay:
    """The `ThreadRelay` half that passes an operator's edits and deletions on (a mixin, as `ThreadRelay`)."""

    async def _pass_on_revision(self, inbound: Message, conversation: Conversation, *, escalation: Escalation,
                                operator: str, sender: str) -> None:
        """Change what the customer has to the operator's edit (or take it back), or tell the operator why not."""
        meta = inbound.meta or {}
        deleted, what = bool(meta.get("deleted")), "deletion" if meta.get("deleted") else "edit"
        async with self._sessions() as session:
            original = await first_of(session, conversation.id, str(meta.get("revises")))
            customer = await session.get(Conversation, escalation.conversation_id)
            reply, addressee = None, None
            if original is not None and customer is not None and (original.meta or {}).get("sender") == sender:
                reply = await repo.outbound_by_external_id(session, conversation=customer, external_id=reply_key(
                    escalation.id, operator, f"slack-in-{original.id}"))
                addressee = await _addressee(session, reply, customer) if reply is not None else None
        if reply is None:  # refused, a file alone, or another member's: the customer never had it
            log.info("slack_operator.revision_ignored", escalation_id=escalation.id, message_id=inbound.id,
                     change=what, reason="not a reply relayed to the customer")
            return
        text = mrkdwn_to_markdown(inbound.text or "")
        if not deleted and text == reply.text:  # nothing the customer would see changed
            return
        if (reply.meta or {}).get("deleted_by_operator"):
            # Taken back already: Slack's retry of a deletion applied while it was relayed, which left no stored
            # event; or an edit, which came before the deletion (Slack edits no deleted message) and was late.
            log.info("slack_operator.revision_ignored", escalation_id=escalation.id, message_id=inbound.id,
                     change=what, reason="the reply was taken back already")
            return
        if not deleted and _older(meta, reply.meta):
            # Slack's retry of an edit whose first delivery was lost, stored after the next edit: its text was replaced.
            log.info("slack_operator.revision_ignored", escalation_id=escalation.id, message_id=inbound.id,
                     change=what, reason="an edit no newer than the one passed on already")
            return
        adapter = self._adapters.get((reply.bot, reply.channel))
        notice, changed = None, False
        if reply.status not in DELIVERED:
            notice = f"Your {what} was not passed on: your reply had not reached the customer ({reply.status})."
        elif reply.channel == "web":
            if deleted:
                notice = "The web chat cannot take a message back: the customer still sees your reply."
            else:
                changed = True
                notice = ("The customer's web chat shows your edit when it loads the conversation again; a page "
                          "they have open now still shows the first version.")
        elif not _can_edit(adapter) or not reply.provider_ids:
            platform = {"whatsapp": "WhatsApp"}.get(reply.channel, reply.channel.capitalize())
            notice = (f"{platform} cannot change a message once sent: the customer still has the first version. "
                      "Send a correction as a new reply.")
        else:
            notice, changed = await self._change_sent(adapter, customer, reply, text=text, deleted=deleted, what=what,
                                                      addressee=addressee)
        if changed:
            async with self._sessions() as session, session.begin():
                stored = await session.get(Message, reply.id)
                if stored is None:
                    # Erased meanwhile (`gateway forget`, retention): no stored reply is left to take the change.
                    log.info("slack_operator.revision_not_stored", escalation_id=escalation.id, message_id=reply.id,
                             channel=reply.channel, change=what,
                             reason="the reply was erased (gateway forget or retention) while the change was passed on")
                    return
                if deleted:
                    stored.meta = {**(stored.meta or {}), "deleted_by_operator": True}
                else:
                    stored.text = text
                    if isinstance(meta.get("revision"), list):  # the edit the customer's copy is from (`_older`)
                        stored.meta = {**(stored.meta or {}), "revision": meta["revision"]}
        log.info("slack_operator.revision_relayed" if changed else "slack_operator.revision_not_relayed",
                 escalation_id=escalation.id, message_id=reply.id, channel=reply.channel, change=what)
        if notice:
            await self._tell(inbound.bot, sender, notice, thread_ts=conversation.thread)

    async def _change_sent(self, adapter: Any, customer: Conversation, reply: Message, *, text: str, deleted: bool,
                           what: str, addressee: str | None = None) -> tuple[str | None, bool]:
        """Edit (or remove) the reply's messages on the customer's platform: (what to tell the operator, done).
        The new text is rendered and split as the send was (`render`: in a shared chat, the member's mention in
        front of the first part, and room left for it), so each message takes the part that send would post there."""
        ref = ConversationRef(channel=customer.channel, workspace=customer.workspace, chat=customer.chat,
                              thread=customer.thread)
        ids = [str(p) for p in reply.provider_ids]
        parts = [] if deleted else adapter.render(OutboundMessage(conversation=ref, text=text, addressee=addressee))
        if not deleted and len(parts) != len(ids):
            return (f"Your edit was not passed on: it does not fit the {len(ids)} message(s) the customer got. "
                    "Send a correction as a new reply."), False
        try:
            for index, provider_id in enumerate(ids):
                if deleted:
                    await remove_message(adapter, ref, provider_id)
                else:
                    await adapter.edit(ref, provider_id, parts[index], rendered=True)
        except Exception as exc:  # the platform refused (too old to edit, gone): the operator must know
            log.warning("slack_operator.revision_failed", message_id=reply.id, channel=reply.channel,
                        error=f"{type(exc).__name__}: {exc}"[:200])
            if isinstance(exc, BotRemoved):  # stored as the outbox stores a send's: later replies fail at once
                async with self._sessions() as session, session.begin():
                    await mark_removed(session, bot=reply.bot, channel=reply.channel, chat=customer.chat,
                                       removed=True, at=utcnow())
            return f"Your {what} did not reach the customer ({plain(str(exc)[:200])}): they still have the first version.", False
        return None, True
