"""Every third-party Slack payload (tests/fixtures/payloads/slack) through the real app: really signed,
posted as Slack posts it (JSON events, form-encoded interactive payloads and slash commands), then the
inbox, the worker and slack-sdk against the fake Web API. A message gets exactly one reply (in its
thread when it has one); everything else is acknowledged with 200, so Slack does not retry it, and
leaves nothing behind.

The fixtures share event ids and channels, so each event gets its own; everything else is as captured."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.fakes.slack_api import sign
from tests.gateway_channels.conftest import count_messages, settle, settled_chat, wait_until
from tests.gateway_channels.test_slack_e2e import SIGNING_SECRET, URL, env, posted_to  # noqa: F401 - `env` fixture

ASYNC = pytest.mark.asyncio(loop_scope="module")  # the module's one app (not on the sync table check)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "payloads" / "slack"
FIXTURE_FILES = sorted(p for p in FIXTURES.iterdir() if p.is_file())
IN_THREAD = "answered in its thread"
TOP_LEVEL = "answered at top level"
SILENT = "silent"
EXPECTED = {
    "url_verification.json": "challenge",
    "event_callback_app_mention.json": IN_THREAD,  # a mention in a channel starts a thread under it
    "event_callback_message_in_thread_im_assistant.json": IN_THREAD,  # a DM in a thread stays in it
    "event_callback_assistant_thread_started.json": SILENT,
    "event_callback_bot_message_via_response_url.json": SILENT,  # a bot's words
    "event_callback_member_joined_channel.json": SILENT,
    "event_callback_message_changed.json": SILENT,  # an edit of a message never seen
    "event_callback_message_deleted.json": SILENT,
    "event_callback_message_file_share.json": SILENT,  # posted by the installation's own user (U111)
    "event_callback_message_from_bot_user.json": SILENT,
    "event_callback_message_in_thread_channel.json": SILENT,  # a thread the bot was never asked in
    "event_callback_message_subtype_bot_message.json": SILENT,
    "event_callback_message_text_with_blocks.json": SILENT,  # the bot's own message (W111)
    "event_callback_message_thread_broadcast.json": SILENT,  # a thread the bot was never asked in
    "event_callback_message_user.json": SILENT,  # the bot's own message (W111)
    "event_callback_reaction_added.json": SILENT,
    "interactive_block_actions.json": SILENT,
    "interactive_global_shortcut.json": SILENT,
    "interactive_message_action.json": SILENT,
    "interactive_view_submission.json": SILENT,
    "slash_command.form-urlencoded.txt": SILENT,
    "slash_command.parsed.json": SILENT,
}


def _body(path: Path, index: int) -> tuple[bytes, str, dict | None]:
    """(body, content type, event) as Slack posts this fixture; an event gets an id and channel of its own."""
    if path.name.startswith("interactive_"):
        return urlencode({"payload": path.read_text()}).encode(), "application/x-www-form-urlencoded", None
    if path.name == "slash_command.parsed.json":
        return urlencode(json.loads(path.read_text())).encode(), "application/x-www-form-urlencoded", None
    if path.suffix == ".txt":
        return path.read_bytes().strip(), "application/x-www-form-urlencoded", None
    body = json.loads(path.read_text())
    event = body.get("event")
    if event is not None:
        body["event_id"] = f"EvFixture{index:03d}"
        if "channel" in event:
            event["channel"] = f"{event['channel']}FIX{index:03d}"
    return json.dumps(body).encode(), "application/json", event


def test_slack_fixture_table_covers_every_fixture_file() -> None:
    assert {p.name for p in FIXTURE_FILES} == set(EXPECTED)


@ASYNC
@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
async def test_slack_every_fixture_is_answered_or_acknowledged(env, path: Path):  # noqa: F811 - the fixture
    client, services, fake = env
    raw, content_type, event = _body(path, FIXTURE_FILES.index(path))
    before = await count_messages(services, channel="slack")
    response = await client.post(URL, content=raw, headers={"content-type": content_type,
                                                            **sign(raw, secret=SIGNING_SECRET)})
    assert response.status_code == 200, response.text
    expected = EXPECTED[path.name]
    if expected == "challenge":
        assert response.json() == {"challenge": json.loads(raw)["challenge"]}
        return
    channel = (event or {}).get("channel")
    if expected == SILENT:
        await settle(services=services)
        assert await count_messages(services, channel="slack") == before
        assert channel is None or posted_to(fake, channel) == []
        return
    [reply] = await wait_until(lambda: posted_to(fake, channel), what=f"the reply to {path.name}")
    inbound, out = await settled_chat(services, channel="slack", chat=channel)
    assert (inbound.status, out.status) == ("done", "sent") and reply["text"]
    assert reply.get("thread_ts") == (event.get("thread_ts") or event["ts"])
    await settle(services=services)
    assert len(posted_to(fake, channel)) == 1


@ASYNC
@pytest.mark.parametrize("name", ["event_callback_message_in_thread_channel.json",
                                  "event_callback_message_thread_broadcast.json"])
async def test_slack_thread_fixture_is_answered_in_the_thread_the_bot_was_asked_in(env, name: str):  # noqa: F811
    """The same captured thread replies, in a thread where a member asked the bot first (an app_mention at
    the thread's root): answered, without a mention, in that thread."""
    client, services, fake = env
    index = 900 + sorted(EXPECTED).index(name)
    body = json.loads((FIXTURES / name).read_text())
    event = body["event"]
    channel = event["channel"] = f"C{index}THREAD"
    body["event_id"] = f"EvThread{index}"
    mention = {"type": "event_callback", "team_id": "T111", "api_app_id": "A111", "event_id": f"EvRoot{index}",
               "event_time": 1, "authorizations": body["authorizations"],
               "event": {"type": "app_mention", "channel": channel, "user": "W333", "ts": event["thread_ts"],
                         "text": f"<@{body['authorizations'][0]['user_id']}> hello", "team": "T111"}}
    for payload in (mention, body):
        raw = json.dumps(payload).encode()
        response = await client.post(URL, content=raw, headers={"content-type": "application/json",
                                                                **sign(raw, secret=SIGNING_SECRET)})
        assert response.status_code == 200
        await wait_until(lambda n=len(posted_to(fake, channel)): len(posted_to(fake, channel)) > n,
                         what=f"the answer to {payload['event_id']}")
    first, second = posted_to(fake, channel)
    assert first["thread_ts"] == second["thread_ts"] == event["thread_ts"]
    await settle(services=services)
    assert len(posted_to(fake, channel)) == 2
