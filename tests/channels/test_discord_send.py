"""Discord adapter against a local fake Discord REST API: sending, interaction follow-ups, rate limits, edits."""

from __future__ import annotations

import asyncio
import json

import pytest

from channels.discord import MAX_LENGTH, DiscordAdapter
from gateway.errors import BadRequest, ChannelSendError, RecipientUnreachable
from gateway.models import Citation, ConversationRef, OutboundMessage
from tests.channels.discord_helpers import (  # noqa: F401 - `adapter`, `fake` fixtures
    CHANNEL,
    GUILD,
    adapter_fixture,
    ask_interaction,
    fake_fixture,
    settings_for,
    signed,
)
from tests.fakes.discord_api import APPLICATION_ID, INTERACTION_CHANNEL_ID, FakeDiscord


def conversation() -> ConversationRef:
    return ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL)


# ---- interaction follow-ups ---------------------------------------------------------------------------


async def test_send_ask_answer_goes_to_interaction_followup(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    ids = await adapter.send(
        OutboundMessage(conversation=question.conversation, text="9 to 5.", reply_to=question.external_id)
    )
    (followup,) = fake.received("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN")
    assert followup.json["content"] == "9 to 5." and followup.json["allowed_mentions"]["parse"] == []
    assert followup.json["flags"] & 4 and followup.headers["User-Agent"].startswith("DiscordBot (")
    assert ids == [fake.channel_messages(INTERACTION_CHANNEL_ID)[0]["id"]]
    assert not fake.received("POST", "/channels/645027906669510667/messages")


async def test_send_without_reply_to_still_resolves_pending_ask(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    await adapter.send(OutboundMessage(conversation=question.conversation, text="First answer."))
    await adapter.send(OutboundMessage(conversation=question.conversation, text="Second answer.", addressee=""))
    (followup,) = fake.received("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN")
    assert followup.json["content"] == "First answer."
    (later,) = fake.received("POST", "/channels/645027906669510667/messages")  # answered once: back to the channel
    # The channel is shared: a message that replies to nothing is addressed to the member who asked.
    user = ask_interaction("Hours?")["member"]["user"]["id"]
    assert later.json["content"] == f"<@{user}> Second answer."
    assert later.json["allowed_mentions"]["users"] == [int(user)] and later.json["allowed_mentions"]["parse"] == []


async def test_a_streamed_answers_later_parts_follow_the_first_part(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    ask, later = question.conversation, "900000000000000010"
    await adapter.send(OutboundMessage(conversation=ask, text="Part 1 of the /ask answer.", reply_to=question.external_id))
    await adapter.send(OutboundMessage(conversation=ask, text="Its part 2."))  # a streamed rollover: no addressee
    # A later question, mentioned in the channel: its streamed answer's part 2 is not a follow-up of the /ask.
    await adapter.send(OutboundMessage(conversation=ask, text="Part 1 of the next answer.", reply_to=later))
    await adapter.send(OutboundMessage(conversation=ask, text="Its part 2 too."))
    assert [m["content"] for m in fake.channel_messages(INTERACTION_CHANNEL_ID)] == [
        "Part 1 of the /ask answer.", "Its part 2."]
    assert [m["content"] for m in fake.channel_messages(ask.chat)] == ["Part 1 of the next answer.", "Its part 2 too."]


async def test_operator_reply_in_a_server_channel_pings_only_the_member_it_is_for(fake: FakeDiscord,
                                                                                  adapter: DiscordAdapter):
    member = ConversationRef(channel="discord", workspace=GUILD, chat=CHANNEL, thread="member:900000000000000003")
    await adapter.send(OutboundMessage(conversation=member, text="Hi, Sam from support here. @everyone", addressee="Sam"))
    await adapter.send(OutboundMessage(conversation=member, text="Refund sent.", reply_to="900000000000000010"))
    await adapter.send(OutboundMessage(conversation=conversation(), text="No member here.", addressee=""))  # a pre-member row
    await adapter.send(OutboundMessage(conversation=member, text="…the rest of a streamed answer."))
    operator, reply, plain, continued = fake.received("POST", f"/channels/{CHANNEL}/messages")
    assert operator.json["content"] == "<@900000000000000003> Hi, Sam from support here. @everyone"
    assert operator.json["allowed_mentions"] == {"parse": [], "users": [900000000000000003]}  # not @everyone
    # A reply to the member's own message already says whom it is for, and pings no one.
    assert reply.json["content"] == "Refund sent." and reply.json["allowed_mentions"]["parse"] == []
    assert "users" not in reply.json["allowed_mentions"]
    assert plain.json["content"] == "No member here."
    # A later part of a streamed answer is not addressed: a mention mid-answer would ping again.
    assert continued.json["content"] == "…the rest of a streamed answer." and "users" not in continued.json["allowed_mentions"]


@pytest.mark.parametrize("lost", [
    # Discord posts it; the answer is lost.
    lambda fake, path: fake.drop_next("POST", path),
    # Discord (or Cloudflare in front of it) posts the follow-up, then answers 500: discord.py's webhook
    # client retried every 5xx blindly, and a follow-up has no nonce, so the member saw the answer twice.
    lambda fake, path: fake.fail_next("POST", path, status=500, body={"message": "500"}, landed=True),
], ids=["answer lost", "server error after it landed"])
async def test_followup_whose_outcome_is_unknown_is_not_posted_again(fake: FakeDiscord, adapter: DiscordAdapter, lost):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    lost(fake, f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN")
    outbound = OutboundMessage(conversation=question.conversation, text="9 to 5.", reply_to=question.external_id)
    with pytest.raises(ChannelSendError, match="outcome unknown") as info:
        await adapter.send(outbound)
    # A follow-up has no nonce: resending could only show the answer twice, so the outbox must not.
    assert info.value.permanent
    assert len(fake.channel_messages(INTERACTION_CHANNEL_ID)) == 1


async def test_followup_rate_limited_for_long_goes_back_to_the_outbox(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    limited = {"message": "You are being rate limited.", "retry_after": 120.0, "global": True}
    fake.fail_next("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN", status=429, body=limited,
                   headers={"Retry-After": "120", "X-RateLimit-Global": "true", "Via": "1.1 google"})
    outbound = OutboundMessage(conversation=question.conversation, text="9 to 5.", reply_to=question.external_id)
    # discord.py's webhook client slept out any 429 in place (here 2 minutes, holding a worker slot).
    async with asyncio.timeout(60):
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(outbound)
    assert info.value.retry_after == 120.0 and not info.value.permanent
    assert not fake.channel_messages(INTERACTION_CHANNEL_ID)
    assert await adapter.send(outbound) == [fake.channel_messages(INTERACTION_CHANNEL_ID)[0]["id"]]


async def test_followup_refused_for_an_expired_token_goes_to_the_channel(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    # The 15 minutes ran out on Discord's clock a moment before ours: the answer was recorded as failed.
    fake.fail_next("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN", status=401,
                   body={"message": "Invalid Webhook Token", "code": 50027})
    outbound = OutboundMessage(conversation=question.conversation, text="9 to 5.", reply_to=question.external_id)
    ids = await adapter.send(outbound)
    (posted,) = fake.channel_messages(question.conversation.chat)
    # In a shared channel, to the member who asked: it replies to no message of theirs (an interaction is none).
    assert ids == [posted["id"]] and posted["content"] == f"<@{question.conversation.member}> 9 to 5."
    assert "message_reference" not in posted
    assert not fake.channel_messages(INTERACTION_CHANNEL_ID)


async def test_long_followup_resumes_after_the_parts_that_landed(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    text = "\n\n".join(f"Part {i}. " + "x" * 1500 for i in range(3))
    outbound = OutboundMessage(conversation=question.conversation, text=text, reply_to=question.external_id)
    # Cloudflare's 429 (no `Via` header): discord.py gives it up at once, where a 5xx costs its 25 s of retries.
    busy = {"message": "You are being rate limited.", "code": 0}
    fake.fail_next("POST", f"/webhooks/{APPLICATION_ID}/A_UNIQUE_TOKEN", status=429, body=busy, after=1, times=10)
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(outbound)
    assert not info.value.permanent and len(info.value.sent_ids) == 1
    fake._failures.clear()
    ids = await adapter.send(outbound)
    posted = fake.channel_messages(INTERACTION_CHANNEL_ID)
    assert [m["id"] for m in posted] == ids and len(ids) == 3
    assert [m["content"][:6] for m in posted] == ["Part 0", "Part 1", "Part 2"]


# ---- sending --------------------------------------------------------------------------------------------


async def test_send_long_answer_split_at_limit(fake: FakeDiscord, adapter: DiscordAdapter):
    paragraphs = [f"Paragraph {i}: " + "word " * 60 for i in range(30)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    ids = await adapter.send(OutboundMessage(conversation=conversation(), text=text, reply_to="900000000000000010"))
    sent = fake.channel_messages(CHANNEL)
    assert len(sent) == len(ids) >= 5
    assert all(len(m["content"]) <= MAX_LENGTH for m in sent)
    assert all(m["content"].startswith("Paragraph") for m in sent)  # cut on paragraph boundaries
    assert "\n\n".join(m["content"] for m in sent) == text
    assert str(sent[0]["message_reference"]["message_id"]) == "900000000000000010"
    assert all("message_reference" not in m for m in sent[1:])


async def test_send_never_pings_everyone(fake: FakeDiscord, adapter: DiscordAdapter):
    await adapter.send(OutboundMessage(conversation=conversation(), text="Hey @everyone and @here"))
    (request,) = fake.received("POST", f"/channels/{CHANNEL}/messages")
    assert request.json["allowed_mentions"] == {"parse": []}
    assert request.json["content"] == "Hey @everyone and @here"


async def test_send_citations_rendered_as_links(fake: FakeDiscord, adapter: DiscordAdapter):
    citations = (
        Citation(source="docs/returns.md", title="Returns policy", url="https://shop.example/returns"),
        Citation(source="faq.md", title="FAQ"),
    )
    await adapter.send(OutboundMessage(conversation=conversation(), text="30 days [1].", citations=citations))
    (message,) = fake.channel_messages(CHANNEL)
    assert "[Returns policy](https://shop.example/returns)" in message["content"]
    assert "2. FAQ" in message["content"]
    assert message["flags"] & 4  # SUPPRESS_EMBEDS: no link previews under an answer


async def test_send_citations_under_the_bots_sources_heading(fake: FakeDiscord, adapter: DiscordAdapter):
    citations = (Citation(source="docs/returns.md", title="Rückgabe", url="https://shop.example/returns"),)
    await adapter.send(OutboundMessage(conversation=conversation(), text="30 Tage [1].", citations=citations,
                                       sources_heading="Quellen:"))
    (message,) = fake.channel_messages(CHANNEL)
    assert "\n\n**Quellen:**\n1. [Rückgabe](https://shop.example/returns)" in message["content"]


async def test_send_reply_without_read_message_history_is_posted_as_a_plain_message(fake: FakeDiscord,
                                                                                   adapter: DiscordAdapter):
    # A server that left out Read Message History (the docs list it, invite links often do not): Discord
    # refuses a reply (403, 50013), and every answer there was recorded as "recipient unreachable".
    fake.no_history.add(CHANNEL)
    ids = await adapter.send(OutboundMessage(conversation=conversation(), text="9 to 5.", reply_to="900000000000000010"))
    (message,) = fake.channel_messages(CHANNEL)
    assert ids == [message["id"]] and message["content"] == "9 to 5." and "message_reference" not in message


async def test_send_without_send_messages_permission_is_still_unreachable(fake: FakeDiscord, adapter: DiscordAdapter):
    denied = {"message": "Missing Permissions", "code": 50013}
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=403, body=denied, times=2)
    with pytest.raises(RecipientUnreachable, match="50013"):
        await adapter.send(OutboundMessage(conversation=conversation(), text="Hi", reply_to="900000000000000010"))
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 2 and not fake.channel_messages(CHANNEL)


async def test_send_rate_limited_once_delivers_exactly_once(fake: FakeDiscord, adapter: DiscordAdapter):
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=0.05)
    ids = await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 2
    assert [m["id"] for m in fake.channel_messages(CHANNEL)] == ids and len(ids) == 1


async def test_send_long_rate_limit_surfaces_retry_after(fake: FakeDiscord, adapter: DiscordAdapter):
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=120.0)
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    assert info.value.retry_after == 120.0 and not info.value.permanent
    assert fake.channel_messages(CHANNEL) == []


async def test_send_rate_limited_for_seconds_goes_back_to_the_outbox_at_once(fake: FakeDiscord,
                                                                             adapter: DiscordAdapter):
    # discord.py slept out any 429 up to 60 s in place (its own floor is 30 s), holding a worker slot
    # while every other conversation waited.
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=8.0)
    async with asyncio.timeout(7):  # under the 8 s: not waited out in place (which would then succeed)
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    assert info.value.retry_after == 8.0 and info.value.rate_limited and not info.value.permanent
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 1 and not fake.channel_messages(CHANNEL)


async def test_send_waits_out_rate_limits_in_place_for_the_bound_in_all(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake), wait_in_place_s=0.5)
    # discord.py waits out each 429 up to the bound, five times over: 25 s in a worker slot at 5 s.
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=0.3)
    fake.rate_limit_next("POST", f"/channels/{CHANNEL}/messages", retry_after=0.3)
    try:
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    finally:
        await adapter.stop()
    assert info.value.rate_limited and info.value.retry_after == 0.3 and not info.value.permanent
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 2 and not fake.channel_messages(CHANNEL)


async def test_send_answered_500_after_it_landed_is_not_retried_in_place_nor_posted_twice(fake: FakeDiscord,
                                                                                         adapter: DiscordAdapter):
    outbound = OutboundMessage(conversation=conversation(), text="Hello")
    # discord.py posted again after a 500 (1, 3, 5 and 7 s later), holding the worker slot for 16 s.
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=500, body={"message": "500"}, landed=True)
    # Posted again in place, the second post would succeed (the failure is scripted once) and not raise: the
    # raise and the one POST show it, where a bound under discord.py's first 1 s retry failed on a busy machine.
    async with asyncio.timeout(30):
        with pytest.raises(ChannelSendError, match="server error 500") as info:
            await adapter.send(outbound)
    assert not info.value.permanent and len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 1
    ids = await adapter.send(outbound)  # the outbox's retry: the nonce has Discord return the posted message
    assert [m["id"] for m in fake.channel_messages(CHANNEL)] == ids and len(ids) == 1


async def test_typing_cancelled_during_a_global_rate_limit_does_not_wedge_later_sends(fake: FakeDiscord,
                                                                                     adapter: DiscordAdapter):
    # 3 s (under the 5 s waited in place): the 0.4 s of steps below stay inside it on a loaded machine too.
    limited = {"message": "You are being rate limited.", "retry_after": 3.0, "global": True}
    fake.fail_next("POST", f"/channels/{CHANNEL}/typing", status=429, body=limited,
                   headers={"Retry-After": "3", "X-RateLimit-Global": "true", "Via": "1.1 google"})
    typing = asyncio.create_task(adapter.send_typing(conversation()))
    async with asyncio.timeout(30):
        while not fake.received("POST", f"/channels/{CHANNEL}/typing"):
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    # A request that only waited for the limit to pass and is cancelled leaves it closed: nothing is
    # sent to Discord before the limit is over.
    waiting = asyncio.create_task(adapter.send_typing(ConversationRef(channel="discord", workspace=GUILD, chat="42")))
    await asyncio.sleep(0.1)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    reply = asyncio.create_task(adapter.send(OutboundMessage(conversation=conversation(), text="Hello")))
    await asyncio.sleep(0.2)
    assert not fake.received("POST", f"/channels/{CHANNEL}/messages") and not fake.received("POST", "/channels/42/typing")
    # The turn ended while discord.py slept out the global limit: the worker cancels its typing task.
    # discord.py releases its global lock only after that sleep, so every later request of the process
    # waited on it forever: no Discord reply went out until a restart.
    assert not typing.done()
    typing.cancel()
    await asyncio.gather(typing, return_exceptions=True)
    async with asyncio.timeout(30):  # the bug: forever
        ids = await reply
    assert [m["id"] for m in fake.channel_messages(CHANNEL)] == ids


async def test_send_retry_after_partial_failure_does_not_duplicate(fake: FakeDiscord, adapter: DiscordAdapter):
    text = "\n\n".join(f"Part {i}. " + "x" * 1500 for i in range(3))
    outbound = OutboundMessage(conversation=conversation(), text=text, reply_to="900000000000000010")
    busy = {"message": "Service Unavailable", "code": 0}
    fake.nonce_ttl = 0  # the retry comes after Discord stopped checking the nonce
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=503, body=busy, after=1)  # chunk 2 fails once
    with pytest.raises(ChannelSendError) as info:
        await adapter.send(outbound)
    assert not info.value.permanent and len(fake.channel_messages(CHANNEL)) == 1
    assert info.value.sent_ids == [fake.channel_messages(CHANNEL)[0]["id"]]  # the outbox records what landed
    ids = await adapter.send(outbound)  # the worker retries the whole reply
    sent = fake.channel_messages(CHANNEL)
    assert [m["id"] for m in sent] == ids and len(ids) == 3
    # Chunk 1 is not posted again: Discord dedupes a nonce only for a few minutes, a retry may come later.
    assert len(fake.received("POST", f"/channels/{CHANNEL}/messages")) == 4


async def test_send_forbidden_is_recipient_unreachable(fake: FakeDiscord, adapter: DiscordAdapter):
    body = {"message": "Cannot send messages to this user", "code": 50007}
    fake.fail_next("POST", f"/channels/{CHANNEL}/messages", status=403, body=body)
    with pytest.raises(RecipientUnreachable, match="50007"):
        await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))


async def test_send_with_rejected_token_is_permanent_failure(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake).model_copy(update={"token": "wrong-token"}))
    try:
        with pytest.raises(ChannelSendError) as info:
            await adapter.send(OutboundMessage(conversation=conversation(), text="Hello"))
    finally:
        await adapter.stop()
    assert info.value.permanent and fake.channel_messages(CHANNEL) == []


async def test_send_typing_posts_typing(fake: FakeDiscord, adapter: DiscordAdapter):
    await adapter.send_typing(conversation())
    assert len(fake.received("POST", f"/channels/{CHANNEL}/typing")) == 1


async def test_no_typing_while_an_ask_shows_thinking(fake: FakeDiscord, adapter: DiscordAdapter):
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    # The channel's typing endpoint needs the bot to see the channel, which an app added for its commands
    # alone does not: each /ask logged typing.failed, for an indicator the "thinking…" already gives.
    await adapter.send_typing(question.conversation)
    await adapter.send(OutboundMessage(conversation=question.conversation, text="9 to 5.", reply_to=question.external_id))
    await adapter.send_typing(question.conversation)  # answered: a later turn shows it as usual
    assert len(fake.received("POST", f"/channels/{question.conversation.chat}/typing")) == 1


async def test_edit_replaces_content_and_mentions_no_one(fake: FakeDiscord, adapter: DiscordAdapter):
    (message_id,) = await adapter.send(OutboundMessage(conversation=conversation(), text="Draft"))
    await adapter.edit(conversation(), message_id, "Final answer")
    assert fake.messages[message_id]["content"] == "Final answer"
    (patch,) = fake.received("PATCH", f"/channels/{CHANNEL}/messages/{message_id}")
    assert patch.json["allowed_mentions"] == {"parse": []}


async def test_edit_over_limit_is_refused(adapter: DiscordAdapter):
    with pytest.raises(BadRequest):
        await adapter.edit(conversation(), "1", "x" * (MAX_LENGTH + 1))


async def test_send_thread_posts_into_thread(fake: FakeDiscord, adapter: DiscordAdapter):
    thread = ConversationRef(channel="discord", workspace=GUILD, chat="900000000000000077", thread="900000000000000077")
    await adapter.send(OutboundMessage(conversation=thread, text="In the thread"))
    assert len(fake.channel_messages("900000000000000077")) == 1


async def test_an_operators_edit_of_a_reply_sent_as_an_ask_followup_adds_no_mention(fake: FakeDiscord,
                                                                                     adapter: DiscordAdapter):
    """An operator's reply to a member whose `/ask` still showed "thinking…" goes as the interaction's follow-up,
    which names no one; the edit relayed of it (`render`, then `edit(rendered=True)`) put `<@member>` in front."""
    (question,) = adapter.parse(signed(json.dumps(ask_interaction("Hours?")).encode())).messages
    assert question.conversation.member  # a member's conversation in a server channel: `render` addresses it
    (sent,) = await adapter.send(OutboundMessage(conversation=question.conversation, text="9 to 5.", addressee="Ann"))
    assert fake.messages[sent]["content"] == "9 to 5."  # the follow-up, no mention
    [part] = adapter.render(OutboundMessage(conversation=question.conversation, text="9 to 6.", addressee="Ann"))
    await adapter.edit(question.conversation, sent, part, rendered=True)
    assert fake.messages[sent]["content"] == "9 to 6."
