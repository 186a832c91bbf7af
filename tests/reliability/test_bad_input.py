"""Bad input at every entry point: naughty strings, broken bodies, wrong types, oversize, NUL bytes.

Every request is validly signed, so it reaches the parser and the store. The worker is off: this is
about what the edge accepts and stores (exactly once), not about answering; test_bad_input_worker
runs answers over a sample. The module runs on PostgreSQL when it is reachable (always under
CI=true), because PostgreSQL is the stricter store (no NUL in text, real length limits).
"""

from __future__ import annotations

import asyncio
import json

import pytest
import pytest_asyncio

from channels.telegram_updates import delivery_key
from gateway.models import is_blank
from tests.conftest import FIXTURES, drop_postgres, fresh_postgres_url
from tests.reliability.conftest import (
    WA_SID,
    WA_TOKEN,
    blns,
    channel_fakes,
    count_by_external_id,
    discord_ask,
    discord_request,
    inbound_counts,
    running_app,
    slack_event,
    slack_request,
    telegram_request,
    telegram_update,
    whatsapp_form,
    whatsapp_request,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

STRINGS = blns()
TG, SLACK, DISCORD, WA, WEB = ("/webhooks/acme/telegram", "/webhooks/acme/slack/events",
                               "/webhooks/acme/discord/interactions", "/webhooks/acme/whatsapp", "/v1/bots/acme/chat")
WEBHOOKS = {"telegram": TG, "slack": SLACK, "discord": DISCORD, "whatsapp": WA}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("badinput")
    database_url = await asyncio.to_thread(fresh_postgres_url)
    try:
        async with channel_fakes() as fakes:
            bots = [{"name": "acme", "channels": fakes.channels}]
            # The worker is off: the web chat answers 202 (pending) after this short wait.
            async with running_app(tmp_path, bots=bots, start_worker=False, database_url=database_url,
                                   worker={"reply_timeout": 0.05, "poll_interval": 0.2}) as (client, services):
                yield client, services
    finally:
        if database_url:
            await asyncio.to_thread(drop_postgres, database_url)


async def _post_everywhere(client, index: int, text: str) -> dict[str, int]:
    """One naughty string through every entry point at once; returns the status per channel."""
    requests = {
        "telegram": client.post(TG, **telegram_request(telegram_update(100000 + index, text))),
        "slack": client.post(SLACK, **slack_request(slack_event(f"Ev{index:06d}", text))),
        "discord": client.post(DISCORD, **discord_request(discord_ask(f"14{index:017d}", text))),
        "whatsapp": client.post(WA, **whatsapp_request(whatsapp_form(f"SM{index:032d}", text))),
        "web": client.post(WEB, json={"session_id": f"blns-{index}", "text": text, "message_id": f"blns-{index}"}),
    }
    responses = await asyncio.gather(*requests.values())
    return {name: r.status_code for name, r in zip(requests, responses)}


def _external_ids(index: int) -> dict[str, str]:
    return {"telegram": delivery_key(100000 + index, 7001, 100000 + index), "slack": f"Ev{index:06d}", "discord": f"14{index:017d}",
            "whatsapp": f"SM{index:032d}", "web": f"blns-{index}/blns-{index}"}


async def test_blns_every_string_through_every_entry_point_is_stored_once_and_never_5xx(env):
    client, services = env
    # Eight strings at a time: concurrent deliveries are the normal case for a webhook endpoint.
    gate = asyncio.Semaphore(8)

    async def one(i: int, text: str) -> dict[str, int]:
        async with gate:
            return await _post_everywhere(client, i, text)

    statuses = list(await asyncio.gather(*(one(i, text) for i, text in enumerate(STRINGS))))
    # A second delivery of a sample (platforms retry): still stored once.
    for i in range(0, len(STRINGS), 17):
        statuses[i] |= {f"{k}-again": v for k, v in (await _post_everywhere(client, i, STRINGS[i])).items()}

    server_errors = [(STRINGS[i], s) for i, s in enumerate(statuses) if any(v >= 500 for v in s.values())]
    assert server_errors == []
    counts = {channel: await inbound_counts(services, channel=channel) for channel in (*WEBHOOKS, "web")}
    for i, text in enumerate(STRINGS):
        ids = _external_ids(i)
        for channel in WEBHOOKS:
            assert statuses[i][channel] == 200, (channel, text)
            stored = counts[channel].get(ids[channel], 0)
            # A text with visible content is a message; an empty one may be stored or ignored, never twice.
            assert stored == 1 if text.strip() else stored <= 1, (channel, text, stored)
        web = statuses[i]["web"]
        if not is_blank(text):  # the web chat refuses what shows nothing (zero-width characters too)
            assert web in (200, 202), (text, web)
            assert counts["web"].get(ids["web"], 0) == 1, text
        else:
            assert web == 422 and counts["web"].get(ids["web"], 0) == 0  # refused clearly, nothing stored
    assert (await client.get("/healthz")).status_code == 200  # and the service kept running


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord"])
@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2, 3]", b'"a string"', b"\xff\xfe\x00garbage", b"null"],
                         ids=["truncated", "empty", "array", "string", "binary", "null"])
async def test_webhook_malformed_json_is_400_and_stores_nothing(env, channel, body):
    client, services = env
    before = await inbound_counts(services, channel=channel)
    signed = {"telegram": telegram_request, "slack": slack_request, "discord": discord_request}[channel](body)
    response = await client.post(WEBHOOKS[channel], **signed)
    # Slack's verifier signs text, so a non-UTF-8 body fails verification (401) before parsing (400).
    assert response.status_code in ((400, 401) if body.startswith(b"\xff") and channel == "slack" else (400,))
    assert response.json()["error"]
    assert await inbound_counts(services, channel=channel) == before


@pytest.mark.parametrize("body", [b"MessageSid=SMx&%%%&=&&From", b"\xff\xfe\xfd=\x80", b"Body=hello+without+sid", b""],
                         ids=["mangled", "not-utf8", "no-sid", "empty"])
async def test_whatsapp_malformed_form_is_400_and_stores_nothing(env, body):
    from urllib.parse import parse_qsl

    from twilio.request_validator import RequestValidator

    from tests.reliability.conftest import WA_PUBLIC_URL

    client, services = env
    before = await inbound_counts(services, channel="whatsapp")
    try:
        params = dict(parse_qsl(body.decode(), keep_blank_values=True))
    except UnicodeDecodeError:
        params = {}
    signature = RequestValidator(WA_TOKEN).compute_signature(WA_PUBLIC_URL + WA, params)
    response = await client.post(WA, content=body, headers={
        "content-type": "application/x-www-form-urlencoded", "X-Twilio-Signature": signature})
    assert 400 <= response.status_code < 500
    assert await inbound_counts(services, channel="whatsapp") == before


@pytest.mark.parametrize("body, content_type", [
    (b"{not json", "application/json"),
    (b"session_id=a&text=hello", "application/x-www-form-urlencoded"),
    (b'{"session_id": "a", "text": "hi"}', "text/plain"),
    (b'{"session_id": 12, "text": ["x"]}', "application/json"),
    (b'{"session_id": "../../etc/passwd", "text": "hi"}', "application/json"),
    (b'{"session_id": "nul", "text": "a\\u0000b"}', "application/json"),
], ids=["malformed", "form", "text-plain", "wrong-types", "bad-session", "nul"])
async def test_webchat_malformed_or_wrong_type_is_4xx_and_stores_nothing(env, body, content_type):
    client, services = env
    before = await inbound_counts(services, channel="web")
    response = await client.post(WEB, content=body, headers={"content-type": content_type})
    assert 400 <= response.status_code < 500 and response.json()["error"]
    assert await inbound_counts(services, channel="web") == before


async def test_webhook_wrong_content_type_is_4xx_and_stores_nothing(env):
    client, services = env
    form = b"update_id=1&message=hello"
    before = {channel: await inbound_counts(services, channel=channel) for channel in WEBHOOKS}
    tg_form = telegram_request(form)
    tg_form["headers"]["content-type"] = "application/x-www-form-urlencoded"
    wa_json = whatsapp_request({})  # signed over an empty form; the body is JSON instead
    wa_json["content"] = json.dumps(whatsapp_form("SMjson", "hi")).encode()
    responses = [
        await client.post(TG, **tg_form),
        await client.post(SLACK, **slack_request(b"--b\r\ncontent\r\n--b--", content_type="multipart/form-data")),
        await client.post(DISCORD, **discord_request(form, content_type="application/x-www-form-urlencoded")),
        await client.post(WA, **wa_json),
    ]
    for response in responses:
        assert 400 <= response.status_code < 500, response.text
    for channel in WEBHOOKS:
        assert await inbound_counts(services, channel=channel) == before[channel]


class _Counting:
    """A request body that records how much of it the server pulled."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.pulled = total, chunk, 0

    async def __aiter__(self):
        while self.pulled < self.total:
            self.pulled += self.chunk
            yield b"x" * self.chunk


# Slack's interactivity URL (the operator channel's buttons) is a webhook too, read before its signature.
@pytest.mark.parametrize("path", [*WEBHOOKS.values(), "/webhooks/acme/slack/actions"])
async def test_webhook_oversized_body_is_413_before_it_is_read_whole(env, path):
    client, services = env
    # Declared length over the cap: refused on the header alone.
    big = b"{" + b" " * 1_100_000 + b"}"
    declared = await client.post(path, content=big, headers={"content-type": "application/json"})
    assert declared.status_code == 413
    # Chunked (no length): refused once the cap is passed, long before the 20 MB end.
    body = _Counting(20 * 1024 * 1024)
    streamed = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert body.pulled <= 2 * 1024 * 1024


async def test_webchat_oversized_body_is_413_before_it_is_read_whole(env):
    client, services = env
    before = await inbound_counts(services, channel="web")
    text = "x" * 1_200_000
    declared = await client.post(WEB, json={"session_id": "big-1", "text": text})
    assert declared.status_code == 413
    body = _Counting(20 * 1024 * 1024)
    streamed = await client.post(WEB, content=body, headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    assert body.pulled <= 2 * 1024 * 1024
    assert await inbound_counts(services, channel="web") == before


async def test_webhook_unknown_update_and_event_types_are_acknowledged_and_not_stored(env):
    client, services = env
    tg_before = await inbound_counts(services, channel="telegram")
    tg = await client.post(TG, **telegram_request(json.dumps(
        {"update_id": 990001, "business_connection_v99": {"id": "x", "whatever": [1, 2]}}).encode()))
    tg_no_id = await client.post(TG, **telegram_request(b'{"message": {"text": "no update id"}}'))
    slack_before = await inbound_counts(services, channel="slack")
    slack_event_kind = await client.post(SLACK, **slack_request(json.dumps({
        "type": "event_callback", "event_id": "EvUNKNOWN1", "team_id": "T111",
        "event": {"type": "hologram_projected", "channel": "D0RELIAB", "user": "U0CUSTOMER"}}).encode()))
    slack_envelope = await client.post(SLACK, **slack_request(b'{"type": "app_rate_limited_v42", "team_id": "T1"}'))
    discord_before = await inbound_counts(services, channel="discord")
    discord = await client.post(DISCORD, **discord_request(json.dumps(
        {"id": "1499999999999999999", "type": 99, "token": "t", "version": 1}).encode()))
    wa_before = await inbound_counts(services, channel="whatsapp")
    wa = await client.post(WA, **whatsapp_request({"MessageSid": "SMunknown", "MessageStatus": "teleported",
                                                   "AccountSid": WA_SID}))
    for response in (tg, slack_event_kind, slack_envelope, discord, wa):
        assert response.status_code in (200, 400), response.text  # acknowledged, or clearly refused
    assert tg.status_code == 200 and slack_event_kind.status_code == 200  # platforms must not retry these
    assert 400 <= tg_no_id.status_code < 500 or tg_no_id.status_code == 200
    assert await inbound_counts(services, channel="telegram") == tg_before
    assert await inbound_counts(services, channel="slack") == slack_before
    assert await inbound_counts(services, channel="discord") == discord_before
    assert await inbound_counts(services, channel="whatsapp") == wa_before


async def test_whatsapp_twilio_nul_byte_fixture_is_stored_once_without_the_nul(env):
    client, services = env
    form = json.loads((FIXTURES / "payloads/whatsapp/twilio_chatwoot/null_bytes_in_body.json").read_text())
    sid = "SMnulbytes0001"  # each copy of the id, as Twilio sends them
    form = {**form, "MessageSid": sid, "SmsMessageSid": sid, "SmsSid": sid, "From": "whatsapp:" + form["From"],
            "AccountSid": WA_SID}
    for _ in range(2):
        response = await client.post(WA, **whatsapp_request(form))
        assert response.status_code == 200
    assert await count_by_external_id(services, channel="whatsapp", external_id="SMnulbytes0001") == 1
    texts = await _texts(services, "whatsapp", "SMnulbytes0001")
    assert texts == ["remove null bytes"]


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord"])
async def test_webhook_nul_byte_in_json_text_is_never_5xx_and_stored_at_most_once(env, channel):
    client, services = env
    text = "before\u0000after"
    request, external_id = _signed_text(channel, text, 1)
    for _ in range(2):
        response = await client.post(WEBHOOKS[channel], **request)
        assert response.status_code < 500
    stored = await count_by_external_id(services, channel=channel, external_id=external_id)
    assert stored == (1 if response.status_code == 200 else 0)
    if stored:
        assert all("\x00" not in t for t in await _texts(services, channel, external_id))


def _signed_text(channel: str, text: str, n: int) -> tuple[dict, str]:
    """A validly signed text message on a webhook channel, as request kwargs, and its external id."""
    return {
        "telegram": (telegram_request(telegram_update(880000 + n, text)), delivery_key(880000 + n, 7001, 880000 + n)),
        "slack": (slack_request(slack_event(f"EvTXT{n:05d}", text)), f"EvTXT{n:05d}"),
        "discord": (discord_request(discord_ask(f"14880000000000{n:05d}", text)), f"14880000000000{n:05d}"),
    }[channel]


async def _texts(services, channel: str, external_id: str) -> list[str]:
    from sqlalchemy import select

    from storage.models import Message

    async with services.sessions() as session:
        return list((await session.execute(select(Message.text).where(
            Message.channel == channel, Message.external_id == external_id))).scalars().all())


@pytest.mark.parametrize("channel", ["telegram", "slack", "discord", "web"])
async def test_a_lone_surrogate_is_stored_as_a_replacement_character_not_a_500(env, channel):
    """"\\ud800" is valid JSON but not UTF-8: the insert failed with a 500, and platforms retry a 5xx."""
    client, services = env
    text = "bad \ud800 surrogate"
    if channel == "web":
        request = {"content": json.dumps({"session_id": "surrogate", "text": text, "message_id": "s-1"}).encode(),
                   "headers": {"content-type": "application/json"}}
        external_id = "surrogate/s-1"
    else:
        request, external_id = _signed_text(channel, text, 101)
    response = await client.post(WEB if channel == "web" else WEBHOOKS[channel], **request)
    assert response.status_code in (200, 202), response.text
    assert await _texts(services, channel, external_id) == ["bad \ufffd surrogate"]


def _telegram_message(**changes) -> bytes:
    update = json.loads(telegram_update(880200, "hello"))
    update["message"].update(changes)
    return json.dumps(update).encode()


@pytest.mark.parametrize(("channel", "body"), [
    ("telegram", b'{"update_id": 880201, "message": "hello"}'),
    ("telegram", _telegram_message(text=12345)),
    ("telegram", _telegram_message(date=1e20)),
    ("telegram", _telegram_message(chat=5)),
    ("telegram", b"[" * 100_000 + b"]" * 100_000),
    ("slack", json.dumps({**json.loads(slack_event("EvSHAPE001", "hi")), "event": "hi"}).encode()),
    ("discord", json.dumps({k: v for k, v in json.loads(discord_ask("1", "hi")).items() if k != "id"}).encode()),
], ids=["tg-message-string", "tg-text-number", "tg-date-huge", "tg-chat-number", "tg-deep", "slack-event-string",
        "discord-no-id"])
async def test_a_signed_webhook_in_an_unexpected_shape_is_400_and_stores_nothing(env, channel, body):
    client, services = env
    before = await inbound_counts(services, channel=channel)
    signed = {"telegram": telegram_request, "slack": slack_request, "discord": discord_request}[channel](body)
    response = await client.post(WEBHOOKS[channel], **signed)
    assert response.status_code == 400 and "unexpected" in response.json()["error"], response.text
    assert await inbound_counts(services, channel=channel) == before
    # The connection stays usable, and so does the service.
    assert (await client.get("/healthz")).status_code == 200


async def test_web_session_ids_and_message_ids_never_collide_or_overflow(env):
    client, services = env
    carol = await client.post(WEB, json={"session_id": "carol", "text": "first question", "message_id": "x:1"})
    carol_x = await client.post(WEB, json={"session_id": "carol:x", "text": "second question", "message_id": "1"})
    assert carol.json()["message_id"] != carol_x.json()["message_id"]
    assert (await client.post(WEB, json={"session_id": "carol\n", "text": "hi"})).status_code == 422
    huge = 2**63
    assert (await client.get(f"/v1/bots/acme/sessions/carol/messages?after={huge}")).status_code == 422
    bad_id = await client.get("/v1/bots/acme/sessions/carol%0A/messages")  # the rule the chat route states too
    assert bad_id.status_code == 422 and "session_id must be 1-128 characters of letters" in bad_id.text


@pytest.mark.parametrize(("body", "content_type", "status", "says"), [
    (b"session_id=a&text=hello", "application/x-www-form-urlencoded", 415, "Content-Type: application/json"),
    (b'{"session_id": "a", "text": "hi"}', "text/plain", 415, "Content-Type: application/json"),
    (b"", "application/json", 422, "a JSON body is required"),
    (b'{"session_id": "a", "text": "\xff\xfe"}', "application/json", 400, "not UTF-8 text (byte 0xff at byte 29)"),
], ids=["form", "text-plain", "empty", "not-utf8"])
async def test_webchat_bad_bodies_say_what_is_wrong_in_the_usual_shape(env, body, content_type, status, says):
    client, _ = env
    response = await client.post(WEB, content=body, headers={"content-type": content_type})
    assert response.status_code == status and says in response.json()["error"], response.text
