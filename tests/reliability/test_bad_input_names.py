"""A sender's name longer than the contacts table holds (VARCHAR(255) on PostgreSQL).

The name is the one field of a message the platform lets its user write freely besides the text: a
Telegram first and last name, a WhatsApp profile name, a Discord display name. Stored as it came, a long
one failed the insert on PostgreSQL with a 500, which the platform retried, and the message was lost.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from storage.models import Contact
from tests.reliability.conftest import (
    channels_config,
    count_by_external_id,
    discord_ask,
    discord_request,
    running_app,
    telegram_request,
    whatsapp_form,
    whatsapp_request,
)

LONG_NAME = "Ann " + "🦊x" * 200  # 404 characters; in a signed payload, so from the platform or its key holder


@pytest.mark.asyncio
async def test_a_sender_name_longer_than_the_column_is_stored_clipped_never_a_500(tmp_path, database_url):
    channels = channels_config(telegram_api="http://127.0.0.1:9", slack_api="http://127.0.0.1:9/api/",
                               discord_api="http://127.0.0.1:9/api/v10", twilio_api="http://127.0.0.1:9")
    telegram = {"update_id": 5001, "message": {"message_id": 1, "date": 1700000000, "chat": {"id": 7001, "type": "private"},
                                               "from": {"id": 7001, "is_bot": False, "first_name": LONG_NAME}, "text": "hi"}}
    discord = json.loads(discord_ask("14000000000000000001", "hi"))
    discord["member"]["user"]["global_name"] = LONG_NAME
    async with running_app(tmp_path, bots=[{"name": "acme", "channels": channels}], start_worker=False,
                           database_url=database_url) as (client, services):
        answers = {
            "telegram": await client.post("/webhooks/acme/telegram", **telegram_request(json.dumps(telegram).encode())),
            "whatsapp": await client.post("/webhooks/acme/whatsapp", **whatsapp_request(
                {**whatsapp_form("SM" + "1" * 32, "hi"), "ProfileName": LONG_NAME})),
            "discord": await client.post("/webhooks/acme/discord/interactions",
                                         **discord_request(json.dumps(discord).encode())),
        }
        stored = {channel: await count_by_external_id(services, channel=channel, external_id=external_id)
                  for channel, external_id in (("telegram", "5001:7001:1"), ("whatsapp", "SM" + "1" * 32),
                                               ("discord", "14000000000000000001"))}
        async with services.sessions() as session:
            names = (await session.execute(select(Contact.channel, Contact.display_name))).all()
    assert {channel: r.status_code for channel, r in answers.items()} == dict.fromkeys(answers, 200), \
        {channel: r.text for channel, r in answers.items()}
    assert stored == dict.fromkeys(stored, 1)
    assert {channel for channel, _ in names} == set(answers)
    assert all(name.startswith("Ann 🦊x") and len(name) <= 255 for _, name in names), names
