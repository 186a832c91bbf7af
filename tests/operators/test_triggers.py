"""Escalation triggers through the real app, with the bot's models on the local scripted OpenAI fake:
the model's `escalate_to_human` tool call, every model failing, and the off-hours acknowledgement."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from sqlalchemy import select

from gateway.operators.notices import DAY_NAMES, acknowledgement_extras, after_hours_message, is_open, next_opening
from gateway.operators.summary import SUMMARY_PROMPT
from gateway.reply_settings import RepliesSettings
from gateway.settings import BusinessHours, EscalationSettings
from storage.models import Escalation, Message
from tests.conftest import app_client
from tests.english_replies import LLM_DOWN_REPLY
from tests.fakes.openai_server import ToolCallSpec, Turn, model_entry

module_loop = pytest.mark.asyncio(loop_scope="module")  # the app is shared by the module
pytestmark = pytest.mark.usefixtures("fresh_fake")
ACK = "I've asked a person from our team to take over. They'll reply here shortly."
OPS_TOKEN = "trig-ops-token-0123456789"
OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}
# Today and tomorrow (UTC) are days off for the `late` bot, so it is closed whenever this module runs.
_TODAY = datetime.now(timezone.utc).weekday()
LATE_DAYS = [d for d in range(7) if d not in (_TODAY, (_TODAY + 1) % 7)]
TARDE_ACK = "He pedido a una persona de nuestro equipo que siga la conversación."
TARDE_REPLIES = {"after_hours": "Nuestro equipo no está ahora (trabajamos de {start} a {end}, {timezone}). Una persona "
                                "te responderá {day} a las {time}.",
                 "day_names": ["el lunes", "el martes", "el miércoles", "el jueves", "el viernes", "el sábado",
                               "el domingo"]}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, fake):
    tmp_path = tmp_path_factory.mktemp("triggers")
    bots = [
        {"name": "acme", "model": "primary", "fallbacks": ["backup"], "channels": {"web": {}},
         "tools": [{"name": "escalate_to_human", "type": "builtin"}]},
        {"name": "solo", "model": "primary", "fallbacks": ["backup"], "channels": {"web": {}},
         "tools": [{"name": "escalate_to_human", "type": "builtin"}], "escalation": {"enabled": False}},
        {"name": "late", "channels": {"web": {}},
         "escalation": {"business_hours": {"timezone": "UTC", "days": LATE_DAYS, "start": "09:00", "end": "17:00"}}},
        {"name": "tarde", "channels": {"web": {}}, "replies": TARDE_REPLIES,
         "escalation": {"phrases": ["hablar con una persona"], "acknowledgement": TARDE_ACK,
                        "business_hours": {"timezone": "UTC", "days": LATE_DAYS, "start": "09:00", "end": "17:00"}}},
    ]
    async with app_client(tmp_path, bots=bots, models=[model_entry(fake, "primary"), model_entry(fake, "backup")],
                          llm={"timeout": 5, "num_retries": 0},
                          operators=[{"name": "ops", "token": "${TRIGGERS_OPS_TOKEN}", "bots": ["*"]}],
                          env={"TRIGGERS_OPS_TOKEN": OPS_TOKEN}) as http:
        yield http


async def _chat(client, bot: str, session_id: str, text: str) -> dict:
    response = await client.post(f"/v1/bots/{bot}/chat", json={"session_id": session_id, "text": text})
    assert response.status_code == 200, response.text
    return response.json()


async def _outbound(client, conversation_id: int) -> list[Message]:
    async with client.services.sessions() as session:
        return list((await session.execute(select(Message).where(
            Message.conversation_id == conversation_id, Message.direction == "out")
            .order_by(Message.id))).scalars().all())


async def _escalations(client, conversation_id: int) -> list[Escalation]:
    async with client.services.sessions() as session:
        return list((await session.execute(select(Escalation).where(
            Escalation.conversation_id == conversation_id))).scalars().all())


@module_loop
async def test_trigger_tool_call_escalates_once_then_bot_is_silent(client, fake):
    call = ToolCallSpec("escalate_to_human", {"reason": "customer disputes a charge twice"}, id="call-esc")
    fake.script("primary", Turn(tool_calls=(call,)))

    first = await _chat(client, "acme", "t-1", "You charged me twice for March, I want this fixed now")

    assert first["state"] == "waiting" and first["reply"] == ACK
    [escalation] = await _escalations(client, first["conversation_id"])
    assert escalation.state == "open" and escalation.reason == "customer disputes a charge twice"
    outbound = await _outbound(client, first["conversation_id"])
    assert [m.text for m in outbound].count(ACK) == 1 and len(outbound) == 1
    assert outbound[0].tool_calls[0]["name"] == "escalate_to_human"
    assert len(fake.requests_for("primary")) == 1 and fake.requests_for("backup") == []

    second = await _chat(client, "acme", "t-1", "Hello? The second charge is 19.99")

    assert second["reply"] is None and second["state"] == "waiting"
    assert len(fake.requests) == 1  # the model never saw the message sent during the handoff
    assert len(await _outbound(client, first["conversation_id"])) == 1

    # The operator sees it, in the transcript and in the model-written summary.
    fake.script("primary", Turn(text="Customer was charged twice for March and waits for a person."))
    detail = await client.get(f"/v1/escalations/{escalation.id}", headers=OPS)
    assert detail.status_code == 200
    body = detail.json()
    assert [(m["author"], m["text"]) for m in body["messages"]][-1] == ("contact", "Hello? The second charge is 19.99")
    assert body["summary"] == {"kind": "llm", "text": "Customer was charged twice for March and waits for a person."}
    assert len(fake.requests) == 2
    summary_request = fake.requests_for("primary")[-1]
    assert summary_request.messages[0]["content"] == SUMMARY_PROMPT
    assert "The second charge is 19.99" in summary_request.messages[1]["content"]


@module_loop
async def test_the_models_escalation_reason_is_not_logged_the_operator_reads_it(client, fake, capfd):
    """The model's `escalate_to_human` reason is free text that quotes the customer: `escalation.opened`
    and `pipeline.done` logged it whole. They now say what opened it and how long its reason is."""
    reason = "Jane Doe (jane@example.com) says card 4111 was charged twice"
    fake.script("primary", Turn(tool_calls=(ToolCallSpec("escalate_to_human", {"reason": reason}, id="call-pii"),)))
    capfd.readouterr()

    body = await _chat(client, "acme", "t-pii", "I was charged twice")

    logged = ""
    for _ in range(100):  # `pipeline.done` comes just after the reply the chat call waited for
        logged += "".join(capfd.readouterr())
        if "pipeline.done" in logged:
            break
        await asyncio.sleep(0.05)
    [escalation] = await _escalations(client, body["conversation_id"])
    assert escalation.reason == reason  # the operator's console and REST API read it from here
    [opened] = [line for line in logged.splitlines() if "escalation.opened" in line]
    assert "trigger=assistant" in opened and f"reason_chars={len(reason)}" in opened
    [done] = [line for line in logged.splitlines() if "pipeline.done" in line]
    assert "escalate=assistant" in done
    assert "Jane" not in logged


@module_loop
async def test_trigger_every_model_failing_gives_one_honest_acknowledgement(client, fake):
    fake.script("primary", Turn(status=500))
    fake.script("backup", Turn(status=500))

    body = await _chat(client, "acme", "t-2", "How do I export my invoices?")

    assert body["reply"] == LLM_DOWN_REPLY and body["state"] == "waiting"
    [escalation] = await _escalations(client, body["conversation_id"])
    assert escalation.reason == "every model failed"
    texts = [m.text for m in await _outbound(client, body["conversation_id"])]
    assert texts == [LLM_DOWN_REPLY]  # no second "a person is coming" from the escalation service
    assert ACK not in texts
    assert len(fake.requests_for("primary")) == 1 and len(fake.requests_for("backup")) == 1

    fake.script("primary", Turn(text="must not be used"))
    again = await _chat(client, "acme", "t-2", "Still there?")
    assert again["reply"] is None and len(fake.requests) == 2


@module_loop
async def test_trigger_off_hours_acknowledgement_says_when_to_expect_a_reply(client):
    body = await _chat(client, "late", "t-3", "Please let me talk to a human")

    assert body["state"] == "waiting"
    texts = [m.text for m in await _outbound(client, body["conversation_id"])]
    assert texts[0] == ACK and len(texts) == 2
    opening_day = DAY_NAMES[(_TODAY + 2) % 7]
    assert texts[1] == ("Our team is offline right now (we work 09:00–17:00, UTC). "
                        f"Expect a reply from a person {opening_day} at 09:00 (UTC).")
    assert body["reply"] == f"{ACK}\n\n{texts[1]}"


@module_loop
async def test_trigger_off_hours_note_of_a_spanish_bot_is_in_spanish(client):
    """A Spanish phrase with more words after it escalates, and the off-hours note was English."""
    body = await _chat(client, "tarde", "t-es", "Quiero hablar con una persona sobre mi factura")

    assert body["state"] == "waiting"
    opening_day = TARDE_REPLIES["day_names"][(_TODAY + 2) % 7]
    assert [m.text for m in await _outbound(client, body["conversation_id"])] == [
        TARDE_ACK, f"Nuestro equipo no está ahora (trabajamos de 09:00 a 17:00, UTC). Una persona te responderá "
                   f"{opening_day} a las 09:00."]


@module_loop
async def test_trigger_in_hours_bot_gets_no_off_hours_note(client, fake):
    # `acme` has no business hours: always staffed, so the acknowledgement stands alone.
    body = await _chat(client, "acme", "t-4", "I'd like to speak to a human")
    assert body["reply"] == ACK and body["state"] == "waiting"
    assert [m.text for m in await _outbound(client, body["conversation_id"])] == [ACK]
    assert fake.requests == []  # the phrase trigger decides before any model call


# ---- the business-hours arithmetic, with fixed datetimes ------------------------------------------

BERLIN = BusinessHours(timezone="Europe/Berlin", days=[0, 1, 2, 3, 4], start="09:00", end="17:00")
SETTINGS = EscalationSettings(business_hours=BERLIN)


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


@pytest.mark.parametrize(("now", "expected"), [
    (_utc(2025, 6, 2, 7, 0), True),     # Monday 09:00 in Berlin (CEST, UTC+2): opening minute
    (_utc(2025, 6, 2, 14, 59), True),   # Monday 16:59
    (_utc(2025, 6, 2, 15, 0), False),   # Monday 17:00: closed
    (_utc(2025, 6, 7, 10, 0), False),   # Saturday noon
    (_utc(2025, 1, 6, 8, 30), True),    # Monday 09:30 in winter (CET, UTC+1)
])
def test_notices_is_open_in_the_business_time_zone(now, expected):
    assert is_open(BERLIN, now) is expected


@pytest.mark.parametrize(("now", "when"), [
    (_utc(2025, 6, 2, 4, 0), "today at 09:00"),      # Monday 06:00 Berlin
    (_utc(2025, 6, 2, 16, 0), "tomorrow at 09:00"),  # Monday 18:00 Berlin
    (_utc(2025, 6, 6, 16, 0), "Monday at 09:00"),    # Friday 18:00 Berlin: the weekend in between
    (_utc(2025, 6, 8, 22, 30), "today at 09:00"),    # Sunday 22:30 UTC is already Monday in Berlin
])
def test_notices_after_hours_message_names_the_next_opening(now, when):
    assert after_hours_message(BERLIN, now) == (
        "Our team is offline right now (we work 09:00–17:00, Europe/Berlin). "
        f"Expect a reply from a person {when} (Europe/Berlin).")


@pytest.mark.parametrize(("now", "expected"), [
    (_utc(2025, 6, 2, 23, 0), True),    # Monday 23:00: the Monday night shift
    (_utc(2025, 6, 3, 5, 59), True),    # Tuesday 05:59: still Monday's shift
    (_utc(2025, 6, 3, 6, 0), False),    # Tuesday 06:00: over
    (_utc(2025, 6, 2, 3, 0), False),    # Monday 03:00 belongs to Sunday's shift, and Sunday is off
    (_utc(2025, 6, 6, 23, 0), False),   # Friday night is off
])
def test_notices_is_open_across_midnight(now, expected):
    night = BusinessHours(timezone="UTC", days=[0, 1, 2, 3], start="22:00", end="06:00")
    assert is_open(night, now) is expected


@pytest.mark.parametrize(("hours", "error"), [
    ({"end": "24:00"}, "'24:00' is not a time of day"),  # it loaded, then every handoff failed
    ({"start": "09:60"}, "'09:60' is not a time of day"),
    ({"start": "9:00"}, "'9:00' is not a time of day written HH:MM"),  # was the pattern's regex
    ({"days": [1, 2, 3, 4, 5, 7]}, "7 is not a weekday: Monday is 0 and Sunday 6"),
])
def test_business_hours_that_cannot_be_read_are_refused_at_load(hours, error):
    with pytest.raises(ValueError, match=error):
        BusinessHours(**hours)


def test_business_hours_ending_at_midnight_are_open_until_then():
    evening = BusinessHours(timezone="UTC", days=[0], start="09:00", end="00:00")
    assert is_open(evening, _utc(2025, 6, 2, 23, 59)) and not is_open(evening, _utc(2025, 6, 3, 0, 0))


def test_notices_next_opening_is_an_aware_local_time():
    opening = next_opening(BERLIN, _utc(2025, 6, 6, 16, 0))
    assert opening == datetime(2025, 6, 9, 9, 0, tzinfo=ZoneInfo("Europe/Berlin"))
    assert opening.astimezone(timezone.utc) == _utc(2025, 6, 9, 7, 0)


def test_notices_acknowledgement_extras_in_and_out_of_hours():
    open_now, closed_now = _utc(2025, 6, 3, 10, 0), _utc(2025, 6, 7, 10, 0)
    assert acknowledgement_extras(SETTINGS, already_acknowledged=False, now=open_now) == [SETTINGS.acknowledgement]
    assert acknowledgement_extras(SETTINGS, already_acknowledged=True, now=open_now) == []
    closed = acknowledgement_extras(SETTINGS, already_acknowledged=True, now=closed_now)
    assert closed == [after_hours_message(BERLIN, closed_now)] and "Monday at 09:00" in closed[0]
    assert acknowledgement_extras(EscalationSettings(), already_acknowledged=False, now=closed_now) == [
        SETTINGS.acknowledgement]


@module_loop
async def test_a_bot_without_escalation_opens_none_and_promises_no_person(client, fake):
    # Its model was offered the escalation tool, and an outage handed the conversation to operators
    # who, by `escalation.enabled: false`, do not exist: the customer was told a person was coming.
    fake.script("primary", Turn(status=500))
    fake.script("backup", Turn(status=500))

    body = await _chat(client, "solo", "t-solo", "How do I export my invoices?")

    assert body["reply"] == RepliesSettings().outage("llm_down", escalates=False) and "a person" not in body["reply"]
    assert body["state"] == "bot" and await _escalations(client, body["conversation_id"]) == []
    [request, *_] = fake.requests_for("primary")
    assert "escalate_to_human" not in [t["function"]["name"] for t in request.body.get("tools", [])]



@module_loop
async def test_an_ok_between_unanswered_questions_does_not_reset_their_count(client, fake):
    # "ok" after "I don't know…" is small talk: answered with the thanks text, it set the count of
    # unanswered turns back to 0, so a customer who said "ok" after each failed question never got a person.
    dont_know = Turn(text="I don't know the answer to that from our help center.")
    for text in ["How do I export my notes to PDF?", "ok", "Can I print a notebook?", "ok", "Is there a dark mode?"]:
        if text != "ok":  # a question after the first is rewritten first, then answered
            fake.script("primary", *([Turn(text='{"queries": ["' + text + '"]}')] if "PDF" not in text else []),
                        dont_know)
        body = await _chat(client, "acme", "t-ok-between", text)
    [escalation] = await _escalations(client, body["conversation_id"])
    assert escalation.reason == "3 consecutive turns without an answer"
    assert body["state"] == "waiting"
