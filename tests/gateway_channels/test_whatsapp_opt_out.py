"""WhatsApp's STOP, START and HELP through the real app: an opted-out customer gets nothing (not our
answers, not an operator's reply, not a template) until START, and what was held for them is kept."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from gateway.message_handler import MAX_TURN_ATTEMPTS, OPTED_OUT
from gateway.retention import forget_contact
from storage.models import Contact, Escalation, Message, OptOut
from tests.english_replies import DEFAULT_GREETING, ENGLISH
from tests.fakes.twilio_api import Reply
from tests.gateway_channels.conftest import get_message, messages_in_chat, settle, settled_chat, store_reply, wait_until
from tests.gateway_channels.whatsapp_rig import (
    answered,
    held_behind_template,
    inbound,
    post,
    sent_to,
    status,
    status_is,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_whatsapp_stop_is_not_answered_and_nothing_is_sent_until_start(whatsapp_env):
    # Under Advanced Opt-Out (OptOutType) Twilio confirms STOP and START itself, and refuses sends to an
    # opted-out number (21610).
    client, services, fake = whatsapp_env
    phone = "+15550000020"
    await post(client, inbound("SM" + "ab" * 16, phone, "Stop", OptOutType="STOP"))
    [stop] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=1)
    assert (stop.text, stop.meta["command"]) == ("Stop", "opt_out_answered")
    await post(client, inbound("SM" + "ac" * 16, phone))  # a question after STOP: not answered, no model paid
    [_, question] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=2)
    assert (question.status, question.error) == ("ignored", OPTED_OUT)
    # An operator's reply is refused at the outbox: Twilio would refuse it (21610).
    reply_id = await store_reply(services, conversation_id=stop.conversation_id, text="We refunded your order.")
    assert await services.outbox.deliver(reply_id) == "failed"
    assert "opted out (STOP)" in (await get_message(services, reply_id)).error
    # START, as Twilio marks it (OptOutType), lifts it: the next question is answered.
    await post(client, inbound("SM" + "ad" * 16, phone, "start", OptOutType="START"))
    await post(client, inbound("SM" + "ae" * 16, phone))
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the answer after START")
    assert "Sources:" in sent.form["Body"]
    await settle(services=services)
    assert len(sent_to(fake, phone)) == 1  # STOP and START got no answer of ours


async def test_whatsapp_stop_twilio_did_not_handle_is_confirmed_once_and_start_too(whatsapp_env):
    # Twilio handles WhatsApp keywords only under a Messaging Service's Advanced Opt-Out, and marks those
    # `OptOutType`. A bare STOP was answered by no one: the customer never learnt they were opted out, nor how
    # to come back. It gets one confirmation of ours; nothing else is sent until START, which is confirmed too.
    client, services, fake = whatsapp_env
    phone = "+15550000035"
    await post(client, inbound("SM" + "b1" * 16, phone, "STOP"))
    [confirmed] = await wait_until(lambda: sent_to(fake, phone), what="the STOP's confirmation")
    assert confirmed.form["Body"] == ENGLISH.opted_out
    await post(client, inbound("SM" + "b2" * 16, phone))  # a question after STOP: not answered
    *_, question = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=3)
    assert (question.direction, question.status, question.error) == ("in", "ignored", OPTED_OUT)
    await post(client, inbound("SM" + "b1" * 16, phone, "STOP"))  # Twilio's retry of the STOP: no second one
    await post(client, inbound("SM" + "b3" * 16, phone, "start"))
    await wait_until(lambda: len(sent_to(fake, phone)) >= 2, what="the START's confirmation")
    assert sent_to(fake, phone)[1].form["Body"] == ENGLISH.opted_in
    await post(client, inbound("SM" + "b4" * 16, phone))
    await wait_until(lambda: len(sent_to(fake, phone)) >= 3, what="the answer after START")
    await settle(services=services)
    bodies = [r.form["Body"] for r in sent_to(fake, phone)]
    assert len(bodies) == 3 and "Sources:" in bodies[2]


async def test_whatsapp_only_the_stops_own_confirmation_passes_the_opt_out(whatsapp_env):
    # The outbox let through any notice of ours (author "system") replying to a bare STOP, not the confirmation
    # alone: the acknowledgement of a STOP turn that failed and was handed to a person ("I've asked a person…",
    # which copies the pending reply's reply_to) reached a contact who had just opted out.
    client, services, fake = whatsapp_env
    phone = "+15550000037"
    await post(client, inbound("SM" + "b6" * 16, phone, "STOP"))
    await wait_until(lambda: sent_to(fake, phone), what="the STOP's confirmation")
    [stop, _] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=2)
    notice = await store_reply(services, conversation_id=stop.conversation_id, text=ENGLISH.person_will_help,
                               author="system", reply_to_id=stop.id)
    # Delivered here or by the app's own outbox, whichever takes it first (a loaded CI's took it: "skipped").
    assert await services.outbox.deliver(notice) in ("failed", "skipped")
    refused = await wait_until(lambda: _status_failed(services, notice), what="the notice refused")
    assert "opted out (STOP)" in refused.error
    assert [r.form["Body"] for r in sent_to(fake, phone)] == [ENGLISH.opted_out]


async def test_whatsapp_start_from_someone_never_opted_out_gets_the_greeting(whatsapp_env):
    # "Start" as a first message is someone beginning, not coming back: "You'll get our messages here again"
    # answered a STOP they never sent.
    client, services, fake = whatsapp_env
    phone = "+15550000036"
    await post(client, inbound("SM" + "b5" * 16, phone, "Start"))
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the greeting")
    assert sent.form["Body"] == DEFAULT_GREETING


async def _status_failed(services, notice):
    message = await get_message(services, notice)
    return message if message.status == "failed" else None


async def _failed_reply(services, phone: str):
    stored = await messages_in_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}")
    return next((m for m in stored if m.direction == "out" and m.status == "failed"), None)


async def test_whatsapp_help_keyword_gets_the_greeting(whatsapp_env):
    client, services, fake = whatsapp_env
    await post(client, inbound("SM" + "af" * 16, "+15550000024", "HELP"))
    [sent] = await wait_until(lambda: sent_to(fake, "+15550000024"), what="the greeting")
    assert sent.form["Body"] == DEFAULT_GREETING


async def test_whatsapp_help_answered_by_twilios_advanced_opt_out_gets_nothing_more(whatsapp_env):
    # With Advanced Opt-Out Twilio answers HELP with the business's help text and marks it OptOutType=HELP:
    # our greeting came as a second answer.
    client, services, fake = whatsapp_env
    phone = "+15550000025"
    await post(client, inbound("SM" + "a0" * 16, phone, "help", OptOutType="HELP"))
    [help_] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=1)
    assert help_.meta["command"] == "help_answered"
    await post(client, inbound("SM" + "a1" * 16, phone))  # not an opt-out: the next question is answered
    [sent] = await wait_until(lambda: sent_to(fake, phone), what="the answer after HELP")
    assert "Sources:" in sent.form["Body"]


async def test_whatsapp_reply_held_behind_a_template_is_kept_through_stop_and_sent_after_start(whatsapp_env):
    # STOP is no answer to the template: its text was queued then, failed as opted out, and marked sent as
    # text, so after START the customer never got it.
    client, services, fake = whatsapp_env
    phone = "+15550000026"
    await held_behind_template(client, services, fake, phone, sids="d1", text="Your parcel was found.",
                               content_sid="HX" + "6" * 32)
    await post(client, inbound("SM" + "d2" * 16, phone, "STOP"))
    await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=5)
    assert await _failed_reply(services, phone) is None
    await post(client, inbound("SM" + "d3" * 16, phone, "START"))
    await wait_until(lambda: len(sent_to(fake, phone)) >= 5, what="the held reply after START")
    await settle(services=services)
    bodies = [r.form.get("Body") or r.form["ContentSid"] for r in sent_to(fake, phone)]
    # The STOP and the START (bare: Twilio answered neither) are confirmed; the held text follows START.
    assert bodies[1:3] == ["HX" + "6" * 32, ENGLISH.opted_out]
    assert sorted(bodies[3:]) == sorted(["Your parcel was found.", ENGLISH.opted_in])


async def test_twilios_21610_marks_the_contact_opted_out_so_later_replies_are_not_sent(whatsapp_env):
    # A STOP that never reached us (sent before the bot, or handled by Twilio alone): every later reply went to
    # Twilio and was refused one by one.
    client, services, fake = whatsapp_env
    phone = "+15550000027"
    conversation_id, _, _ = await answered(client, services, fake, "SM" + "e1" * 16, phone)
    fake.script(Reply(status=400, code=21610, message="Attempt to send to unsubscribed recipient"))
    first = await store_reply(services, conversation_id=conversation_id, text="Your parcel was found.")
    assert await services.outbox.deliver(first) == "failed"
    assert await _opted_out_at(services, phone) is not None
    asked = len(fake.requests)
    second = await store_reply(services, conversation_id=conversation_id, text="It ships tomorrow.")
    assert await services.outbox.deliver(second) == "failed"
    assert "opted out (STOP)" in (await get_message(services, second)).error and len(fake.requests) == asked


async def _opted_out_at(services, phone: str):
    async with services.sessions() as session:
        return await session.scalar(select(OptOut.opted_out_at).join(Contact, Contact.id == OptOut.contact_id)
                                    .where(Contact.external_id == phone[1:], OptOut.bot == "acme"))


async def test_a_receipt_failed_with_21610_marks_the_contact_opted_out(whatsapp_env):
    # Twilio mostly accepts the send and reports 21610 later, in the status callback: only the send's own error
    # marked the contact, so every later reply went to Twilio and failed the same way.
    client, services, fake = whatsapp_env
    phone = "+15550000028"
    conversation_id, reply_id, sid = await answered(client, services, fake, "SM" + "e2" * 16, phone)
    response = await post(client, status(sid, "undelivered", To=f"whatsapp:{phone}", ErrorCode="21610"))
    assert response.status_code == 200
    await wait_until(lambda: status_is(services, reply_id, "failed"), what="the failed receipt")
    assert await _opted_out_at(services, phone) is not None
    asked = len(fake.requests)
    later = await store_reply(services, conversation_id=conversation_id, text="It ships tomorrow.")
    assert await services.outbox.deliver(later) == "failed"
    assert "opted out (STOP)" in (await get_message(services, later)).error and len(fake.requests) == asked


async def test_a_receipt_failed_otherwise_leaves_the_contact_as_it_was(whatsapp_env):
    client, services, fake = whatsapp_env
    phone = "+15550000029"
    _, reply_id, sid = await answered(client, services, fake, "SM" + "e3" * 16, phone)
    await post(client, status(sid, "failed", To=f"whatsapp:{phone}", ErrorCode="30008"))
    await wait_until(lambda: status_is(services, reply_id, "failed"), what="the failed receipt")
    assert await _opted_out_at(services, phone) is None


async def test_a_late_21610_receipt_for_a_reply_sent_before_the_customer_wrote_again_leaves_them_opted_in(whatsapp_env):
    # A receipt can come minutes after its send: a 21610 for a reply sent before the customer's START (or any
    # message of theirs since) says nothing about now, and marked them opted out again.
    client, services, fake = whatsapp_env
    phone = "+15550000030"
    _, reply_id, sid = await answered(client, services, fake, "SM" + "e4" * 16, phone)
    await post(client, inbound("SM" + "e5" * 16, phone, "start", OptOutType="START"))
    await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=3)
    await post(client, status(sid, "undelivered", To=f"whatsapp:{phone}", ErrorCode="21610"))
    await wait_until(lambda: status_is(services, reply_id, "failed"), what="the failed receipt")
    assert await _opted_out_at(services, phone) is None


async def test_a_contact_who_sent_stop_and_was_forgotten_is_still_not_messaged(whatsapp_env):
    # `gateway forget` deleted the contact with its STOP: their next message was answered, and an operator's
    # reply sent, to a number that had opted out. What stays is the STOP alone: their number and its time.
    client, services, fake = whatsapp_env
    phone = "+15550000031"
    await post(client, inbound("SM" + "f1" * 16, phone, "STOP", OptOutType="STOP"))
    await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=1)
    report = await forget_contact(services.sessions, channel="whatsapp", user=phone[1:])
    assert (report.conversations, report.messages, report.contacts, report.opt_outs_kept) == (1, 1, 0, 1)
    assert await messages_in_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}") == []
    async with services.sessions() as session:
        [kept] = (await session.execute(select(Contact).where(Contact.external_id == phone[1:]))).scalars().all()
    assert (kept.channel, kept.display_name, kept.last_inbound_at) == ("whatsapp", "", None)
    assert kept.created_at == await _opted_out_at(services, phone) is not None
    await post(client, inbound("SM" + "f2" * 16, phone))  # a question after: not answered, as before forget
    [question] = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=1)
    assert (question.status, question.error) == ("ignored", OPTED_OUT)
    reply_id = await store_reply(services, conversation_id=question.conversation_id, text="We refunded your order.")
    assert await services.outbox.deliver(reply_id) == "failed"
    await settle(services=services)
    assert sent_to(fake, phone) == []


@pytest.mark.parametrize(("phone", "sid", "fields", "confirmation"), [
    ("+15550000038", "SM" + "c1" * 16, {}, [ENGLISH.opted_out]),
    ("+15550000039", "SM" + "c2" * 16, {"OptOutType": "STOP"}, []),  # Twilio's Advanced Opt-Out answered it
], ids=["bare", "answered-by-twilio"])
async def test_a_stop_whose_turn_gave_up_is_still_confirmed_and_hands_nothing_to_a_person(whatsapp_env, phone, sid,
                                                                                          fields, confirmation):
    # Every attempt at the STOP's turn died before it was stored (a process killed each time): the turn gave up
    # with the failure reply ("I've asked a person…"), which the opt-out then refused, and an escalation. The
    # customer never learnt their STOP was heard, and a person was asked to help someone who had opted out.
    client, services, fake = whatsapp_env
    await services.worker.stop()  # the STOP is stored, but its turn not begun, until the worker starts again
    try:
        await post(client, inbound(sid, phone, "STOP", **fields))
        [stop] = await messages_in_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}")
        async with services.sessions() as session, session.begin():
            await session.execute(update(Message).where(Message.id == stop.id).values(attempts=MAX_TURN_ATTEMPTS))
    finally:
        await services.worker.start()
    given_up = await wait_until(lambda: _settled(services, stop.id), what="the STOP's turn given up")
    assert "gave up after 5 attempts" in given_up.error
    await settle(services=services)
    assert [r.form["Body"] for r in sent_to(fake, phone)] == confirmation
    assert await _opted_out_at(services, phone) is not None  # recorded as it was stored, whatever the turn did
    async with services.sessions() as session:
        assert (await session.execute(select(Escalation).where(
            Escalation.conversation_id == stop.conversation_id))).first() is None
    stored = await messages_in_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}")
    assert [(m.direction, m.status) for m in stored] == [("in", "failed")] + [("out", "sent")] * len(confirmation)


async def _settled(services, message_id: int):
    message = await get_message(services, message_id)
    return message if message.status not in ("pending", "sending") else None
