"""Slack's retry of an operator's edit or deletion (its first delivery taken for lost: the same event_id,
`X-Slack-Retry-Num`) changes nothing more for the customer, nor tells the operator again. The first delivery of
one made while the reply was relayed is applied to the waiting message and leaves no event stored, so the
retry was stored as a change of its own and passed on again."""

from __future__ import annotations

import json
import time

import pytest

from tests.fakes.slack_api import FakeSlack
from tests.gateway_channels.conftest import wait_until
from tests.operators.test_slack_operator import _event, _post_event, _thread_reply
from tests.operators.test_slack_operator_edits import (
    _claimed,
    _customer_app,
    _relayed,
    _retried,
    _revised_while_relayed,
    _revision,
    _told,
    _whatsapp_customer,
)
from tests.operators.test_slack_reply_failed import _escalated_and_claimed

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def _replied_and_revised_meanwhile(client, monkeypatch, thread_ts: str, ts: str, text: str,
                                         revision: bytes) -> None:
    """Sam's reply `text` (Slack's `ts`), and the `revision` of it that comes while it is relayed."""
    _revised_while_relayed(client, monkeypatch, revision)
    assert (await _post_event(client, _thread_reply(text, thread_ts, f"Ev{ts}", ts=ts))).status_code == 200


async def _handled_up_to_now(client, thread_ts: str) -> None:
    """The thread's messages are handled in order: once sam's next reply is relayed, all before it were."""
    ts = f"{time.time():.6f}"
    assert (await _post_event(client, _thread_reply("Anything else?", thread_ts, f"Ev{ts}", ts=ts))).status_code == 200
    await _relayed(client, "Anything else?")


async def test_slacks_retry_of_an_edit_of_a_whatsapp_reply_tells_the_operator_once_and_the_customer_nothing(
        tmp_path, monkeypatch):
    """Retried, an edit made while the reply was relayed told the operator a second time that WhatsApp cannot
    change a sent message; one made after it was a duplicate already."""
    async with _whatsapp_customer(tmp_path, "SMretry1", "+15550002222") as (client, slack, twilio):
        thread_ts, ts = await _claimed(client, slack), f"{time.time():.6f}"
        meanwhile = _revision("message_changed", thread_ts, ts, "Pick-up at 9.", "EvWaMeanwhile",
                              new_text="Pick-up at 10.")
        await _replied_and_revised_meanwhile(client, monkeypatch, thread_ts, ts, "Pick-up at 9.", meanwhile)
        await wait_until(lambda: _told(slack, thread_ts), what="the operator told")
        await _retried(client, meanwhile)
        later = _revision("message_changed", thread_ts, ts, "Pick-up at 10.", "EvWaLater", new_text="Pick-up at 11.")
        assert (await _post_event(client, later)).status_code == 200
        await _retried(client, later)
        await _handled_up_to_now(client, thread_ts)

        assert [r.form.get("Body") for r in twilio.delivered if "Pick-up" in r.form.get("Body", "")] == ["Pick-up at 9."]
        told = _told(slack, thread_ts)
        assert len(told) == 2 and all(t.startswith("WhatsApp cannot change a message once sent") for t in told)
        await _relayed(client, "Pick-up at 9.")  # what the customer has, as the console shows it


async def test_slacks_retry_of_an_edit_applied_to_the_edit_before_it_while_that_was_passed_on_changes_nothing(
        tmp_path, monkeypatch):
    """An edit that comes while the edit before it is passed on is applied to that edit's waiting message (the one
    `queue_edits_made_meanwhile` stored, holding the reply's Slack id too), where the inbox's check for a
    redelivery never looked: it read the reply's first message only, and Slack's retry was passed on again."""
    async with _whatsapp_customer(tmp_path, "SMretry2", "+15550002223") as (client, slack, twilio):
        thread_ts, ts = await _claimed(client, slack), f"{time.time():.6f}"
        meanwhile = _revision("message_changed", thread_ts, ts, "Pick-up at 9.", "EvWaFirst", new_text="Pick-up at 10.")
        later = _revision("message_changed", thread_ts, ts, "Pick-up at 10.", "EvWaNext", new_text="Pick-up at 11.")
        operator = client.services.slack_operator
        tell = operator._tell

        async def edited_again_meanwhile(*args, **kwargs):  # `meanwhile` is passed on: its message waits
            monkeypatch.setattr(operator, "_tell", tell)
            assert (await _post_event(client, later)).status_code == 200
            return await tell(*args, **kwargs)

        monkeypatch.setattr(operator, "_tell", edited_again_meanwhile)
        await _replied_and_revised_meanwhile(client, monkeypatch, thread_ts, ts, "Pick-up at 9.", meanwhile)
        await wait_until(lambda: len(_told(slack, thread_ts)) == 2, what="the operator told of both edits")
        await _retried(client, later)
        await _handled_up_to_now(client, thread_ts)

        assert [r.form.get("Body") for r in twilio.delivered if "Pick-up" in r.form.get("Body", "")] == ["Pick-up at 9."]
        assert len(_told(slack, thread_ts)) == 2


@pytest.mark.parametrize("deleted", [False, True], ids=["edit", "deletion"])
async def test_slacks_retry_of_a_change_of_a_web_chat_reply_tells_the_operator_once(tmp_path, monkeypatch, deleted):
    """Retried, a deletion made while the reply was relayed told the operator a second time that the web chat
    cannot take a message back."""
    slack = await FakeSlack.start()
    try:
        async with _customer_app(tmp_path, slack, {"web": {}}, {}) as client:
            asked = await client.post("/v1/bots/acme/chat", json={"session_id": "web-retry", "text": "I need to talk to a human"})
            assert asked.status_code == 200
            thread_ts, ts = await _claimed(client, slack), f"{time.time():.6f}"
            change = (_revision("message_deleted", thread_ts, ts, "Pick-up at 9.", "EvWebMeanwhile") if deleted else
                      _revision("message_changed", thread_ts, ts, "Pick-up at 9.", "EvWebMeanwhile", new_text="Pick-up at 10."))
            await _replied_and_revised_meanwhile(client, monkeypatch, thread_ts, ts, "Pick-up at 9.", change)
            await wait_until(lambda: _told(slack, thread_ts), what="the operator told")
            await _retried(client, change)
            await _handled_up_to_now(client, thread_ts)

            assert len(_told(slack, thread_ts)) == 1
            transcript = (await client.get("/v1/bots/acme/sessions/web-retry/messages")).json()["messages"]
            shown = [m["text"] for m in transcript if m["author"] == "operator"]
            assert shown == ["Pick-up at 9." if deleted else "Pick-up at 10.", "Anything else?"]
    finally:
        await slack.stop()


def _edited_at(body: bytes, edited_ts: str) -> bytes:
    """Slack's `message_changed` `body` as an edit made at `edited_ts` (its `edited.ts`, the edits' order)."""
    event = json.loads(body)
    event["event"]["message"]["edited"]["ts"] = edited_ts
    return _event(event["event"], event["event_id"])


@pytest.mark.parametrize("then", ["edit", "deletion"])
async def test_an_older_edit_passed_on_after_a_newer_change_does_not_put_its_text_back(client, slack, then):
    """Edits of a relayed reply were passed on in the order they were stored, not Slack's: an older edit handled
    late (its first delivery lost, Slack's retry after the next edit was stored; two webhooks at once) put the
    text the operator had replaced back on the customer's copy, or wrote it over the "—" of a reply they took back."""
    customer = f"DOLDER{then.upper()}"
    _, thread_ts = await _escalated_and_claimed(client, slack, customer)
    ts = f"{time.time():.6f}"
    assert (await _post_event(client, _thread_reply("Pick-up at 9.", thread_ts, f"Ev{customer}Reply", ts=ts))).status_code == 200
    [customer_ts] = (await _relayed(client, "Pick-up at 9.")).provider_ids
    edited = float(ts) + 10
    older = _edited_at(_revision("message_changed", thread_ts, ts, "Pick-up at 9.", f"Ev{customer}Older",
                                 new_text="Pick-up at 10."), f"{edited:.6f}")
    newer = (_edited_at(_revision("message_changed", thread_ts, ts, "Pick-up at 10.", f"Ev{customer}Newer",
                                  new_text="Pick-up at 11."), f"{edited + 5:.6f}") if then == "edit" else
             _revision("message_deleted", thread_ts, ts, "Pick-up at 10.", f"Ev{customer}Deleted"))

    def updates() -> list[str]:
        return [c.params["text"] for c in slack.calls_to("chat.update") if c.params.get("channel") == customer]

    assert (await _post_event(client, newer)).status_code == 200
    await wait_until(updates, what="the newer change passed on")
    assert (await _post_event(client, older)).status_code == 200
    # The thread's messages are handled in order: once the next reply is relayed, the older edit was handled too.
    next_ts = f"{time.time():.6f}"
    assert (await _post_event(client, _thread_reply(f"Anything else, {customer}?", thread_ts, f"Ev{next_ts}",
                                                    ts=next_ts))).status_code == 200
    await _relayed(client, f"Anything else, {customer}?")

    assert updates() == ["Pick-up at 11." if then == "edit" else "—"]
    assert [c.params["ts"] for c in slack.calls_to("chat.update") if c.params.get("channel") == customer] == [customer_ts]
    if then == "edit":
        await _relayed(client, "Pick-up at 11.")  # what the customer has, as the console shows it
    assert not _told(slack, thread_ts)
