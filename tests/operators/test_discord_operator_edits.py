"""An operator's edit or deletion, in the Slack thread, of a reply relayed to a Discord customer changes the
message the customer got, in place (PATCH on Discord's API); the generic path is tested for Slack, Telegram
and WhatsApp customers in test_slack_operator_edits.py."""

from __future__ import annotations

import contextlib

import pytest

from channels.discord import classify_gateway_message
from tests.fakes.discord_api import BOT_USER_ID, FakeDiscord
from tests.fakes.slack_api import FakeSlack
from tests.gateway_channels.conftest import wait_until
from tests.gateway_channels.test_discord_e2e import gateway_message
from tests.operators.test_slack_operator_edits import _customer_app, _operator_replied, _post_event, _revision, _told

pytestmark = pytest.mark.asyncio(loop_scope="module")

GUILD, CHANNEL, ANN = "1700000000000000041", "1600000000000000041", "1300000000000000041"


def _edits(fake: FakeDiscord, message_id: str) -> list[dict]:
    return [r.json for r in fake.received("PATCH", f"/channels/{CHANNEL}/messages/{message_id}")]


@contextlib.asynccontextmanager
async def _operator_answered(tmp_path, message_id: str, reply_text: str):
    """(client, fake Slack, fake Discord, thread ts, the reply's ts in Slack, the reply once sent): member Ann
    asked for a person in a server channel, and operator sam answered `reply_text`."""
    slack, fake = await FakeSlack.start(), await FakeDiscord().start()
    discord = {"discord": {"token": "${DISCORD_TOKEN}", "api_base": fake.api_base, "gateway_url": fake.gateway_url}}
    try:
        async with _customer_app(tmp_path, slack, discord, {"DISCORD_TOKEN": fake.token}) as client:
            payload = gateway_message(message_id, CHANNEL, f"<@{BOT_USER_ID}> I need to talk to a human",
                                      guild=GUILD, author=ANN)
            payload["mentions"] = [{"id": BOT_USER_ID}]
            await client.services._deliver_for("acme")(classify_gateway_message(payload, bot_user_id=BOT_USER_ID))
            thread_ts, ts, reply = await _operator_replied(client, slack, reply_text)
            yield client, slack, fake, thread_ts, ts, reply
    finally:
        await fake.close()
        await slack.stop()


async def test_an_operators_edit_and_deletion_reach_a_discord_member_in_place(tmp_path):
    """In a server channel the operator's reply starts with a mention of the member it is for: the edit keeps it."""
    async with _operator_answered(tmp_path, "1500000000000000041", "Your refund is 10 EUR.") as (
            client, slack, fake, thread_ts, ts, reply):
        [message_id] = reply.provider_ids
        assert fake.messages[message_id]["content"] == f"<@{ANN}> Your refund is 10 EUR."

        edited = _revision("message_changed", thread_ts, ts, "Your refund is 10 EUR.", "EvDcEdit",
                           new_text="Your refund is *12* EUR.")
        assert (await _post_event(client, edited)).status_code == 200
        [edit] = await wait_until(lambda: _edits(fake, message_id), what="the edit")
        assert fake.messages[message_id]["content"] == f"<@{ANN}> Your refund is **12** EUR."
        assert edit["allowed_mentions"]["parse"] == []  # an edit pings no one

        deleted = _revision("message_deleted", thread_ts, ts, "Your refund is *12* EUR.", "EvDcDelete")
        assert (await _post_event(client, deleted)).status_code == 200
        await wait_until(lambda: _edits(fake, message_id)[1:], what="the deletion")
        assert fake.messages[message_id]["content"] == "—"
        assert not _told(slack, thread_ts)


async def test_an_operators_edit_of_a_reply_sent_in_two_parts_for_its_mention_reaches_both(tmp_path):
    """The send split the reply with room for the member's mention; the edit split at the full limit, so a
    reply that took two messages for the mention's sake was one part to the edit, and never passed on."""
    long_reply = " ".join(f"Step {i} of your refund is done." for i in range(60)) + " " + "Thanks" * 13 + "!!"
    assert len(long_reply) == 1990
    async with _operator_answered(tmp_path, "1500000000000000042", long_reply) as (
            client, slack, fake, thread_ts, ts, reply):
        first, second = reply.provider_ids
        edited = _revision("message_changed", thread_ts, ts, long_reply, "EvDcLongEdit",
                           new_text=long_reply.replace("done", "paid"))
        assert (await _post_event(client, edited)).status_code == 200
        await wait_until(lambda: _edits(fake, first) and _edits(fake, second), what="both parts edited")
        assert fake.messages[first]["content"].startswith(f"<@{ANN}> Step 0 of your refund is paid.")
        assert all(len(fake.messages[m]["content"]) <= 2000 for m in (first, second))
        assert not _told(slack, thread_ts)


async def test_an_operators_edit_of_a_reply_whose_second_part_is_full_reaches_both_parts(tmp_path):
    """The send left room for the mention in the first part only; the edit left 24 characters in every part,
    so a reply whose second part took more than 1,976 characters was three parts to the edit, and never passed on."""
    long_reply = " ".join(f"Step {i} of your refund is done." for i in range(130))[:3960]
    async with _operator_answered(tmp_path, "1500000000000000043", long_reply) as (
            client, slack, fake, thread_ts, ts, reply):
        first, second = reply.provider_ids
        assert len(fake.messages[second]["content"]) > 1976
        new_text = long_reply.replace("done", "paid")
        edited = _revision("message_changed", thread_ts, ts, long_reply, "EvDcFullEdit", new_text=new_text)
        assert (await _post_event(client, edited)).status_code == 200
        await wait_until(lambda: (_edits(fake, first) and _edits(fake, second)) or _told(slack, thread_ts),
                         what="both parts edited, or a word to the operator")
        assert not _told(slack, thread_ts)
        assert fake.messages[first]["content"].startswith(f"<@{ANN}> Step 0 of your refund is paid.")
        assert " ".join(fake.messages[m]["content"] for m in (first, second)) == f"<@{ANN}> {new_text}"
