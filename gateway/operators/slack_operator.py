"""The Slack operator channel (optional per bot: `channels.slack.operator_channel`).

- Each escalation posts one message to the channel with Claim and Resolve buttons; its thread is the
  relay: the customer's new messages are posted there, and operators' thread replies go to the customer
  on whatever channel the customer is on.
- Button clicks arrive at `POST /webhooks/{bot}/slack/actions` (the Slack app's Interactivity URL,
  `gateway/operators/slack_actions.py`), signed with the bot's Slack signing secret and verified by its
  Slack adapter.
- Thread replies arrive as ordinary Slack events, become inbound messages, and the worker hands them to
  `intercept` (`gateway/operators/slack_relay.py`: text only, files told; edits and deletions passed on by
  `slack_edits.py`) before the pipeline sees them, so the bot never answers its own operators.
Only members an operator's `slack_user_ids` names may act (`slack_access`), as that operator (the hold,
the audit trail, the console), so one person in the console and in Slack holds a thread once; anyone else
is told so privately and nothing changes. (`slack:<user id>`: a claim from before members were mapped.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import structlog
from slack_sdk.errors import SlackApiError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from channels.slack_errors import rate_limit_wait
from gateway.errors import Conflict, NotFound
from gateway.escalation.handoff import Escalations
from gateway.models import as_utc, utcnow
from gateway.operators.attachments import kinds
from gateway.operators.edits import replaced_words
from gateway.operators.slack_access import mention_of, operator_of_member
from gateway.operators.slack_backlog import BacklogRelay, claim_for_post, mark, metadata
from gateway.operators.slack_relay import ThreadRelay
from gateway.operators.slack_text import clip, customer_post, header_title, named, plain, quoted, slack_time
from gateway.operators.summary import summarize, summary_messages
from gateway.settings import Settings
from storage.models import Escalation, Message

if TYPE_CHECKING:
    from gateway.operators.slack_actions import Click

log = structlog.get_logger("gateway.operators.slack")

CLAIM_ACTION = "escalation_claim"
RESOLVE_ACTION = "escalation_resolve"
THREAD_WAIT_SECONDS = 10.0
"""How long after an escalation opens a thread event waits for the header post that names the thread."""
THREAD_POLL_SECONDS = 0.1
LATE_THREAD_MESSAGES = 20
RATE_LIMIT_WAIT_S = 2.0
"""The longest Retry-After a post waits out (once): a relay holds the worker's slot while it waits."""
HEADER_CLOCK_SLACK_S = 60.0  # Slack's clock against ours, as `_find_header` reads the history from


class SlackOperatorChannel(ThreadRelay, BacklogRelay):
    """Posts escalations to each bot's operator channel and relays its threads."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, settings: Settings, escalations: Escalations,
                 adapters: dict, llm=None, budget=None) -> None:
        self._sessions = sessions
        self._settings = settings
        self._escalations = escalations
        self._adapters = adapters
        self._llm = llm  # writes the thread's summary; without it, the summary is extractive
        self._budget = budget  # gateway.budget.DailyBudget: the summary's calls are the bot's spending
        # Per escalation, held while this process opens its thread (header, summary, earlier messages):
        # the thread's ts is stored as soon as the header is posted, and a relay that saw it would
        # otherwise land before the summary, which a model may take seconds to write.
        self._opening: dict[int, asyncio.Lock] = {}
        self._sleep = asyncio.sleep

    def channel_for(self, bot: str) -> str | None:
        """The bot's operator channel, when it has one and a Slack adapter to post with."""
        try:
            slack = self._settings.bot(bot).channels.slack
        except KeyError:
            return None
        if slack is None or not slack.enabled or not slack.operator_channel or (bot, "slack") not in self._adapters:
            return None
        return slack.operator_channel

    async def on_event(self, event: dict[str, Any]) -> None:
        """An `Escalations` listener: mirror each change into the escalation's Slack thread."""
        bot, kind = event.get("bot", ""), event.get("type")
        channel = self.channel_for(bot)
        if channel is None:
            return
        async with self._sessions() as session:
            escalation = await session.get(Escalation, event["escalation_id"])
        if escalation is None:
            return
        if kind == "opened":
            async with self._opening_thread(escalation.id):
                if await self._post_escalation(escalation, channel):
                    await self._post_summary(escalation, channel)
            return
        if not escalation.slack_ts:
            escalation = await self._wait_for_thread(escalation)
            if not escalation.slack_ts:
                log.warning("slack_operator.no_thread", escalation_id=escalation.id, event=kind)
                return
        await self._thread_opened(escalation.id)
        if kind == "customer_message":
            message_id = event.get("message_id")
            if not await claim_for_post(self._sessions, message_id):
                return  # posted already, or another relay has it (`slack_backlog`)
            async with self._sessions() as session:
                replaces = await replaced_words(session, message_id)
            label = "*Customer:*" if replaces is None else "*Customer (edited):*"
            await self._post_customer(bot, channel, customer_post(label, event.get("text") or "", event.get("attachments") or [],
                                                                  replaces=replaces), escalation.slack_ts, message_id)
        elif kind == "reply" and event.get("source") != "slack":
            await self._post(bot, channel, f"*{named(event.get('operator', ''))} replied:* "
                             f"{plain(clip(event.get('text', ''), 2000))}", thread_ts=escalation.slack_ts)
        elif kind in ("claimed", "resolved", "released", "taken_over"):
            await self._update_header(escalation, channel)
            if kind == "released":
                await self._post(bot, channel, f"<!here> {named(event.get('operator', ''))} released this thread: "
                                 "can someone take it?", thread_ts=escalation.slack_ts, reply_broadcast=True)
            elif kind == "taken_over":
                await self._post(bot, channel, f"{named(event.get('operator', ''))} took this thread over from "
                                 f"{named(event.get('previous_operator', ''))}.", thread_ts=escalation.slack_ts)
        elif kind == "reply_failed":
            # Without this, an operator replying from Slack never learned the customer did not get it.
            who = mention_of(self._settings, event.get("operator", ""))
            await self._post(bot, channel, f"Not delivered to the customer: {who}'s reply "
                             f"\"{plain(clip(event.get('text', ''), 200))}\" "
                             f"({plain(event.get('error') or 'refused')}).", thread_ts=escalation.slack_ts)
        elif kind == "stale_claim":
            # The holder mentioned: `@here` reaches only the members active now, and they may be the one away.
            holder = mention_of(self._settings, event.get("operator", ""))
            await self._post(bot, channel, f"<!here> The customer has waited {event.get('waiting_minutes')} min for "
                             f"{holder}'s reply; another operator can take it over in "
                             "the console.", thread_ts=escalation.slack_ts, reply_broadcast=True)
        elif kind == "reminder":
            told = "has been told we're busy" if event.get("customer_told", True) \
                else "was not told (unclaimed_message is empty)"
            after = f" after {event['waiting_minutes']} min" if event.get("waiting_minutes") else ""
            await self._post(bot, channel, f"<!here> Still unclaimed{after}: the customer {told}. "
                             "Can someone take it?", thread_ts=escalation.slack_ts, reply_broadcast=True)

    @contextlib.asynccontextmanager
    async def _opening_thread(self, escalation_id: int) -> AsyncIterator[None]:
        """Hold the escalation's opening lock while its thread is opened (see `_opening`)."""
        lock = self._opening.setdefault(escalation_id, asyncio.Lock())
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and self._opening.get(escalation_id) is lock:
                del self._opening[escalation_id]

    async def _thread_opened(self, escalation_id: int) -> None:
        """Return once this process has finished opening the escalation's thread, if it is opening it."""
        lock = self._opening.get(escalation_id)
        if lock is not None:
            async with lock:
                pass

    async def _wait_for_thread(self, escalation: Escalation) -> Escalation:
        """The escalation once its header post has stored the thread's ts, or as it is after
        `THREAD_WAIT_SECONDS` from its creation. Why: the header is posted after the escalation
        commits, in a task of its own (or by another replica), so a customer message or a claim that
        comes right after can find no thread yet; dropping it would lose it from the relay."""
        deadline = as_utc(escalation.created_at) + timedelta(seconds=THREAD_WAIT_SECONDS)
        while not escalation.slack_ts and (left := (deadline - utcnow()).total_seconds()) > 0:
            # The last look is at the deadline, not a poll after it: from then on `post_missing_headers`
            # owns a missing header and relays the earlier messages itself, so none is relayed twice.
            await asyncio.sleep(min(THREAD_POLL_SECONDS, left))
            async with self._sessions() as session:
                escalation = await session.get(Escalation, escalation.id) or escalation
        return escalation

    async def _find_header(self, escalation: Escalation, channel: str) -> str | None:
        """The ts of this escalation's header if Slack took the first post though its answer was lost
        (a timeout), read from the channel's recent history; None when there is none or the app may
        not read the history (then a second header is the lesser harm)."""
        marker = header_title(escalation)
        adapter = self._adapters[(escalation.bot, "slack")]
        try:
            response = await adapter.client.conversations_history(
                channel=channel, oldest=f"{as_utc(escalation.created_at).timestamp() - HEADER_CLOCK_SLACK_S:.6f}", limit=200)
        except Exception as exc:
            log.info("slack_operator.history_unavailable", escalation_id=escalation.id, error=str(exc))
            return None
        for message in response.get("messages") or []:
            # Only the app's own post: anyone in the channel can write a message that starts like a header,
            # and the customer's messages would then be relayed under it.
            ours = bool(message.get("bot_id")) and adapter.bot_user_id in (None, message.get("user"))
            if ours and (message.get("text") or "").startswith(marker) and message.get("thread_ts") in (None, message.get("ts")):
                return str(message["ts"])
        return None

    async def _store_thread(self, escalation_id: int, channel: str, ts: str) -> bool:
        """Make `ts` the escalation's thread unless one is stored already (another replica's post, or
        a header found late); True when it became the thread."""
        async with self._sessions() as session, session.begin():
            stored = await session.execute(
                update(Escalation).where(Escalation.id == escalation_id, Escalation.slack_ts.is_(None))
                .values(slack_channel=channel, slack_ts=ts).execution_options(synchronize_session=False))
        return stored.rowcount == 1

    async def _adopt_header(self, escalation: Escalation, channel: str, ts: str) -> bool:
        """Store a header found in the channel as the escalation's thread (unless one is stored already)."""
        stored = await self._store_thread(escalation.id, channel, ts)
        log.info("slack_operator.header_found", escalation_id=escalation.id, ts=ts, stored=stored)
        if not stored:
            return False
        async with self._sessions() as session:
            current = await session.get(Escalation, escalation.id)
        await self._update_header(current, channel)  # a claim since then did not reach it
        return True

    async def _post_summary(self, escalation: Escalation, channel: str) -> None:
        """The thread's first reply: the summary the console shows on top (what the customer wants, what
        the bot said, the tools it used), so a Slack operator can claim without opening the console."""
        try:
            bot = self._settings.bot(escalation.bot)
        except KeyError:
            return
        async with self._sessions() as session:
            thread_ts = (await session.get(Escalation, escalation.id)).slack_ts
            messages = await summary_messages(session, conversation_id=escalation.conversation_id)
        summary = await summarize(self._llm, bot, messages, reason=escalation.reason, budget=self._budget,
                                  conversation_id=escalation.conversation_id)
        await self._post(escalation.bot, channel, f"*Summary:*\n{quoted(summary['text'])}", thread_ts=thread_ts)

    async def _relay_earlier_messages(self, escalation: Escalation, channel: str) -> None:
        """Post into a late thread what the customer wrote since the handoff (the last
        `LATE_THREAD_MESSAGES`), so the Slack operators read the same story as the console."""
        async with self._sessions() as session:
            thread_ts = (await session.get(Escalation, escalation.id)).slack_ts
            earlier = (await session.execute(select(Message).where(
                Message.conversation_id == escalation.conversation_id, Message.direction == "in",
                Message.created_at >= escalation.created_at).order_by(Message.id.desc()).limit(LATE_THREAD_MESSAGES))).scalars().all()
            replaced = {m.id: await replaced_words(session, m.id) for m in earlier}
        for message in reversed(earlier):
            if not await claim_for_post(self._sessions, message.id):
                continue
            replaces = replaced[message.id]
            label = "*Customer (earlier):*" if replaces is None else "*Customer (earlier, edited):*"
            await self._post_customer(escalation.bot, channel, customer_post(label, message.text or "", kinds(message.attachments),
                                                                             replaces=replaces), thread_ts, message.id)

    async def _post_customer(self, bot: str, channel: str, text: str, thread_ts: str, message_id: object) -> None:
        """Post a customer's message in its thread, named in the post's metadata, and mark it relayed (`slack_backlog`)."""
        if not isinstance(message_id, int):
            await self._post(bot, channel, text, thread_ts=thread_ts)
        elif await self._post(bot, channel, text, thread_ts=thread_ts, metadata=metadata(message_id)) is not None:
            await mark(self._sessions, message_id, "done")

    def _blocks(self, escalation: Escalation) -> tuple[str, list[dict[str, Any]]]:
        status = {"open": "waiting for someone", "claimed": f"claimed by {escalation.operator}",
                  "resolved": f"resolved by {escalation.operator}"}.get(escalation.state, escalation.state)
        text = (f"{header_title(escalation)}: {plain(clip(escalation.reason, 300))}. "
                f"Status: {named(status)}. Reply in this thread to answer the customer.")
        blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": text}}]
        buttons = []
        if escalation.state == "open":
            buttons.append({"type": "button", "action_id": CLAIM_ACTION, "value": str(escalation.id),
                            "style": "primary", "text": {"type": "plain_text", "text": "Claim"}})
        if escalation.state in ("open", "claimed"):
            buttons.append({"type": "button", "action_id": RESOLVE_ACTION, "value": str(escalation.id),
                            "text": {"type": "plain_text", "text": "Resolve"}})
        if buttons:
            blocks.append({"type": "actions", "elements": buttons})
        return text, blocks

    async def _post_escalation(self, escalation: Escalation, channel: str) -> bool:
        """Post the header and store its ts, unless another replica stored one first (then ours is
        deleted, so the channel keeps one thread per escalation). True when this post became the thread."""
        text, blocks = self._blocks(escalation)
        ts = await self._post(escalation.bot, channel, text, blocks=blocks)
        if ts is None:
            return False
        if not await self._store_thread(escalation.id, channel, ts):
            log.info("slack_operator.duplicate_header_deleted", escalation_id=escalation.id, ts=ts)
            with contextlib.suppress(Exception):
                await self._adapters[(escalation.bot, "slack")].client.chat_delete(channel=channel, ts=ts)
            return False
        log.info("slack_operator.posted", escalation_id=escalation.id, channel=channel, ts=ts)
        return True

    async def post_missing_headers(self, now: datetime | None = None) -> list[int]:
        """Post the header of every live escalation whose first post failed (Slack was down or refused
        it); returns their ids. A periodic check (`HandoffReminders`): without it, a Slack outage at the
        moment of the handoff would hide the escalation from the channel for good. Escalations younger
        than `THREAD_WAIT_SECONDS` are left alone: their first post may still be in flight."""
        now = now or utcnow()
        posted: list[int] = []
        for bot in self._settings.bots:
            channel = self.channel_for(bot.name)
            if channel is None:
                continue
            async with self._sessions() as session:
                missing = (await session.execute(select(Escalation).where(
                    Escalation.bot == bot.name, Escalation.state.in_(("open", "claimed")), Escalation.slack_ts.is_(None),
                    Escalation.created_at < now - timedelta(seconds=THREAD_WAIT_SECONDS)))).scalars().all()
            for escalation in missing:
                async with self._opening_thread(escalation.id):
                    landed = await self._find_header(escalation, channel)
                    if landed:
                        became_thread = await self._adopt_header(escalation, channel, landed)
                    else:
                        became_thread = await self._post_escalation(escalation, channel)
                    if became_thread:
                        posted.append(escalation.id)
                        await self._post_summary(escalation, channel)
                        await self._relay_earlier_messages(escalation, channel)
        if posted:
            log.warning("slack_operator.headers_posted_late", escalations=posted)
        return posted

    async def _update_header(self, escalation: Escalation, channel: str) -> None:
        text, blocks = self._blocks(escalation)
        try:
            await self._adapters[(escalation.bot, "slack")].client.chat_update(
                channel=escalation.slack_channel or channel, ts=escalation.slack_ts, text=text, blocks=blocks)
        except Exception as exc:
            log.warning("slack_operator.update_failed", escalation_id=escalation.id, error=str(exc))

    async def _post(self, bot: str, channel: str, text: str, *, waited: bool = False, **kwargs: Any) -> str | None:
        try:
            response = await self._adapters[(bot, "slack")].client.chat_postMessage(
                channel=channel, text=text, unfurl_links=False, unfurl_media=False, **kwargs)
        except Exception as exc:  # the operator channel is best effort; the console and API still work
            retry_after = rate_limit_wait(exc) if isinstance(exc, SlackApiError) else None
            if retry_after is not None and retry_after <= RATE_LIMIT_WAIT_S and not waited:
                await self._sleep(retry_after)  # a 429 lost the customer's message from the thread
                return await self._post(bot, channel, text, waited=True, **kwargs)
            log.warning("slack_operator.post_failed", bot=bot, channel=channel, error=str(exc), retry_after=retry_after)
            return None
        return str(response.get("ts"))

    async def handle_action(self, bot: str, click: Click) -> str:
        """A Claim or Resolve click (`slack_actions.first_click`); returns what happened, for the log."""
        operator = operator_of_member(self._settings, bot, click.user_id)
        if operator is None:
            # In the channel, under the header they clicked, not in its thread where they are not looking.
            await self._refuse(bot, click.user_id, action=click.action_id, escalation_id=click.escalation_id,
                               thread_ts=None)
            return f"refused: {click.user_id} is not an operator for this bot"
        if click.header_ts is not None:
            # The button must be on a header of this escalation. An id can name another escalation by now:
            # SQLite gives a deleted row's id again (`gateway forget`, retention), and a header left from
            # the deleted one would claim or resolve the new conversation. Such a header was posted before
            # this escalation began; one posted after is its own, a second header included (`_find_header`).
            async with self._sessions() as session:
                row = await session.get(Escalation, click.escalation_id)
            if row is not None and row.bot == bot and row.slack_ts is not None and row.slack_ts != click.header_ts \
                    and slack_time(click.header_ts) < as_utc(row.created_at).timestamp() - HEADER_CLOCK_SLACK_S:
                channel = self.channel_for(bot)
                if channel:
                    await self._post(bot, channel, f"<@{click.user_id}>: this header's conversation was deleted; "
                                                   "nothing was changed", thread_ts=click.header_ts)
                return f"refused: the button is on header {click.header_ts}, not escalation {row.id}'s"
        try:
            if click.action_id == CLAIM_ACTION:
                await self._escalations.claim(click.escalation_id, operator=operator, bots=[bot])
            else:
                await self._escalations.resolve(click.escalation_id, operator=operator, bots=[bot])
        except (Conflict, NotFound) as exc:
            channel = self.channel_for(bot)
            async with self._sessions() as session:
                row = await session.get(Escalation, click.escalation_id)
            if click.action_id == RESOLVE_ACTION and row is not None and row.state == "resolved" and row.operator == operator:
                # Their own first click of a double click (the button stays until the header is updated), as a
                # Claim the holder repeats is no conflict either.
                return f"{click.action_id} {click.escalation_id} by {operator} (resolved already)"
            # Only in this bot's own thread: another bot's header (same channel or not) is not this one's to answer in.
            if channel and row is not None and row.bot == bot and row.slack_ts:
                await self._post(bot, channel, f"<@{click.user_id}>: {named(str(exc))}", thread_ts=row.slack_ts)
            return f"refused: {exc}"
        return f"{click.action_id} {click.escalation_id} by {operator}"
