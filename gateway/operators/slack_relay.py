"""What members write in an escalation's Slack thread, on its way to the customer (`ThreadRelay.intercept`).

An operator's thread reply is sent to the customer on whatever channel the customer is on, as their
operator (`slack_access`); anyone else is told privately that nothing was sent. Only text is relayed: a
file posted with it (a screenshot, a PDF) stays in Slack, where the customer cannot open it (its
`url_private` needs the app's token), so the operator is told so in a message only they see, and the
words posted with it still go. An operator's edit or deletion of a relayed reply is passed on
(`slack_edits`).
"""

from __future__ import annotations

from typing import Any

import structlog
from sqlalchemy import select

from channels.slack_render import mrkdwn_to_markdown
from gateway.errors import BadRequest, Conflict, NotFound
from gateway.models import is_blank
from gateway.operators.slack_access import not_an_operator, operator_of_member
from gateway.operators.slack_edits import RevisionRelay, first_of
from gateway.operators.slack_text import named
from storage.meta_keys import set_meta_key
from storage.models import Conversation, Escalation, Message

log = structlog.get_logger("gateway.operators.slack")


def files_not_sent(attachments: list[dict[str, Any]]) -> str:
    """What an operator who posted files in the thread reads: they were not sent, and why."""
    kinds = sorted({str(a.get("kind") or "file") for a in attachments})
    what = f"Your file ({kinds[0]})" if len(attachments) == 1 else f"Your {len(attachments)} files ({', '.join(kinds)})"
    return (f"{what} was not sent to the customer: only text is relayed from this thread. Describe it in "
            "words, or send it to the customer some other way (e-mail, a link they can open).")


class ThreadRelay(RevisionRelay):
    """The `SlackOperatorChannel` half that relays thread messages to the customer (a mixin: it uses the
    channel's `_sessions`, `_settings`, `_escalations`, `_adapters`, `_post` and `channel_for`)."""

    async def intercept(self, inbound: Message, conversation: Conversation) -> bool:
        """A worker hook: True when `inbound` is an operator's reply in an escalation thread (relayed)."""
        if inbound.channel != "slack":
            return False
        if conversation.chat != self.channel_for(inbound.bot):
            # An operator's stored edit is no question for the bot, even once the channel is no longer theirs.
            return bool((inbound.meta or {}).get("revises"))
        async with self._sessions() as session:
            escalation = (await session.execute(select(Escalation).where(
                Escalation.bot == inbound.bot, Escalation.slack_ts == conversation.thread))).scalar_one_or_none()
        if escalation is None:
            return True  # chatter in the operator channel is never answered by the bot
        # The message's own sender: the thread's conversation belongs to whoever wrote in it first.
        sender = (inbound.meta or {}).get("sender")
        if not sender and (inbound.meta or {}).get("revises"):
            # A change of a post no member wrote (an integration's, deleted): nothing of it reached the customer.
            log.info("slack_operator.revision_ignored", escalation_id=escalation.id, message_id=inbound.id,
                     change="deletion" if inbound.meta.get("deleted") else "edit", reason="a message without a sender")
            return True
        if not sender:  # stored before senders were recorded: it cannot be attributed to anyone
            await self._post(inbound.bot, conversation.chat, "Not sent to the customer: send it again, please.",
                             thread_ts=conversation.thread)
            return True
        operator = operator_of_member(self._settings, inbound.bot, sender)
        if operator is None:
            await self._refuse_once(inbound, conversation, escalation_id=escalation.id, sender=sender)
            return True
        if (inbound.meta or {}).get("edit_of"):  # edited or deleted while it was relayed (`gateway.edits_meanwhile`)
            inbound.meta = {**inbound.meta, "revises": inbound.meta.get("platform_message_id"),
                            "deleted": bool(inbound.meta.get("deleted"))}
        if (inbound.meta or {}).get("revises"):  # an edit or deletion of a reply relayed already
            await self._pass_on_revision(inbound, conversation, escalation=escalation, operator=operator, sender=sender)
            return True
        if inbound.attachments:
            log.info("slack_operator.file_not_relayed", escalation_id=escalation.id, operator=operator,
                     message_id=inbound.id, files=len(inbound.attachments))
            await self._tell(inbound.bot, sender, files_not_sent(inbound.attachments), thread_ts=conversation.thread)
            if is_blank(inbound.text or ""):
                return True  # a file alone: nothing to send, and "text must not be empty" would say nothing of it
        try:
            # Keyed by the operator's own stored message: a worker that died after relaying it and before
            # marking it done handles it again, and must not send the customer a second copy.
            # Written in Slack's mrkdwn; the customer's channel renders Markdown.
            await self._escalations.reply(escalation.id, operator=operator, text=mrkdwn_to_markdown(inbound.text), bots=None,
                                          source="slack", message_id=f"slack-in-{inbound.id}")
        except (Conflict, BadRequest, NotFound) as exc:
            # Where to answer instead, from the state the refusal was worded from (`conflict_now`): read again,
            # a customer asking for a person in between made it follow "the bot answers the customer again".
            newer = exc.newer_id if isinstance(exc, Conflict) else None
            where = f" Answer in the thread of escalation #{newer}." if newer else ""
            await self._post(inbound.bot, conversation.chat, f"Not sent to the customer: {named(str(exc)).rstrip('.')}."
                             f"{where}", thread_ts=conversation.thread)
        return True

    async def _refuse_once(self, inbound: Message, conversation: Conversation, *, escalation_id: int, sender: str) -> None:
        """Refuse a thread message of a member who is no operator, once per message: an edit or deletion of one
        they were refused for (`meta.refused` on it) is logged, not refused again (each typo fixed was another)."""
        meta = inbound.meta or {}
        revised = meta.get("revises") or (meta.get("platform_message_id") if meta.get("edit_of") else None)
        async with self._sessions() as session, session.begin():
            first = await first_of(session, conversation.id, str(revised)) if revised else None
            refused = bool(first is not None and (first.meta or {}).get("refused"))
            if not refused:
                await set_meta_key(session, message_id=(first or inbound).id, key="refused", value=True)
        if refused:
            log.info("slack_operator.revision_ignored", escalation_id=escalation_id, message_id=inbound.id,
                     change="deletion" if meta.get("deleted") else "edit", reason="not an operator: refused once already")
            return
        await self._refuse(inbound.bot, sender, action="reply", escalation_id=escalation_id, thread_ts=conversation.thread)

    async def _refuse(self, bot: str, member: str, *, action: str, escalation_id: int, thread_ts: str | None) -> None:
        """Tell a member who is no operator of `bot`, in a message only they see, that nothing happened."""
        log.warning("slack_operator.not_an_operator", bot=bot, user=member, action=action, escalation_id=escalation_id)
        await self._tell(bot, member, not_an_operator(self._settings, bot, member), thread_ts=thread_ts)

    async def _tell(self, bot: str, member: str, text: str, *, thread_ts: str | None) -> None:
        """A message in the operator channel (in `thread_ts`, when given) that only `member` sees."""
        channel = self.channel_for(bot)
        if channel is None:
            return
        try:
            await self._adapters[(bot, "slack")].client.chat_postEphemeral(
                channel=channel, user=member, text=text, **({"thread_ts": thread_ts} if thread_ts else {}))
        except Exception as exc:  # what it says stands whether or not Slack shows it
            log.warning("slack_operator.post_failed", bot=bot, channel=channel, error=str(exc))

