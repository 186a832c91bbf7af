"""TelegramAdapter against a local fake Bot API: start-up, long polling and webhook registration."""

from __future__ import annotations

import asyncio
import time

import pytest
import structlog

from channels.telegram import TelegramAdapter
from channels.telegram_bot import set_webhook
from gateway.errors import ChannelSendError, ConfigError
from gateway.models import InboundMessage
from tests.channels.telegram_helpers import (  # noqa: F401 - `fake` fixture
    SECRET,
    _request,
    _settings,
    _update,
    fake_fixture,
)
from tests.fakes.telegram_api import FakeTelegramAPI


class Received:
    """A `deliver` callback that keeps what the adapter hands over; `wait` until `expect` messages came."""

    def __init__(self, *, expect: int) -> None:
        self.messages: list[InboundMessage] = []
        self._expect = expect
        self._enough = asyncio.Event()

    async def deliver(self, message: InboundMessage) -> None:
        self.messages.append(message)
        if len(self.messages) >= self._expect:
            self._enough.set()

    async def wait(self, *, timeout: float) -> None:
        await asyncio.wait_for(self._enough.wait(), timeout=timeout)


class Stored(Received):
    """Stores what it is handed as the inbox does, an update once however often it is fetched, unless
    `refuse(message, tries)` raises first. `attempts`: the update ids handed over; `stored`: those stored."""

    def __init__(self, refuse, *, expect: int) -> None:
        super().__init__(expect=expect)
        self._refuse = refuse
        self.attempts: list[str] = []

    @property
    def stored(self) -> list[str]:
        return [str(m.raw["update_id"]) for m in self.messages]

    async def deliver(self, message: InboundMessage) -> None:
        update_id = str(message.raw["update_id"])
        self.attempts.append(update_id)
        self._refuse(message, self.attempts.count(update_id))
        if update_id not in self.stored:
            await super().deliver(message)


async def test_start_learns_username_so_group_mentions_work(fake: FakeTelegramAPI) -> None:
    tg = TelegramAdapter("demo", _settings(fake.base_url))
    text = "@support_bot hi"
    update = _update(text, chat_type="group", entities=[{"type": "mention", "offset": 0, "length": 12}])
    # Before getMe, whether `@support_bot` is us cannot be told: Telegram is asked to send it again (503) rather
    # than it being taken for a message to someone else and never answered.
    early = tg.parse(_request(update))
    assert not early.messages and early.response is not None and early.response.status == 503
    await tg.start(lambda m: asyncio.sleep(0))
    try:
        assert tg.parse(_request(update)).messages[0].text == "hi"
        assert not tg.parse(_request(update)).messages[0].only_while_held
        assert not fake.calls("getUpdates")  # webhook mode does not poll
    finally:
        await tg.stop()


async def test_start_learns_username_later_when_telegram_was_unreachable_at_start(fake: FakeTelegramAPI) -> None:
    """getMe was asked once, at start: a Telegram blip then (a container up before its network) left the username
    unknown until a restart, so every @mention and /ask@bot in a group was ignored."""
    fake.fail_next("getMe", status=502, times=2)
    tg = TelegramAdapter("demo", _settings(fake.base_url), identity_retry_s=0.05)
    update = _update("/ask@support_bot hours?", chat_type="group", entities=[{"type": "bot_command", "offset": 0, "length": 16}])
    await tg.start(lambda m: asyncio.sleep(0))
    try:
        deadline = time.monotonic() + 10
        while tg.parse(_request(update)).ignored and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        [asked] = tg.parse(_request(update)).messages
        assert asked.text == "hours?" and not asked.only_while_held
        assert len(fake.calls("getMe")) == 3
    finally:
        await tg.stop()


async def test_polling_delivers_updates_and_stops_cleanly(fake: FakeTelegramAPI) -> None:
    fake.webhook = {"url": "https://old.example/hook"}
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    received = Received(expect=3)
    await tg.start(received.deliver)
    fake.push_update(_update("first", update_id=9001))
    fake.push_update({"update_id": 9002, "edited_message": _update("x")["message"]})
    fake.push_update(_update("/start", update_id=9003, entities=[{"type": "bot_command", "offset": 0, "length": 6}]))
    await received.wait(timeout=5)
    started = time.monotonic()
    await tg.stop()
    assert time.monotonic() - started < 10  # not the 11 s a poll may hold its request (timeout + 10)
    # The edit goes to the inbox as a revision, applied only while its message waits for an answer.
    assert [(str(m.raw["update_id"]), m.revises) for m in received.messages] == [("9001", None), ("9002", "42"), ("9003", None)]
    assert received.messages[0].text == "first" and received.messages[2].raw["command"] == "start"
    assert received.messages[0].sender.display_name == "Ann Lee"
    assert fake.calls("deleteWebhook") and not fake.webhook
    assert fake.calls("getUpdates")[0].params["allowed_updates"] == ["message", "edited_message", "channel_post",
                                                                     "edited_channel_post", "my_chat_member"]


async def test_polling_reads_an_update_aiogram_cannot_validate_and_goes_on(fake: FakeTelegramAPI) -> None:
    # aiogram issue 1587: a real update with `external_reply.story: {}` fails aiogram's models, and
    # its own polling loop then fetched the same batch forever, silencing the bot.
    odd = _update("what about this story?", update_id=9101, external_reply={"origin": {"type": "hidden_user",
                  "sender_user_name": "X", "date": 1700000000}, "story": {}})
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    received = Received(expect=2)
    await tg.start(received.deliver)
    try:
        fake.push_update(odd)
        fake.push_update(_update("hello", update_id=9102))
        await received.wait(timeout=5)
    finally:
        await tg.stop()
    assert [(str(m.raw["update_id"]), m.text) for m in received.messages] == [("9101", "what about this story?"), ("9102", "hello")]


async def test_polling_holds_an_update_until_it_is_stored(fake: FakeTelegramAPI) -> None:
    # A storage outage must not lose what was fetched: the offset moves past an update only once stored.
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)

    def down_for_the_first_two_tries_of_9201(message: InboundMessage, tries: int) -> None:
        if str(message.raw["update_id"]) == "9201" and tries < 3:
            raise ConnectionError("database is down")

    inbox = Stored(down_for_the_first_two_tries_of_9201, expect=2)
    await tg.start(inbox.deliver)
    try:
        fake.push_update(_update("one", update_id=9201))
        fake.push_update(_update("two", update_id=9202))
        await inbox.wait(timeout=10)
    finally:
        await tg.stop()
    assert inbox.stored == ["9201", "9202"]
    # 9201 was fetched again (the fake, like Telegram, drops what an offset confirmed); 9202 waited behind it.
    assert inbox.attempts.count("9201") == 3 and inbox.attempts.count("9202") == 1


async def test_polling_skips_an_update_that_fails_for_another_reason_after_a_few_tries(fake: FakeTelegramAPI) -> None:
    # Not an outage (a bug, a value the database refuses): it must not hold up every later message.
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)

    def refused_if_poison(message: InboundMessage, tries: int) -> None:
        if message.text == "poison":
            raise ValueError("a value the database refuses")

    inbox = Stored(refused_if_poison, expect=1)
    await tg.start(inbox.deliver)
    try:
        with structlog.testing.capture_logs() as logs:
            fake.push_update(_update("poison", update_id=9401))
            fake.push_update(_update("next", update_id=9402))
            await inbox.wait(timeout=15)
    finally:
        await tg.stop()
    assert inbox.attempts.count("9401") == 3 and inbox.stored == ["9402"] and inbox.attempts.count("9402") == 1
    # The line says which update was dropped, not what the customer wrote in it (it had the text).
    [dropped] = [e for e in logs if e["event"] == "telegram.update_dropped"]
    assert dropped["update_id"] == 9401 and dropped["chars"] == len("poison")
    assert "poison" not in repr(dropped)


async def test_polling_backs_off_when_a_batch_moves_nothing(fake: FakeTelegramAPI) -> None:
    # An update without update_id cannot be confirmed; asking again at once would spin against Telegram.
    fake.push_update({"message": _update("no id")["message"], "update_id": None})
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    await tg.start(lambda m: asyncio.sleep(0))
    try:
        async with asyncio.timeout(60):
            while len(fake.calls("getUpdates")) < 3:
                await asyncio.sleep(0.02)
    finally:
        await tg.stop()
    # The waits between asks, not the asks in a fixed time (a slow machine asked fewer, hiding a spin):
    # 0.5 s, then 1 s. Asked again at once, they would be milliseconds apart.
    first, second, third = (call.at for call in fake.calls("getUpdates")[:3])
    assert second - first >= 0.45 and third - second >= 0.95, (second - first, third - second)


async def test_polling_survives_telegram_error_pages(fake: FakeTelegramAPI) -> None:
    fake.fail_next("getUpdates", status=502, description="Bad Gateway", html=True, times=2)
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    received: list[InboundMessage] = []
    got = asyncio.Event()

    async def deliver(message: InboundMessage) -> None:
        received.append(message)
        got.set()

    await tg.start(deliver)
    try:
        fake.push_update(_update("after the outage", update_id=9301))
        await asyncio.wait_for(got.wait(), timeout=10)
    finally:
        await tg.stop()
    assert [m.text for m in received] == ["after the outage"]


async def test_set_webhook_registers_url_with_secret(fake: FakeTelegramAPI) -> None:
    await set_webhook(_settings(fake.base_url), "https://gw.example/webhooks/demo/telegram")
    assert fake.webhook["url"] == "https://gw.example/webhooks/demo/telegram"
    assert fake.webhook["secret_token"] == SECRET
    assert "my_chat_member" in fake.webhook["allowed_updates"]  # else a removal from a group is never told


async def test_set_webhook_answered_by_an_error_page_is_one_error(fake: FakeTelegramAPI) -> None:
    # Telegram's proxies answer 502 with HTML in an outage; `telegram set-webhook` showed aiogram's traceback.
    fake.fail_next("setWebhook", status=502, html=True)
    with pytest.raises(ChannelSendError, match="setWebhook failed: Telegram answered with an error page"):
        await set_webhook(_settings(fake.base_url), "https://gw.example/webhooks/demo/telegram")


async def test_a_secret_telegram_would_reject_is_refused_with_the_config() -> None:
    # At load, not at `telegram set-webhook`: `serve` would otherwise start and get no update.
    with pytest.raises(ValueError, match="A-Z, a-z, 0-9, _ and -"):
        _settings(webhook_secret="has spaces!")
    with pytest.raises(ConfigError):
        await set_webhook(_settings(webhook_secret=""), "https://gw.example/webhooks/demo/telegram")


async def test_polling_that_keeps_failing_shows_in_the_connection_status(fake: FakeTelegramAPI) -> None:
    # A wrong token or no route to Telegram left /readyz's `connections` empty: only the log said so.
    fake.fail_next("getUpdates", status=502, description="Bad Gateway", times=2)
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling"), polling_timeout=1)
    assert tg.connection_status == "not started"
    seen: list[str] = []
    await tg.start(Received(expect=1).deliver)
    try:
        deadline = time.monotonic() + 15
        while (status := tg.connection_status) != "polling" and time.monotonic() < deadline:
            seen.append(status)
            await asyncio.sleep(0.02)
    finally:
        await tg.stop()
    assert status == "polling"
    assert any(s.startswith("polling again after 1 failed getUpdates: ") and "Bad Gateway" in s for s in seen), seen
    assert TelegramAdapter("demo", _settings(fake.base_url)).connection_status is None  # webhook mode holds none


async def test_a_token_telegram_rejects_at_start_fails_the_channel_start(fake: FakeTelegramAPI) -> None:
    """As Discord's rejected token does: `channel.start_failed` and `failed_channels`, not a channel listed as
    started that asks getMe again forever and polls into 401s (README's quick start is a Telegram bot)."""
    tg = TelegramAdapter("demo", _settings(fake.base_url, mode="polling", token="723738643:AAH-not-the-token"))
    try:
        with pytest.raises(ChannelSendError, match="telegram token rejected") as raised:
            await tg.start(Received(expect=1).deliver)
        assert raised.value.permanent
        assert tg.connection_status == "not started" and tg._identity is None and not fake.calls("getUpdates")
    finally:
        await tg.stop()
