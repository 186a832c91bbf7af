"""Channel API faults after the answer is stored: 429, 5xx, and a timeout after the platform accepted.

Through the real app and the real aiogram client against the fake Bot API. The customer must get
each reply exactly once at the fake: a refused send (429, 5xx) is resent, a send whose outcome is
unknown (the platform took it, then the connection timed out) is never resent blindly.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest
import pytest_asyncio
from sqlalchemy import select

from storage.models import Message
from tests.fakes.telegram_api import FakeTelegramAPI
from tests.gateway_channels.conftest import get_message, settle, wait_until
from tests.reliability.conftest import TG_TOKEN, running_app, telegram_channel, telegram_request, telegram_update

pytestmark = pytest.mark.asyncio(loop_scope="module")
_ids = itertools.count(300000)


class StallingTelegramAPI(FakeTelegramAPI):
    """The fake Bot API, able to accept a sendMessage and then not answer (the client times out)."""

    stall_next_sends = 0
    stall_seconds = 5.0

    async def _m_sendmessage(self, params):
        result = await super()._m_sendmessage(params)  # recorded as delivered, like Telegram would
        if self.stall_next_sends:
            self.stall_next_sends -= 1
            await asyncio.sleep(self.stall_seconds)
        return result


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("faults-channel")
    async with StallingTelegramAPI(TG_TOKEN) as telegram:
        bots = [{"name": "acme", "channels": {"web": {}, "telegram": telegram_channel(telegram.base_url)}}]
        async with running_app(tmp_path, bots=bots) as (client, services):
            adapter = services.adapters[("acme", "telegram")]
            adapter.bot.session.timeout = 1.0  # the client gives up long before the stalled reply
            services.outbox.max_backoff_s = services.outbox.max_platform_wait_s = 0.3  # retries come quickly
            yield client, services, telegram


def sent_to(fake, chat: int):
    return [m for m in fake.sent if m.chat_id == chat]


async def _ask(client, chat: int, text: str = "Do you have a student discount?") -> None:
    response = await client.post("/webhooks/acme/telegram", **telegram_request(telegram_update(next(_ids), text,
                                                                                               chat=chat)))
    assert response.status_code == 200


async def _reply_row(services, chat: int) -> Message:
    from storage.models import Conversation

    async def settled():
        async with services.sessions() as session:
            rows = (await session.execute(select(Message).join(Conversation, Message.conversation_id == Conversation.id)
                                          .where(Conversation.chat == str(chat), Message.direction == "out"))).scalars().all()
        return rows[0] if rows and rows[0].status not in ("pending", "sending") else None

    return await wait_until(settled, timeout=30, what=f"the reply in chat {chat} to settle")


@pytest.mark.parametrize("status", [429, 500, 502])
async def test_channel_refused_send_is_resent_and_delivered_once(env, status):
    client, services, fake = env
    chat = 9100 + status
    fake.fail_next("sendMessage", status=status, retry_after=1 if status == 429 else None)
    await _ask(client, chat)
    reply = await _reply_row(services, chat)
    await settle()
    assert reply.status == "sent"
    assert len(sent_to(fake, chat)) == 1
    failed_calls = [c for c in fake.calls("sendMessage") if str(c.params.get("chat_id")) == str(chat)]
    assert len(failed_calls) == 2  # the refused call, then the one that went through


async def test_channel_rate_limit_longer_than_the_adapter_waits_is_retried_later_once(env):
    client, services, fake = env
    chat = 9200
    fake.fail_next("sendMessage", status=429, retry_after=120)  # far past the adapter's in-place wait
    await _ask(client, chat)
    reply = await _reply_row(services, chat)
    await settle()
    assert reply.status == "sent" and reply.attempts == 2
    assert len(sent_to(fake, chat)) == 1


async def test_channel_timeout_after_the_platform_accepted_never_sends_twice(env):
    client, services, fake = env
    chat = 9300
    fake.stall_next_sends = 1
    await _ask(client, chat)
    reply = await _reply_row(services, chat)
    await asyncio.sleep(fake.stall_seconds)  # past the stall, and several retry windows
    await settle(1.0)
    assert len(sent_to(fake, chat)) == 1  # the customer got it once
    final = await get_message(services, reply.id)
    # At most once: the outcome is unknown, so it is surfaced as failed (log, counter, error), never resent.
    assert final.status == "failed" and "outcome unknown" in final.error and final.attempts == 1


async def test_an_operator_message_held_by_a_flood_wait_is_not_taken_for_a_dead_replicas_and_sent_twice(env):
    # An operator's message is sent outside any conversation lease. Telegram holds it (429, retry
    # after 5 s, waited in place by the adapter: its most) for longer than the two lease periods after which
    # the worker's sweep takes a `sending` row for a dead replica's and requeues it. The send is alive, so
    # its heartbeat keeps the row fresh and the customer gets the message once. (A 0.2 s heartbeat against a
    # 1 s stall was late under a CI's load average of 14: seconds, not a ratio, are what load takes away.)
    client, services, fake = env
    chat = 9400
    await _ask(client, chat)
    answer = await _reply_row(services, chat)
    saved = services.worker.lease_seconds, services.outbox.heartbeat_s
    services.worker.lease_seconds, services.outbox.heartbeat_s = 2.0, 0.3  # stalled after 4 s, swept every 2 s
    try:
        escalation = await services.escalations.claim_conversation(answer.conversation_id, operator="ann", bots=None)
        fake.fail_next("sendMessage", status=429, retry_after=5)
        message = await services.escalations.reply(escalation.id, operator="ann", text="Ann here, one moment.",
                                                   bots=None)
        await settle(4.5)  # two sweeps after the send ended: a requeued copy would go out now
    finally:
        services.worker.lease_seconds, services.outbox.heartbeat_s = saved
    final = await get_message(services, message.id)
    assert final.status == "sent" and final.attempts == 1
    assert [m.text for m in sent_to(fake, chat)].count("Ann here, one moment.") == 1


async def _rate_limited_reply(env, chat: int, *, times: int, **outbox) -> Message:
    """The reply to a question in `chat` after `times` 429s longer than the adapter waits in place,
    with these outbox settings meanwhile."""
    client, services, fake = env
    saved = {name: getattr(services.outbox, name) for name in outbox}
    for name, value in outbox.items():
        setattr(services.outbox, name, value)
    try:
        fake.fail_next("sendMessage", status=429, retry_after=120, times=times)
        await _ask(client, chat)
        return await _reply_row(services, chat)
    finally:
        for name, value in saved.items():
            setattr(services.outbox, name, value)


async def test_a_long_rate_limit_delays_the_reply_without_using_up_its_attempts(env):
    # Telegram (like Discord and Slack) answers 429 with a retry_after past the adapter's in-place wait,
    # again and again for longer than `max_attempts` retries: nothing is wrong with the reply, the platform
    # says "later". Each 429 counted as a failed attempt, so the reply failed after the tenth.
    reply = await _rate_limited_reply(env, 9700, times=5, max_attempts=3)
    assert reply.status == "sent" and reply.attempts == 6, reply.error
    assert len(sent_to(env[2], 9700)) == 1


async def test_a_reply_still_rate_limited_past_its_longest_wait_fails(env):
    # A bot the platform keeps limiting must not queue its replies forever: past `max_wait_s` after the
    # reply was stored, the next 429 fails it, visibly.
    reply = await _rate_limited_reply(env, 9800, times=1, max_wait_s=0.0)
    assert reply.status == "failed" and reply.attempts == 1 and "still rate limited" in reply.error
    assert sent_to(env[2], 9800) == []
