"""WhatsApp's STOP and START, and its 24-hour window, are one business number's, so one bot's: through the real
app with two bots on two numbers, a STOP to one leaves the other answering, a START to the other re-enables nothing
of the first, and a message to one opens no window of the other."""

from __future__ import annotations

import asyncio
import shutil
from contextlib import asynccontextmanager
from urllib.parse import urlencode

import httpx
import pytest
import pytest_asyncio
from twilio.request_validator import RequestValidator

from gateway.app import create_app
from gateway.message_handler import OPTED_OUT
from gateway.retention import forget_contact
from gateway.settings import load_settings
from tests.conftest import ROOT, upgrade, write_config
from tests.fakes.twilio_api import FakeTwilio
from tests.gateway_channels.conftest import (
    KB_FILES,
    QUESTION,
    get_message,
    settle,
    settled_chat,
    store_reply,
    wait_until,
)
from tests.gateway_channels.whatsapp_rig import ACCOUNT_SID, AUTH_TOKEN, PUBLIC_URL, content_template, leave_window

NUMBERS = {"alpha": "+14155230001", "beta": "+14155230002"}

pytestmark = pytest.mark.asyncio(loop_scope="module")


@asynccontextmanager
async def two_bots(tmp_path):
    """The app with bots `alpha` and `beta`, each on its own WhatsApp number, against one fake Twilio."""
    fake = FakeTwilio(account_sid=ACCOUNT_SID, auth_token=AUTH_TOKEN).start()
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in KB_FILES:
        shutil.copy(ROOT / "examples" / "help-center" / name, docs / name)
    bots = [{"name": bot, "sources": [{"name": "help", "type": "directory", "path": str(docs), "schedule": "0 3 * * *"}],
             "channels": {"whatsapp": {"account_sid": "${WA_SID}", "auth_token": "${WA_TOKEN}", "from_number": number,
                                       "public_url": PUBLIC_URL, "api_base": fake.base_url}}}
            for bot, number in NUMBERS.items()]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WA_SID", ACCOUNT_SID)
        patch.setenv("WA_TOKEN", AUTH_TOKEN)
        settings = load_settings(write_config(tmp_path, bots=bots))
    await asyncio.to_thread(upgrade, settings.database_url)
    app = create_app(settings, start_scheduler=False, start_channels=False)
    try:
        async with app.router.lifespan_context(app):
            await app.state.services.knowledge.ingest()
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway.test",
                                         timeout=60) as client:
                yield client, app.state.services, fake
    finally:
        fake.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    async with two_bots(tmp_path_factory.mktemp("two_bots")) as rig:
        yield rig


async def say(client, bot: str, sid: str, phone: str, body: str = QUESTION, **extra: str) -> None:
    """`phone` writes `body` to `bot`'s number: the webhook Twilio signs for that bot's route."""
    url = f"/webhooks/{bot}/whatsapp"
    form = {"MessageSid": sid, "SmsMessageSid": sid, "AccountSid": ACCOUNT_SID, "From": f"whatsapp:{phone}",
            "To": f"whatsapp:{NUMBERS[bot]}", "Body": body, "NumMedia": "0", "WaId": phone.lstrip("+"),
            "ProfileName": "Ann", "SmsStatus": "received", **extra}
    signature = RequestValidator(AUTH_TOKEN).compute_signature(PUBLIC_URL + url, form)
    response = await client.post(url, content=urlencode(form).encode(), headers={
        "content-type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature})
    assert response.status_code == 200, response.text


def answers(fake: FakeTwilio, bot: str, phone: str):
    """What `bot`'s number sent to `phone`."""
    return [r for r in fake.delivered
            if r.form.get("To") == f"whatsapp:{phone}" and r.form.get("From") == f"whatsapp:{NUMBERS[bot]}"]


async def chat(services, bot: str, phone: str, count: int):
    found = await settled_chat(services, channel="whatsapp", chat=f"whatsapp:{phone}", count=count)
    return [m for m in found if m.bot == bot]


async def test_whatsapp_stop_to_one_bot_leaves_the_other_bot_answering(env):
    client, services, fake = env
    phone = "+15550000101"
    await say(client, "alpha", "SM" + "b1" * 16, phone, "STOP", OptOutType="STOP")
    await chat(services, "alpha", phone, 1)
    await say(client, "beta", "SM" + "b2" * 16, phone)  # another business: the STOP was not said to it
    [sent] = await wait_until(lambda: answers(fake, "beta", phone), what="beta's answer")
    assert "Sources:" in sent.form["Body"]
    await say(client, "alpha", "SM" + "b3" * 16, phone)  # the business told STOP answers nothing
    [_, question] = await chat(services, "alpha", phone, 4)
    assert (question.status, question.error) == ("ignored", OPTED_OUT)
    reply_id = await store_reply(services, conversation_id=question.conversation_id, text="We refunded your order.")
    assert await services.outbox.deliver(reply_id) == "failed"
    assert "opted out (STOP)" in (await get_message(services, reply_id)).error
    await settle(services=services)
    assert answers(fake, "alpha", phone) == []


async def test_whatsapp_start_to_one_bot_does_not_re_enable_another_it_was_stopped_for(env):
    client, services, fake = env
    phone = "+15550000102"
    for bot, sid in (("alpha", "c1"), ("beta", "c2")):
        await say(client, bot, "SM" + sid * 16, phone, "STOP", OptOutType="STOP")
    await chat(services, "alpha", phone, 2)
    await say(client, "beta", "SM" + "c3" * 16, phone, "START", OptOutType="START")
    await say(client, "beta", "SM" + "c4" * 16, phone)
    await wait_until(lambda: answers(fake, "beta", phone), what="beta's answer after START")
    await say(client, "alpha", "SM" + "c5" * 16, phone)
    [_, question] = await chat(services, "alpha", phone, 6)
    assert (question.status, question.error) == ("ignored", OPTED_OUT)
    await settle(services=services)
    assert answers(fake, "alpha", phone) == []


async def test_forget_keeps_each_bots_stop_for_that_bot_alone(env):
    # `gateway forget` keeps what is left of a STOP: still one bot's, not every bot's.
    client, services, fake = env
    phone = "+15550000103"
    await say(client, "alpha", "SM" + "d1" * 16, phone, "STOP", OptOutType="STOP")
    await chat(services, "alpha", phone, 1)
    report = await forget_contact(services.sessions, channel="whatsapp", user=phone[1:])
    assert (report.conversations, report.contacts, report.opt_outs_kept) == (1, 0, 1)
    await say(client, "beta", "SM" + "d2" * 16, phone)
    await wait_until(lambda: answers(fake, "beta", phone), what="beta's answer after forget")
    await say(client, "alpha", "SM" + "d3" * 16, phone)
    [question] = await chat(services, "alpha", phone, 3)
    assert (question.status, question.error) == ("ignored", OPTED_OUT)


async def test_whatsapp_message_to_one_bot_opens_no_window_of_the_other(env):
    # Twilio refuses free-form text outside *that number's* 24 hours (63016): beta, whose customer wrote to it
    # 25 hours ago and to alpha just now, sends the template at once, no refused text first.
    client, services, fake = env
    phone = "+15550000104"
    await say(client, "beta", "SM" + "e1" * 16, phone)
    await wait_until(lambda: answers(fake, "beta", phone), what="beta's answer")
    [_, answer] = await chat(services, "beta", phone, 2)
    await leave_window(services, answer.conversation_id)
    await say(client, "alpha", "SM" + "e2" * 16, phone)
    [answered] = await wait_until(lambda: answers(fake, "alpha", phone), what="alpha's answer")
    assert "ContentSid" not in answered.form  # alpha's own window is open
    await chat(services, "alpha", phone, 4)
    with content_template(services, "HX" + "4" * 32, bot="beta"):
        reply_id = await store_reply(services, conversation_id=answer.conversation_id, text="Your refund is on its way.")
        assert await services.outbox.deliver(reply_id) == "sent"
    assert [r.form.get("ContentSid") for r in answers(fake, "beta", phone)] == [None, "HX" + "4" * 32]
    assert (await get_message(services, reply_id)).meta["template"] == "HX" + "4" * 32
