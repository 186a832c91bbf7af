"""An operator's edit of a long reply relayed to a member of a Telegram group, whose first part starts with a
mention of that member: the edit is split as the send was, so each message the member got takes its part."""

from __future__ import annotations

import pytest

from tests.gateway_channels.conftest import wait_until
from tests.gateway_channels.test_telegram_e2e import TOKEN as TG_TOKEN
from tests.gateway_channels.test_telegram_e2e import update as tg_update
from tests.operators.test_slack_operator_edits import _post_event, _revision, _telegram_customer, _told

pytestmark = pytest.mark.asyncio(loop_scope="module")

SENTENCES = " ".join(f"Step {i} of your refund is done 🙏." for i in range(130))


@pytest.mark.parametrize(("first_name", "last_name", "length", "parts"), [
    ("Ann", None, 3966, 1),  # 4,082 UTF-16 units and "Ann ": one message
    ("Ann-Kathrin", "🌸" * 20, 3938, 2),  # 4,053 units, and a mention of 53 (33 characters)
])
async def test_an_operators_edit_of_a_long_reply_in_a_telegram_group_replaces_the_parts_it_was_sent_in(
        tmp_path, first_name, last_name, length, parts):
    """The edit left a fixed 24 characters for the mention (or the name's characters and a space), while the send
    left the mention's own UTF-16 length: a reply of one message for "Ann" was two parts to the edit, and a
    reply split in two for a name of emoji one part, so the edit was refused ("does not fit") either way."""
    member = {"id": 5550001, "is_bot": False, "first_name": first_name} | ({"last_name": last_name} if last_name else {})
    name = " ".join(p for p in (first_name, last_name) if p)
    earlier = {"message_id": 70, "date": 1700000000, "chat": {"id": -1001012, "type": "supergroup"},
               "from": {"id": int(TG_TOKEN.split(":")[0]), "is_bot": True, "first_name": "Support"}, "text": "Ask me."}
    asked = tg_update(3, -1001012, "I need to talk to a human", chat_type="supergroup", message_id=78,
                      reply_to_message=earlier, **{"from": member})
    reply_text = SENTENCES[:length].rsplit(" ", 1)[0]
    async with _telegram_customer(tmp_path, asked, reply_text) as (client, slack, telegram, thread_ts, ts, reply):
        sent = [m for m in telegram.sent if str(m.message_id) in reply.provider_ids]
        assert len(sent) == parts and sent[0].text.startswith(f"{name} Step 0 of your refund is done")

        new_text = reply_text.replace("Step", "Part")  # of the same length, in every part
        edited = _revision("message_changed", thread_ts, ts, reply_text, "EvTgLongEdit", new_text=new_text)
        assert (await _post_event(client, edited)).status_code == 200
        await wait_until(lambda: all(m.edits for m in sent) or _told(slack, thread_ts), what="the edit or a word")
        assert not _told(slack, thread_ts)
        assert " ".join(m.text for m in sent) == f"{name} {new_text}"
        assert sent[0].entities[0]["type"] == "text_mention" and sent[0].entities[0]["user"]["id"] == 5550001
