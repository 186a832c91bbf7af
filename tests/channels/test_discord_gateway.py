"""Discord adapter against a local fake Discord gateway websocket: connecting, intents and message delivery."""

from __future__ import annotations

import asyncio
import json

import pytest

from channels.discord import DiscordAdapter
from gateway.errors import ChannelSendError
from gateway.models import ConversationRef, InboundMessage, OutboundMessage
from tests.channels.discord_helpers import (  # noqa: F401 - `fake` fixture
    CHANNEL,
    FIXTURES,
    GUILD,
    connected,
    fake_fixture,
    guild_message,
    settings_for,
    wait_for,
)
from tests.fakes.discord_api import BOT_USER_ID, FakeDiscord, thread_object


async def test_start_connects_gateway_with_message_content_intent_and_delivers(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake))
    async with connected(adapter, fake) as delivered:
        assert fake.identifies[0]["token"] == "fake-bot-token"
        assert fake.identifies[0]["intents"] & (1 << 15)  # MESSAGE_CONTENT
        await fake.dispatch("MESSAGE_CREATE", guild_message("not for me", message_id="900000000000000020"))
        mention = guild_message(
            f"<@{BOT_USER_ID}> opening hours?", message_id="900000000000000021", mentions=[{"id": BOT_USER_ID}]
        )
        await fake.dispatch("MESSAGE_CREATE", mention)
        await wait_for(delivered, 2)
        # Both are delivered; the inbox keeps the unmentioned one only while a person talks with its author.
        assert [(m.external_id, m.only_while_held) for m in delivered] == [
            ("900000000000000020", True), ("900000000000000021", False)]
        assert delivered[1].text == "opening hours?" and delivered[1].conversation.workspace == GUILD
    assert adapter.client.is_closed()


async def test_on_message_fixture_payloads_via_parse_message_create(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        # "Type6" holds a type 0 message as captured, not a pin: delivered as one.
        names = ["MessageCreate.Type0.json", "MessageCreate.Type19.json", "MessageCreate.Type6.json"]
        for name in names:
            payload = json.loads((FIXTURES / "discord4j_discord_json" / name).read_text())["d"]
            adapter.client._connection.parse_message_create(payload)
        me = {"id": BOT_USER_ID, "username": "me", "bot": True, "discriminator": "0", "avatar": None}
        own = guild_message("echo", message_id="900000000000000030", author=me)
        adapter.client._connection.parse_message_create(own)
        await wait_for(delivered, 3)
    assert [m.text for m in delivered] == [".ping", "cool.", "different message"]
    assert delivered[1].reply_to == "775214933398782002"
    assert {m.external_id for m in delivered} == {"732582724170285086", "779520963116400721", "123456789012345678"}


async def test_message_is_retried_into_the_inbox_while_storage_is_down(fake: FakeDiscord):
    # Discord never sends a MESSAGE_CREATE again: a storage outage must be waited out, not logged away.
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    attempts: list[str] = []
    stored = asyncio.Event()

    async def deliver(message: InboundMessage) -> None:
        attempts.append(message.external_id)
        if len(attempts) < 3:
            raise ConnectionError("database is down")
        stored.set()

    await adapter.start(deliver)
    try:
        await fake.wait_identified()
        await fake.dispatch("MESSAGE_CREATE", guild_message("still there?", message_id="900000000000000040"))
        await asyncio.wait_for(stored.wait(), timeout=10)
    finally:
        await adapter.stop()
    assert attempts == ["900000000000000040"] * 3


async def test_messages_reach_the_inbox_in_the_order_discord_sent_them(fake: FakeDiscord):
    # discord.py runs each event in its own task. An inbox insert that takes longer for an earlier
    # message (a busy database) must not let a later one be stored, and so answered, first.
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    stored: list[str] = []

    async def deliver(message: InboundMessage) -> None:
        await asyncio.sleep(0.05 * (5 - int(message.text[-1])))  # the first insert is the slowest
        stored.append(message.text)

    await adapter.start(deliver)
    try:
        await fake.wait_identified()
        for i in range(5):
            await fake.dispatch("MESSAGE_CREATE", guild_message(f"question {i}", message_id=f"90000000000000006{i}"))
        async with asyncio.timeout(10):
            while len(stored) < 5:
                await asyncio.sleep(0.01)
    finally:
        await adapter.stop()
    assert stored == [f"question {i}" for i in range(5)]


async def test_a_thread_missing_from_the_cache_is_one_conversation_answered_inside_it(fake: FakeDiscord):
    # discord.py reads a message in a thread it does not hold (not joined, unarchived by the message) as
    # in a plain channel: each member got a conversation of their own there, and operators' replies a mention.
    thread = "900000000000000077"
    fake.channels[thread] = thread_object(thread_id=thread, parent_id=CHANNEL, guild_id=GUILD)
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        for i, author in enumerate(("900000000000000003", "900000000000000004")):
            user = {"id": author, "username": f"member{i}", "discriminator": "0", "avatar": None}
            await fake.dispatch("MESSAGE_CREATE", guild_message(f"in the thread {i}", channel_id=thread, author=user,
                                                                message_id=f"90000000000000007{i}"))
        await fake.dispatch("MESSAGE_CREATE", guild_message("in the channel", message_id="900000000000000079"))
        await wait_for(delivered, 3)
        first, second, plain = sorted(delivered, key=lambda m: m.external_id)  # in order per channel only
        assert first.conversation == second.conversation == ConversationRef(
            channel="discord", workspace=GUILD, chat=thread, thread=thread)
        assert plain.conversation.chat == CHANNEL and plain.conversation.thread == "member:900000000000000003"
        await adapter.send(OutboundMessage(conversation=first.conversation, text="Hi both", addressee="member0"))
    assert len(fake.received("GET", f"/channels/{thread}")) == 1  # asked once, then known
    assert [m["content"] for m in fake.channel_messages(thread)] == ["Hi both"]  # a thread's: no mention


async def test_a_thread_the_bot_cannot_read_is_asked_about_once_for_a_while(fake: FakeDiscord, monkeypatch):
    # Each message in a thread the bot cannot read (403) asked Discord again, holding the messages behind it.
    monkeypatch.setattr("channels.discord_inbound.FAILED_TTL_S", 1.0)
    thread = "900000000000000078"
    fake.channels[thread] = thread_object(thread_id=thread, parent_id=CHANNEL, guild_id=GUILD)
    fake.fail_next("GET", f"/channels/{thread}", status=403, body={"message": "Missing Access", "code": 50001})
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        for i in range(2):
            await fake.dispatch("MESSAGE_CREATE", guild_message(f"unreadable {i}", channel_id=thread,
                                                                message_id=f"90000000000000008{i}"))
            await wait_for(delivered, i + 1)
        assert len(fake.received("GET", f"/channels/{thread}")) == 1
        assert delivered[1].conversation.chat == thread and delivered[1].conversation.thread.startswith("member:")
        await asyncio.sleep(1.0)  # the failure is forgotten: access granted since is seen
        await fake.dispatch("MESSAGE_CREATE", guild_message("readable", channel_id=thread,
                                                            message_id="900000000000000082"))
        await wait_for(delivered, 3)
    assert len(fake.received("GET", f"/channels/{thread}")) == 2
    assert delivered[2].conversation.thread == thread


async def test_a_look_up_that_timed_out_is_not_remembered(fake: FakeDiscord, monkeypatch):
    # A slow answer is no "no access": remembered, the thread's next messages were read as a plain channel,
    # a conversation per member, for a minute.
    monkeypatch.setattr("channels.discord_inbound.LOOKUP_TIMEOUT_S", 0.3)
    thread = "900000000000000079"
    fake.channels[thread] = thread_object(thread_id=thread, parent_id=CHANNEL, guild_id=GUILD)
    fake.delays[f"/channels/{thread}"] = 1.0
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        await fake.dispatch("MESSAGE_CREATE", guild_message("slow", channel_id=thread, message_id="900000000000000086"))
        await wait_for(delivered, 1)
        fake.delays.pop(f"/channels/{thread}")
        await fake.dispatch("MESSAGE_CREATE", guild_message("fast", channel_id=thread, message_id="900000000000000087"))
        await wait_for(delivered, 2)
    assert delivered[0].conversation.thread.startswith("member:")  # the timed-out look-up: read as a channel
    assert delivered[1].conversation.thread == thread


async def test_a_slow_look_up_in_one_channel_does_not_hold_the_messages_of_another(fake: FakeDiscord):
    # One lock ordered every message of the bot: a thread's look-up (up to 10 s) held all the others.
    thread = "900000000000000083"
    fake.channels[thread] = thread_object(thread_id=thread, parent_id=CHANNEL, guild_id=GUILD)
    fake.delays[f"/channels/{thread}"] = 1.5
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        await fake.dispatch("MESSAGE_CREATE", guild_message("in the thread", channel_id=thread,
                                                            message_id="900000000000000084"))
        await fake.dispatch("MESSAGE_CREATE", guild_message("in the channel", message_id="900000000000000085"))
        await wait_for(delivered, 2)
        assert adapter._inbox._in_order == {}  # a channel's lock goes with its last event
    assert [m.text for m in delivered] == ["in the channel", "in the thread"]
    assert delivered[1].conversation.thread == thread


async def test_a_forwarded_message_is_read_for_what_it_forwards(fake: FakeDiscord):
    # A forward carries its text and files in `message_snapshots`, its own content empty: a member who
    # forwarded an error message to the bot was greeted as if they had said nothing.
    adapter = DiscordAdapter("support", settings_for(fake))
    shot = guild_message("", message_id="900000000000000090")  # the original, elsewhere
    snapshot = {key: shot[key] for key in ("type", "content", "embeds", "mentions", "mention_roles", "timestamp",
                                           "edited_timestamp", "flags")}
    snapshot |= {"content": "Error 502 while saving", "attachments": [{
        "id": "900000000000000092", "filename": "trace.log", "size": 10, "url": "https://cdn.example/trace.log",
        "proxy_url": "https://cdn.example/trace.log"}]}
    dm = guild_message("", message_id="900000000000000091", channel_id="900000000000000093",
                       message_reference={"type": 1, "channel_id": CHANNEL, "message_id": "900000000000000090"},
                       message_snapshots=[{"message": snapshot}])
    del dm["guild_id"]
    async with connected(adapter, fake) as delivered:
        await fake.dispatch("MESSAGE_CREATE", dm)
        await wait_for(delivered, 1)
    [forward] = delivered
    assert forward.text == "Error 502 while saving" and forward.reply_to is None
    assert [(a.kind, a.url) for a in forward.attachments] == [("document", "https://cdn.example/trace.log")]


async def test_an_event_discord_py_cannot_read_is_skipped_and_the_gateway_goes_on(fake: FakeDiscord):
    # A captured embed-only MESSAGE_UPDATE (no `type`): discord.py's parser raises KeyError, which used to
    # end the connect loop for good, leaving the socket open and every later message lost.
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        update = json.loads((FIXTURES / "discord4j_discord_json" / "MessageUpdate.Embeds.json").read_text())["d"]
        await fake.dispatch("MESSAGE_UPDATE", update)
        await fake.dispatch("MESSAGE_CREATE", guild_message("after the odd event", message_id="900000000000000050"))
        await wait_for(delivered, 1)
        assert [m.text for m in delivered] == ["after the odd event"]
        await asyncio.wait_for(adapter.client.wait_until_ready(), timeout=10)
        assert adapter.connection_status == "connected" and not adapter._task.done()


async def test_gateway_loop_that_ends_with_an_error_is_started_again(fake: FakeDiscord):
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    real_connect = adapter.client.connect
    calls: list[int] = []

    async def connect_failing_once(**kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("attachment_size_limit")  # what an unreadable READY did
        await real_connect(**kwargs)

    adapter.client.connect = connect_failing_once
    async with connected(adapter, fake) as delivered:
        await fake.dispatch("MESSAGE_CREATE", guild_message("back again", message_id="900000000000000051"))
        await wait_for(delivered, 1)
    assert len(calls) == 2 and [m.text for m in delivered] == ["back again"]


async def test_a_fatal_close_is_logged_and_reported_not_taken_for_connected(fake: FakeDiscord):
    # 4004 (authentication failed): discord.py closes the client itself, and no reconnect can help.
    fake.identify_close_code = 4004
    adapter = DiscordAdapter("support", settings_for(fake))
    await adapter.start(lambda m: asyncio.sleep(0))
    try:
        async with asyncio.timeout(10):
            while not adapter._task.done():
                await asyncio.sleep(0.05)
        assert adapter.connection_status.startswith("stopped by Discord")
    finally:
        await adapter.stop()


async def test_discord_unreachable_at_start_is_retried_and_each_failed_login_closes_its_session(fake: FakeDiscord):
    """A blip at boot used to fail start() for good (the channel deaf until a restart), and each failed
    login left its aiohttp session open ("Unclosed client session" per send or typing retry)."""
    fake.fail_next("GET", "/users/@me", status=503, times=2)  # 503: discord.py raises at once, no own retry
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    http = adapter.client.http
    real_login = http.static_login
    sessions = []

    async def recording_login(token):
        try:
            return await real_login(token)
        finally:
            sessions.append(http._HTTPClient__session)  # the session this attempt opened

    http.static_login = recording_login
    async with connected(adapter, fake) as delivered:  # start() itself does not raise
        await fake.dispatch("MESSAGE_CREATE", guild_message("hello after the blip", message_id="900000000000000061"))
        await wait_for(delivered, 1)
        async with asyncio.timeout(30):
            while adapter.connection_status != "connected":
                await asyncio.sleep(0.02)
        assert len(sessions) == 3 and [s.closed for s in sessions] == [True, True, False]
    assert [m.text for m in delivered] == ["hello after the blip"]


async def test_a_login_that_failed_is_shown_with_its_reason_while_it_is_tried_again(fake: FakeDiscord):
    # /readyz showed "logging in again after ChannelSendError": the reason was in the log alone.
    fake.fail_next("GET", "/users/@me", status=503, times=50)
    adapter = DiscordAdapter("support", settings_for(fake))
    await adapter.start(lambda m: asyncio.sleep(0))
    try:
        async with asyncio.timeout(10):
            while not adapter.connection_status.startswith("logging in again"):
                await asyncio.sleep(0.02)
        assert "503" in adapter.connection_status, adapter.connection_status
    finally:
        await adapter.stop()


async def test_a_token_rejected_at_start_still_fails_start(fake: FakeDiscord):
    fake.fail_next("GET", "/users/@me", status=401, times=1)
    adapter = DiscordAdapter("support", settings_for(fake))
    try:
        with pytest.raises(ChannelSendError, match="token rejected") as raised:
            await adapter.start(lambda m: asyncio.sleep(0))
        assert raised.value.permanent and adapter._task is None
    finally:
        await adapter.stop()


async def test_an_edit_that_is_no_question_does_not_hold_its_thread_for_a_look_up(fake: FakeDiscord, monkeypatch):
    # Each edit asked whether its channel is a thread, inside the channel's turn, though only an edit that becomes a
    # question needs it: the bot's own streamed answer, edited every second in a thread whose look-up times out,
    # held the member's next message up to LOOKUP_TIMEOUT_S per edit.
    monkeypatch.setattr("channels.discord_inbound.LOOKUP_TIMEOUT_S", 0.3)
    thread = "900000000000000088"
    fake.channels[thread] = thread_object(thread_id=thread, parent_id=CHANNEL, guild_id=GUILD)
    fake.delays[f"/channels/{thread}"] = 1.0  # every look-up times out: none is remembered
    bot = {"id": BOT_USER_ID, "username": "acme", "discriminator": "0", "avatar": None, "bot": True}
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    async with connected(adapter, fake) as delivered:
        for i in range(3):
            await fake.dispatch("MESSAGE_UPDATE", guild_message(f"the answer, part {i}", channel_id=thread,
                                                                message_id="900000000000000089", author=bot,
                                                                edited_timestamp="2026-12-01T10:00:00+00:00"))
        await fake.dispatch("MESSAGE_CREATE", guild_message("and another thing", channel_id=thread,
                                                            message_id="900000000000000090"))
        await wait_for(delivered, 1)
    assert [m.text for m in delivered] == ["and another thing"]
    assert len(fake.received("GET", f"/channels/{thread}")) == 1  # the member's message's only


async def test_edits_and_deletions_are_delivered_as_revisions_in_order(fake: FakeDiscord, caplog):
    """The inbox applies them to a message still waiting for its answer (a typo fixed, a message taken
    back); they were dropped, and the customer was answered on what they had corrected or deleted."""
    adapter = DiscordAdapter("support", settings_for(fake, respond_in_groups="always"))
    with caplog.at_level("INFO", logger="channels.discord"):
        async with connected(adapter, fake) as delivered:
            edited = guild_message("opening hours? (edited)", message_id="900000000000000070",
                                   edited_timestamp="2026-12-01T10:00:00+00:00")
            await fake.dispatch("MESSAGE_UPDATE", edited)
            await fake.dispatch("MESSAGE_DELETE", {"id": "900000000000000071", "channel_id": edited["channel_id"],
                                                   "guild_id": GUILD})
            await fake.dispatch("MESSAGE_DELETE_BULK", {"ids": ["900000000000000073", "900000000000000072"],
                                                        "channel_id": edited["channel_id"], "guild_id": GUILD})
            await fake.dispatch("MESSAGE_CREATE", guild_message("a new one", message_id="900000000000000074"))
            await wait_for(delivered, 5)
    assert [(m.revises, m.deleted, m.text, m.conversation.chat) for m in delivered] == [
        ("900000000000000070", False, "opening hours? (edited)", edited["channel_id"]),
        ("900000000000000071", True, "", edited["channel_id"]),
        ("900000000000000072", True, "", edited["channel_id"]),
        ("900000000000000073", True, "", edited["channel_id"]),
        (None, False, "a new one", edited["channel_id"]),
    ]
    assert not [r for r in caplog.records if r.getMessage() == "discord.ignored"]


def test_no_voice_package_warning_at_start(caplog) -> None:
    # discord.py warned "davey is not installed, voice will NOT be supported" at every start; the gateway
    # has no voice, and deployers went looking for the package.
    import discord

    discord.VoiceClient.warn_dave = True  # as a fresh process has it
    with caplog.at_level("WARNING", logger="discord.client"):
        DiscordAdapter("support", settings_for(None))
    assert not [r for r in caplog.records if "davey" in r.getMessage()]


async def test_a_mention_of_the_bots_own_role_addresses_the_bot(fake: FakeDiscord):
    """Discord's @-completion often offers the bot's integration role (same name) before the bot:
    `<@&role>` was not a mention of the bot, and the member's question was ignored."""
    role = "900000000000000099"
    adapter = DiscordAdapter("support", settings_for(fake))
    async with connected(adapter, fake) as delivered:
        await asyncio.wait_for(adapter.client.wait_until_ready(), timeout=10)
        await fake.dispatch("GUILD_CREATE", {
            "id": GUILD, "name": "Acme", "owner_id": "900000000000000003", "features": [], "emojis": [], "stickers": [],
            "channels": [], "members": [], "member_count": 2, "large": False, "unavailable": False,
            "roles": [{"id": GUILD, "name": "@everyone", "permissions": "0", "position": 0, "color": 0,
                       "hoist": False, "managed": False, "mentionable": False},
                      {"id": role, "name": "Support", "permissions": "0", "position": 1, "color": 0, "hoist": False,
                       "managed": True, "mentionable": True, "tags": {"bot_id": BOT_USER_ID}}]})
        await fake.dispatch("MESSAGE_CREATE", guild_message(f"<@&{role}> what are your hours?",
                                                            message_id="900000000000000080", mention_roles=[role]))
        await fake.dispatch("MESSAGE_CREATE", guild_message("<@&900000000000000098> and the other team?",
                                                            message_id="900000000000000081",
                                                            mention_roles=["900000000000000098"]))
        await wait_for(delivered, 2)
    assert [(m.text, m.only_while_held) for m in delivered] == [
        ("what are your hours?", False), ("<@&900000000000000098> and the other team?", True)]
