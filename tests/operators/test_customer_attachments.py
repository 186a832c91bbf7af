"""A file the customer sends while a person holds the thread (a photo of the damaged parcel, a voice note):
the operator learns it came, on every surface. Why: it was stored with empty text, so the console showed
an empty message, the list an empty quote, the Slack thread "*Customer:*" and nothing, and the operator
never knew the customer had sent anything; the bot, rightly, said nothing either."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from storage.models import Message
from tests.gateway_channels.conftest import wait_until
from tests.gateway_channels.test_telegram_e2e import SECRET as TG_SECRET
from tests.gateway_channels.test_telegram_e2e import update as tg_update
from tests.gateway_channels.whatsapp_rig import inbound, post
from tests.operators.conftest import auth
from tests.operators.test_slack_operator_edits import _claimed, _telegram_customer, _whatsapp_customer

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _customer_posts(slack, thread_ts: str) -> list[str]:
    return [c.params["text"] for c in slack.calls_to("chat.postMessage")
            if c.params.get("thread_ts") == thread_ts and c.params.get("text", "").startswith("*Customer:*")]


async def _done(client, **where) -> Message:
    async def stored():
        async with client.services.sessions() as session:
            query = select(Message).where(Message.direction == "in", Message.status == "done",
                                          *(getattr(Message, k) == v for k, v in where.items()))
            return (await session.execute(query)).scalars().first()

    return await wait_until(stored, what="the customer's message handled")


async def test_a_telegram_customers_photo_during_the_hold_is_shown_to_the_operator(tmp_path):
    async with _telegram_customer(tmp_path, tg_update(1, 901, "I need to talk to a human")) as (
            client, slack, telegram, thread_ts, _, _reply):
        answered = len(telegram.sent)
        photo = tg_update(2, 901, None, message_id=43, photo=[
            {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90},
            {"file_id": "big", "file_unique_id": "b", "width": 1280, "height": 960}])
        assert (await client.post("/webhooks/acme/telegram", json=photo,
                                  headers={"X-Telegram-Bot-Api-Secret-Token": TG_SECRET})).status_code == 200
        stored = await _done(client, channel="telegram", text="")

        [posted] = await wait_until(lambda: _customer_posts(slack, thread_ts), what="the photo in the thread")
        assert "image" in posted and "not shown here" in posted

        escalation_id = (await client.get("/v1/escalations?state=claimed", headers=auth("sam"))).json()["escalations"][0]["id"]
        detail = (await client.get(f"/v1/escalations/{escalation_id}", headers=auth("sam"))).json()
        [shown] = [m for m in detail["messages"] if m["id"] == stored.id]
        assert shown["attachments"] == [{"kind": "image"}]  # no file id: only the bot's token opens it
        listed = (await client.get("/v1/escalations?state=claimed", headers=auth("sam"))).json()["escalations"][0]
        assert listed["last_customer_message"]["attachments"] == ["image"]
        assert len(telegram.sent) == answered  # and the bot said nothing to the customer ("I can only read text")


async def test_a_whatsapp_customers_files_with_words_reach_the_thread_with_what_they_sent(tmp_path):
    async with _whatsapp_customer(tmp_path, "SMatt1", "+15550002222") as (client, slack, _twilio):
        thread_ts = await _claimed(client, slack)
        form = inbound("SMatt2", "+15550002222", "This is what arrived") | {
            "NumMedia": "2", "MediaUrl0": "https://media.example/ME1", "MediaContentType0": "image/jpeg",
            "MediaUrl1": "https://media.example/ME2", "MediaContentType1": "application/pdf"}
        assert (await post(client, form)).status_code == 200
        await _done(client, channel="whatsapp", text="This is what arrived")
        [posted] = await wait_until(lambda: _customer_posts(slack, thread_ts), what="the message in the thread")
        assert posted.startswith("*Customer:*\n> This is what arrived\n")
        assert "2 files (image, document)" in posted and "media.example" not in posted
