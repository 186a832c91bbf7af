"""Held customer messages an escalation's Slack thread never got: relayed once, after a crash too.

A message held for a person is stored with `meta.relay = "owed"` when its bot has an operator channel, in
the transaction that marks it done (`MessageHandler._finish`); the worker then relays it
(`Escalations.customer_message`). Whoever posts it takes it first (`owed` → `posting`, a conditional
UPDATE: one relay, one replica wins), posts it with Slack message metadata naming it, and marks it `done`;
a failed post leaves it `posting` (Slack may have taken it though its answer was lost). The periodic check
(`SlackOperatorChannel.relay_missed`, with the reminders) posts those left `owed` for `RELAY_STALE_SECONDS`
(the process died between the store and the relay), and for those left `posting` `POSTING_STALE_SECONDS` (past
any post still under way) first looks in
the thread for a post naming them: there already, it is marked done. So each is posted once. Messages
stored without the mark (before it existed, or of a bot without an operator channel) are relayed as before.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from slack_sdk.errors import SlackApiError
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.models import as_utc, utcnow
from gateway.operators.attachments import kinds
from gateway.operators.edits import replaced_words
from gateway.operators.slack_text import customer_post
from storage.meta_keys import merged_meta
from storage.models import Escalation, Message

log = structlog.get_logger("gateway.operators.slack")

RELAY = "relay"
"""`messages.meta` key: `owed`, `posting` (with `relay_at`), `done`, or `unverified`."""
RELAY_EVENT = "gateway_customer_message"
"""The Slack message metadata `event_type` of a relayed customer message; `event_payload.message_id` names it."""
RELAY_STALE_SECONDS = 60.0
"""How long an `owed` mark stays before the periodic check takes the message: the worker's relay is over by then."""
POSTING_STALE_SECONDS = 300.0
"""How long a `posting` mark stays before the check reads the thread and posts it if absent: past any post still
under way (the Slack client waits 30 s for an answer, a 429 of up to 2 s is tried again: over 60 s), which a
thread read would not find yet, and would post a second time."""


def metadata(message_id: int) -> dict[str, Any]:
    return {"event_type": RELAY_EVENT, "event_payload": {"message_id": message_id}}


def relayed_ids(messages: list[dict[str, Any]]) -> set[int]:
    """The ids of the customer messages the thread's posts (`conversations.replies`) name in their metadata."""
    found = set()
    for message in messages:
        meta = message.get("metadata") or {}
        if meta.get("event_type") == RELAY_EVENT and isinstance((meta.get("event_payload") or {}).get("message_id"), int):
            found.add(meta["event_payload"]["message_id"])
    return found


async def take(sessions: async_sessionmaker[AsyncSession], message_id: int, *, state: str = "owed",
               relay_at: str | None = None, now: datetime | None = None) -> bool:
    """Mark message `message_id` `posting` if its mark is still `state` (and `relay_at`): True when this caller won."""
    async with sessions() as session, session.begin():
        dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
        query = update(Message).where(Message.id == message_id, Message.meta[RELAY].as_string() == state)
        if relay_at is not None:
            query = query.where(Message.meta["relay_at"].as_string() == relay_at)
        won = await session.execute(query.values(meta=merged_meta(dialect, {
            RELAY: "posting", "relay_at": (now or utcnow()).isoformat()})).execution_options(synchronize_session=False))
    return won.rowcount == 1


async def mark(sessions: async_sessionmaker[AsyncSession], message_id: int, state: str) -> None:
    async with sessions() as session, session.begin():
        dialect = session.bind.dialect.name if session.bind is not None else "sqlite"
        await session.execute(update(Message).where(Message.id == message_id).values(
            meta=merged_meta(dialect, {RELAY: state}, dropped=("relay_at",))).execution_options(synchronize_session=False))


async def claim_for_post(sessions: async_sessionmaker[AsyncSession], message_id: object) -> bool:
    """Before the worker's relay posts message `message_id`: True to post it (taken now, or stored without the
    mark), False when another relay has it or it was posted."""
    if not isinstance(message_id, int):
        return True
    if await take(sessions, message_id):
        return True
    async with sessions() as session:
        message = await session.get(Message, message_id)
    return message is not None and RELAY not in (message.meta or {})


class BacklogRelay:
    """The `SlackOperatorChannel` half that posts held messages its relay missed (a mixin: it uses the channel's
    `_sessions`, `_settings`, `_adapters`, `_post`, `_opening_thread` and `channel_for`)."""

    async def relay_missed(self, now: datetime | None = None) -> list[int]:
        """Post each held customer message of a live escalation's thread left `owed` or `posting` for
        `RELAY_STALE_SECONDS` (see the module), once; returns their ids. A periodic check (`HandoffReminders`)."""
        now = now or utcnow()
        cutoffs = {"owed": now - timedelta(seconds=RELAY_STALE_SECONDS),
                   "posting": now - timedelta(seconds=POSTING_STALE_SECONDS)}
        posted: list[int] = []
        for bot in self._settings.bots:
            channel = self.channel_for(bot.name)
            if channel is None:
                continue
            async with self._sessions() as session:
                rows = (await session.execute(select(Message, Escalation).join(
                    Escalation, Escalation.conversation_id == Message.conversation_id).where(
                    Escalation.bot == bot.name, Escalation.state.in_(("open", "claimed")), Escalation.slack_ts.is_not(None),
                    Message.direction == "in", Message.created_at >= Escalation.created_at,
                    Message.meta[RELAY].as_string().in_(("owed", "posting"))).order_by(Message.id))).all()
            for message, escalation in rows:
                state, relay_at = (message.meta or {}).get(RELAY), (message.meta or {}).get("relay_at")
                since = as_utc(message.updated_at) if state == "owed" else _parsed(relay_at)
                if since is None or since >= cutoffs[state]:
                    continue  # the worker's relay may still be under way
                async with self._opening_thread(escalation.id):
                    if not await take(self._sessions, message.id, state=state, relay_at=relay_at if state == "posting" else None,
                                      now=now):
                        continue  # another replica has it
                    if state == "posting" and not await self._absent_from_thread(bot.name, channel, escalation, message.id):
                        continue
                    async with self._sessions() as session:
                        replaces = await replaced_words(session, message.id)
                    label = "*Customer (earlier):*" if replaces is None else "*Customer (earlier, edited):*"
                    ts = await self._post(bot.name, channel, customer_post(label, message.text or "", kinds(message.attachments),
                                                                           replaces=replaces),
                                          thread_ts=escalation.slack_ts, metadata=metadata(message.id))
                    if ts is not None:
                        await mark(self._sessions, message.id, "done")
                        posted.append(message.id)
        if posted:
            log.warning("slack_operator.relayed_late", messages=posted)
        return posted

    async def _absent_from_thread(self, bot: str, channel: str, escalation: Escalation, message_id: int) -> bool:
        """Whether the thread holds no post of message `message_id` (a relay that died after Slack took its post):
        False when it does (marked done), when Slack refuses to show it (marked `unverified`: never posted twice),
        or when the read failed for now (a 5xx, a 429, a timeout: left `posting`, read again at the next check)."""
        try:
            response = await self._adapters[(bot, "slack")].client.conversations_replies(
                channel=escalation.slack_channel or channel, ts=escalation.slack_ts, include_all_metadata=True, limit=1000)
        except Exception as exc:
            passing = _passing(exc)
            log.warning("slack_operator.relay_unverified", escalation_id=escalation.id, message_id=message_id,
                        error=str(exc)[:200], retry=passing)
            if not passing:
                await mark(self._sessions, message_id, "unverified")
            return False
        if message_id in relayed_ids(response.get("messages") or []):
            await mark(self._sessions, message_id, "done")
            return False
        return True


_PASSING_ERRORS = {"ratelimited", "internal_error", "fatal_error", "request_timeout", "service_unavailable"}


def _passing(exc: Exception) -> bool:
    """Whether a failed thread read may answer next time: anything but Slack's lasting refusal (`missing_scope`,
    `channel_not_found`, `not_in_channel`, ...), which leaves the message `unverified`."""
    if not isinstance(exc, SlackApiError):
        return True  # no answer: a timeout, a dropped connection
    status = getattr(exc.response, "status_code", 200)
    return status >= 500 or status == 429 or (exc.response.get("error") if exc.response else None) in _PASSING_ERRORS


def _parsed(value: object) -> datetime | None:
    try:
        return as_utc(datetime.fromisoformat(value)) if isinstance(value, str) else None
    except ValueError:
        return None
