"""A location, a venue or a contact shared on Telegram, through the real app, aiogram and the fake Bot API: read
as on WhatsApp ("Shared location: …", channels/shared_content.py), answered and shown to operators as text,
its values in the message's meta. Each got "I can only read text"."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
import pytest_asyncio
from aiogram.types import Chat, Contact, Location, Message, Update, User, Venue

from tests.english_replies import TEXT_ONLY_REPLY
from tests.gateway_channels.conftest import settled_chat, wait_until
from tests.gateway_channels.test_telegram_e2e import post, sent_to, telegram_gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with telegram_gateway(tmp_path_factory.mktemp("telegram-shared")) as env_:
        yield env_


def shared(update_id: int, chat: int, **content: Any) -> dict[str, Any]:
    """The webhook body Telegram sends for a private message of this content, built with aiogram's models."""
    message = Message(message_id=update_id % 1000, date=datetime(2026, 12, 1, tzinfo=timezone.utc),
                      chat=Chat(id=chat, type="private", first_name="Ann"),
                      from_user=User(id=chat, is_bot=False, first_name="Ann"), **content)
    return Update(update_id=update_id, message=message).model_dump(mode="json", by_alias=True, exclude_none=True)


async def answered(env, body: dict[str, Any], chat: int):
    """The customer's stored message once the reply went out; the reply must not be the text-only one."""
    client, services, fake = env
    assert (await post(client, body)).status_code == 200
    [sent] = await wait_until(lambda: sent_to(fake, chat), what="the answer")
    assert sent.text != TEXT_ONLY_REPLY
    [question, _] = await settled_chat(services, channel="telegram", chat=str(chat))
    return question


async def test_a_shared_venue_is_read_as_its_name_address_and_coordinates(env):
    # A venue carries its `location` too (Bot API: "for backward compatibility"); the place's name won.
    spot = Location(latitude=52.520008, longitude=13.404954)
    question = await answered(env, shared(9801, 8801, location=spot, venue=Venue(
        location=spot, title="Acme Store Mitte", address="Alexanderplatz 1, 10178 Berlin")), 8801)
    assert question.text == "Shared location: Acme Store Mitte, Alexanderplatz 1, 10178 Berlin (52.520008, 13.404954)"
    assert question.meta["shared"] == {"location": {"latitude": 52.520008, "longitude": 13.404954,
                                                    "label": "Acme Store Mitte",
                                                    "address": "Alexanderplatz 1, 10178 Berlin"}}


async def test_a_shared_location_is_read_as_its_coordinates(env):
    question = await answered(env, shared(9802, 8802, location=Location(latitude=-33.8688, longitude=151.2093,
                                                                        horizontal_accuracy=12.5)), 8802)
    assert question.text == "Shared location: (-33.8688, 151.2093)"
    assert question.meta["shared"] == {"location": {"latitude": -33.8688, "longitude": 151.2093}}


async def test_a_shared_contact_gives_its_name_and_number(env):
    question = await answered(env, shared(9803, 8803, contact=Contact(
        phone_number="+15550001234", first_name="Jane", last_name="Doe", user_id=4242)), 8803)
    assert question.text == "Shared a contact card: Jane Doe, +15550001234"
    assert question.meta["shared"] == {"contact": {"name": "Jane Doe", "phone": "+15550001234", "user_id": 4242}}


# As phones write them: folded lines, escaped commas, Apple's "item1." groups, Android's quoted-printable 2.1.
VCARD_30 = ("BEGIN:VCARD\r\nVERSION:3.0\r\nN:Doe;Jane;;;\r\nFN:Jane Doe\r\nORG:Acme\\, Inc.;Sales\r\n"
            "item1.EMAIL;type=INTERNET;type=pref:jane.doe@acme.exa\r\n mple\r\nEMAIL:jd@home.example\r\n"
            "TEL;type=CELL:+15550001234\r\nURL:javascript:alert(1)\r\nitem2.URL:https://acme.example/team\r\n"
            "END:VCARD")
VCARD_21 = ("BEGIN:VCARD\nVERSION:2.1\nN;CHARSET=UTF-8;ENCODING=QUOTED-PRINTABLE:M=C3=BCller;J=C3=BCrgen\n"
            "ORG;CHARSET=UTF-8;ENCODING=QUOTED-PRINTABLE:B=C3=A4ckerei M=C3=BCller\nEMAIL;HOME:not an address\n"
            "END:VCARD")


async def test_a_shared_contacts_vcard_gives_its_email_organization_and_website(env):
    """The contact's `vcard` (what the phone's address book holds) was not read: only the name and number."""
    question = await answered(env, shared(9806, 8806, contact=Contact(
        phone_number="+15550001234", first_name="Jane", last_name="Doe", vcard=VCARD_30)), 8806)
    assert question.text == ("Shared a contact card: Jane Doe, +15550001234, jane.doe@acme.example, "
                             "Acme, Inc. (Sales), https://acme.example/team")
    assert question.meta["shared"] == {"contact": {
        "name": "Jane Doe", "phone": "+15550001234", "email": "jane.doe@acme.example",
        "organization": "Acme, Inc. (Sales)", "url": "https://acme.example/team"}}
    android = await answered(env, shared(9807, 8807, contact=Contact(
        phone_number="+4930123456", first_name="Jürgen", vcard=VCARD_21)), 8807)
    assert android.meta["shared"]["contact"] == {"name": "Jürgen", "phone": "+4930123456",
                                                 "organization": "Bäckerei Müller"}


async def test_coordinates_off_the_globe_and_overlong_names_are_not_taken(env):
    client, services, fake = env
    # Telegram sends no such values, but a parser of untrusted JSON takes none past the globe or the bounds.
    off = shared(9804, 8804, location=Location(latitude=0, longitude=0))
    off["message"]["location"] = {"latitude": 91.5, "longitude": 13.4}
    assert (await post(client, off)).status_code == 200
    [sent] = await wait_until(lambda: sent_to(fake, 8804), what="the answer")
    assert sent.text == TEXT_ONLY_REPLY  # a location it cannot place is what it cannot read
    [question, _] = await settled_chat(services, channel="telegram", chat="8804")
    assert "shared" not in question.meta
    long = await answered(env, shared(9805, 8805, contact=Contact(phone_number="1" * 80, first_name="N" * 500)), 8805)
    assert long.meta["shared"]["contact"] == {"name": "N" * 200, "phone": "1" * 32}
