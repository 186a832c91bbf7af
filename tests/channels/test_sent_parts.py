"""SentParts: what a part-way send delivered is resumed after, by memory or by the outbox's record."""

from dataclasses import replace

import pytest

from channels.sent_parts import SentParts
from gateway.errors import ChannelSendError
from gateway.models import ConversationRef, OutboundMessage

MESSAGE = OutboundMessage(conversation=ConversationRef(channel="telegram", chat="42"), text="a long reply",
                          idempotency_key="m7")


def fail_after(parts: SentParts, message: OutboundMessage, ids: list[str]) -> ChannelSendError:
    with pytest.raises(ChannelSendError) as info, parts.resume(message) as sent:
        sent.extend(ids)
        raise ChannelSendError("timeout")
    return info.value


def test_a_failure_carries_what_landed_and_the_retry_resumes_after_it():
    parts = SentParts()
    error = fail_after(parts, MESSAGE, ["1", "2"])
    assert error.sent_ids == ["1", "2"]  # type: ignore[attr-defined]
    with parts.resume(MESSAGE) as sent:
        assert sent == ["1", "2"]
        sent.append("3")
    with parts.resume(MESSAGE) as sent:  # finished: nothing is remembered any more
        assert sent == []


def test_the_outbox_record_wins_when_it_holds_more_parts():
    parts = SentParts()
    fail_after(parts, MESSAGE, ["1"])
    with parts.resume(replace(MESSAGE, delivered_parts=("1", "2", "3"))) as sent:
        assert sent == ["1", "2", "3"]
    with parts.resume(replace(MESSAGE, delivered_parts=("9",))) as sent:  # a new process: only the outbox knows
        assert sent == ["9"]


def test_another_reply_does_not_resume_this_ones_parts():
    parts = SentParts()
    fail_after(parts, MESSAGE, ["1"])
    for other in (replace(MESSAGE, text="another reply"), replace(MESSAGE, idempotency_key="m8"),
                  replace(MESSAGE, conversation=ConversationRef(channel="telegram", chat="43"))):
        with parts.resume(other) as sent:
            assert sent == []


def test_memory_is_bounded_and_forgets_the_oldest_first():
    parts = SentParts(limit=2)
    for n in range(3):
        fail_after(parts, replace(MESSAGE, idempotency_key=f"m{n}"), [str(n)])
    assert len(parts) == 2
    with parts.resume(replace(MESSAGE, idempotency_key="m0")) as sent:
        assert sent == []
    with parts.resume(replace(MESSAGE, idempotency_key="m2")) as sent:
        assert sent == ["2"]
