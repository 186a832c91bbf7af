"""A location or a contact card shared on WhatsApp, through the real app: something said, answered and shown
to operators as text ("I can only read text" answered it), its values kept in the message's meta. So is the
click-to-WhatsApp ad a first message came from."""

from __future__ import annotations

import pytest

from tests.english_replies import TEXT_ONLY_REPLY
from tests.gateway_channels.conftest import settled_chat, wait_until
from tests.gateway_channels.whatsapp_rig import inbound, post, sent_to

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_a_shared_location_is_read_as_text_and_answered(whatsapp_env):
    client, services, fake = whatsapp_env
    phone = "+15550000041"
    # Twilio's fields for a place picked on WhatsApp's map: no Body text, no media.
    await post(client, inbound("SM" + "f1" * 16, phone, "", Latitude="52.520008", Longitude="13.404954",
                               Label="Acme Store Mitte", Address="Alexanderplatz 1, 10178 Berlin",
                               MessageType="location"))
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the answer to the location")
    assert sent.form["Body"] != TEXT_ONLY_REPLY
    [question, _] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}")
    assert question.text == "Shared location: Acme Store Mitte, Alexanderplatz 1, 10178 Berlin (52.520008, 13.404954)"
    assert question.meta["shared"] == {"location": {"latitude": 52.520008, "longitude": 13.404954,
                                                    "label": "Acme Store Mitte",
                                                    "address": "Alexanderplatz 1, 10178 Berlin"}}
    assert question.attachments == [{"kind": "location", "url": "geo:52.520008,13.404954",
                                     "caption": "Acme Store Mitte"}]


async def test_a_shared_contact_card_is_named_to_the_operator_and_answered(whatsapp_env):
    client, services, fake = whatsapp_env
    phone = "+15550000042"
    media = "https://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM1/Media/ME1"
    await post(client, inbound("MM" + "f2" * 16, phone, "", NumMedia="1", MediaUrl0=media,
                               MediaContentType0="text/x-vcard"))
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the answer to the contact card")
    assert sent.form["Body"] != TEXT_ONLY_REPLY
    [question, _] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}")
    assert (question.text, question.meta["shared"]) == ("Shared a contact card", {"contact_cards": 1})


async def test_a_first_message_from_an_ad_says_which_ad_it_is_about(whatsapp_env):
    # "More information about this?" from a click-to-WhatsApp ad: without the ad, "this" was nothing.
    client, services, fake = whatsapp_env
    phone = "+15550000043"
    await post(client, inbound("SM" + "f3" * 16, phone, "Can I get more information about this?",
                               ReferralSourceType="ad", ReferralHeadline="Spring sale",
                               ReferralBody="20% off the Plus plan", ReferralSourceUrl="https://fb.me/x1"))
    await wait_until(lambda: sent_to(fake, phone), what="the answer")
    [question, _] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}")
    assert question.text == "(Sent from the ad: Spring sale - 20% off the Plus plan)\nCan I get more information about this?"
    assert question.meta["shared"]["ad"] == {"headline": "Spring sale", "body": "20% off the Plus plan",
                                             "source_url": "https://fb.me/x1"}
