"""Slack Events API `event_callback` envelopes → normalized InboundMessages, or a reason to ignore them.

Pure: no network. The rules for which events are answered are in `channels.slack`'s docstring. A
`message_changed` is an edit only when it comes from a member (`user`) and is one: a changed text, or
Slack's `edited` mark where no `previous_message` came to compare (a link preview, an unfurl, is neither).
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from channels.slack_render import slack_to_plain
from gateway.models import Attachment, ConversationRef, InboundMessage, Sender, may_still_come

_ANSWERED_SUBTYPES = {None, "file_share", "thread_broadcast", "me_message"}


def bot_ids(body: dict[str, Any], *, bot_user_id: str | None = None) -> set[str]:
    """The bot's own user ids, from the envelope's authorizations plus the one learned by auth.test."""
    ids = {a["user_id"] for a in body.get("authorizations") or () if a.get("is_bot") and a.get("user_id")}
    if not ids:
        ids = set(body.get("authed_users") or ())  # older envelopes list the bot user here
    if bot_user_id:
        ids.add(bot_user_id)
    return ids


def parse_event(
    body: dict[str, Any],
    *,
    bot_ids: set[str],
    respond_in_groups: str,
    channel_name: str = "slack",
    operator_channel: str | None = None,
) -> tuple[InboundMessage | None, str]:
    """One `event_callback` envelope → (message, "") or (None, why it is ignored)."""
    event = body.get("event") or {}
    kind, subtype = event.get("type"), event.get("subtype")
    if kind not in ("message", "app_mention"):
        return None, f"event type {kind!r} is not handled"
    if subtype in ("message_changed", "message_deleted"):
        return _revision(body, event, bot_ids=bot_ids, channel_name=channel_name, operator_channel=operator_channel,
                         every_message_answered=respond_in_groups == "always")
    if subtype == "bot_message" or event.get("bot_id"):
        return None, f"from a bot (bot_id={event.get('bot_id')})"
    if subtype not in _ANSWERED_SUBTYPES:
        return None, f"message subtype {subtype!r} is not handled"
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not user or not channel or not ts:
        return None, "event without user, channel or ts"
    if user in bot_ids:
        return None, "the bot's own message"
    is_dm = _in_dm(event, channel)
    raw_text = event.get("text") or ""
    mentions = {m for m in re.findall(r"<@([A-Z0-9]+)(?:\|[^>]*)?>", raw_text)}
    thread_ts = event.get("thread_ts")
    needs_conversation = False
    if kind == "app_mention":
        if is_dm:
            return None, "app_mention in a DM: the message.im event answers it"
        if respond_in_groups == "always":
            return None, "app_mention duplicates the channel message event (respond_in_groups=always)"
    elif not is_dm and respond_in_groups == "mention":
        if mentions & bot_ids:
            return None, "channel message mentioning the bot: answered from its app_mention event"
        if not thread_ts or thread_ts == ts:
            return None, "channel message without a mention of the bot"
        # A thread reply without a mention: answered under one of the bot's own posts, or in a thread the
        # bot already has a conversation in (it was asked there). `parent_user_id` is the thread's
        # author, the customer when the bot answered under their question, so only the store can tell
        # the bot's threads from others': the inbox stores such a reply only into an existing conversation.
        # A reply also sent to the channel (`thread_broadcast`) names the thread's author in its `root` instead.
        needs_conversation = (event.get("parent_user_id") or (event.get("root") or {}).get("user")) not in bot_ids
    text = _plain_text(raw_text, bot_ids)
    attachments = tuple(_attachment(f, text) for f in event.get("files") or ())
    if not text and not attachments and event.get("attachments"):
        # A message shared into the chat without a comment (`is_share`): something sent, which gets the
        # text-only reply, not the greeting an empty message gets.
        attachments = (Attachment(kind="other", caption="shared message"),)
    profile = event.get("user_profile") or {}
    # Slack sends an `app_mention` again, under a new event id, each time a message naming the bot is edited
    # (its `edited` mark says so): a typo fixed in a question already answered was answered twice. It is an edit
    # of that message, applied while it waits; a question at last when the bot's mention was added by it.
    edited = kind == "app_mention" and isinstance(event.get("edited"), dict)
    return (
        InboundMessage(
            channel=channel_name,
            external_id=str(body.get("event_id") or f"{channel}:{ts}"),
            conversation=ConversationRef(
                channel=channel_name,
                workspace=str(body.get("team_id") or event.get("team") or ""),
                chat=channel,
                thread=thread_ts or ("" if is_dm else ts),
            ),
            sender=Sender(
                external_id=user, display_name=profile.get("display_name") or profile.get("real_name") or ""
            ),
            text=text,
            attachments=attachments,
            reply_to=thread_ts if thread_ts and thread_ts != ts else None,
            sent_at=_sent_at(ts),
            raw={**body, "message_id": ts},  # kept as the message's platform id, which an edit names
            existing_conversation_only=needs_conversation,
            revises=ts if edited else None,
            new_if_never_stored=edited,
            revision=_edit_order(event["edited"]) if edited else None,
        ),
        "",
    )


def _plain_text(raw_text: str, bot_ids: set[str]) -> str:
    """A message's text as the pipeline reads it: mentions of the bot out, mrkdwn as plain text."""
    for bot_id in bot_ids:
        raw_text = re.sub(rf"<@{bot_id}(?:\|[^>]*)?>", "", raw_text)
    return slack_to_plain(raw_text).strip()


def _revision(body: dict[str, Any], event: dict[str, Any], *, bot_ids: set[str], channel_name: str,
              operator_channel: str | None, every_message_answered: bool) -> tuple[InboundMessage | None, str]:
    """`message_changed` / `message_deleted` → a revision of the message it names (`InboundMessage.revises`):
    applied while that message waits for its answer, ignored by the inbox once it was answered; in a thread
    of the operator channel, stored once it was answered, for the operator channel to pass the operator's
    edit on to the customer (`stored_if_answered`)."""
    # A deleted message that has thread replies is not removed: it becomes a "tombstone", announced as an edit.
    tombstone = (event.get("message") or {}).get("subtype") == "tombstone"
    deleted = event.get("subtype") == "message_deleted" or tombstone
    changed = (event.get("previous_message") if deleted else event.get("message")) or {}
    ts = (event.get("deleted_ts") or changed.get("ts")) if deleted else \
        changed.get("ts") or (event.get("previous_message") or {}).get("ts")
    channel = event.get("channel")
    if changed.get("bot_id") or changed.get("user") in bot_ids or changed.get("subtype") == "bot_message":
        return None, f"{event.get('subtype')}: a bot's message"
    if not ts or not channel:
        return None, f"{event.get('subtype')} without ts or channel"
    previous = event.get("previous_message") or {}
    if not deleted and not (changed.get("user") or previous.get("user")):
        # No member wrote it (an integration's post; Slack unfurling a bot's link embeds it without one): there is
        # nobody whose edit it could be, and nobody to answer.
        return None, "message_changed of a message without a user (an integration's, or its link preview)"
    if not deleted and "text" in previous and previous.get("text") == changed.get("text"):
        return None, "message_changed: its text did not change (a link preview, a reply count)"
    if not deleted and "text" not in previous and not changed.get("edited"):
        # Slack marks a person's edit `edited`; a link preview (an unfurl), a reply count or language metadata
        # added to the message is announced without it, and `previous_message` need not come to compare texts.
        return None, "message_changed: no edit (a link preview, a reply count), and no earlier text to compare"
    thread = changed.get("thread_ts") or previous.get("thread_ts")
    in_operator_thread = bool(operator_channel) and channel == operator_channel and bool(thread) and thread != ts
    # A DM's edit of a message never stored (every DM is) and sent recently, by its `ts`: the DM's delivery failed and
    # the edit came before Slack's retry of it. The edit is the question, stored with the DM's own `ts` and date, and
    # the retry is its duplicate, never answered on the text the customer replaced; an older DM's edit stays ignored.
    # So is a channel's, where every message is answered (`respond_in_groups: always`; not the operator channel's),
    # in the conversation the message opened: its thread's, or its own `ts`'s at top level.
    in_dm = _in_dm(event, channel)
    asked = in_dm or (every_message_answered and channel != operator_channel)
    reply_to = thread if thread and thread != ts else None
    as_question = {"raw": {"message_id": ts}, "sent_at": _sent_at(ts), "reply_to": reply_to} if asked else {}
    own_thread = reply_to or ("" if in_dm else str(ts))
    return InboundMessage(
        channel=channel_name,
        external_id=str(body.get("event_id") or f"{channel}:{ts}:{event.get('subtype')}"),
        conversation=ConversationRef(channel=channel_name, workspace=str(body.get("team_id") or ""), chat=channel,
                                     thread=own_thread if in_operator_thread or asked else ""),
        sender=Sender(external_id=str(changed.get("user") or previous.get("user") or "")),  # the member, either way
        text="" if deleted else _plain_text(changed.get("text") or "", bot_ids),
        revises=str(ts),
        deleted=deleted,
        # Ordered by its own `edited.ts`, as an edited `app_mention` is: an older edit handled late (a retry, two
        # webhooks at once) does not put back the text the member replaced (`Inbox._revise`).
        revision=_edit_order(changed["edited"]) if not deleted and isinstance(changed.get("edited"), dict) else None,
        stored_if_answered=in_operator_thread,
        existing_conversation_only=in_operator_thread,  # the thread's, where the operator wrote what they revise
        new_if_never_stored=asked and not deleted and may_still_come(as_question["sent_at"]),
        **as_question,
    ), ""


def _edit_order(edited: dict[str, Any]) -> tuple[int, ...] | None:
    """An edit's place among its message's edits: the microseconds of its `edited.ts` (None when malformed)."""
    seconds, _, fraction = str(edited.get("ts") or "").partition(".")
    if not seconds.isdigit() or not (fraction or "0").isdigit():
        return None
    return (int(seconds), int(fraction.ljust(6, "0")[:6] or 0))


def _attachment(file: dict[str, Any], caption: str) -> Attachment:
    mime = file.get("mimetype") or ""
    major = mime.split("/", 1)[0]
    kind = major if major in ("image", "audio", "video") else "document"
    return Attachment(
        kind=kind, url=file.get("url_private"), file_id=file.get("id"), mime_type=mime or None, caption=caption or None
    )


def _sent_at(ts: Any) -> datetime:
    """The event time from Slack's `ts`; now when it is malformed (a signed body must never cause a 500)."""
    try:
        return datetime.fromtimestamp(float(ts), tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return datetime.now(timezone.utc)


def _in_dm(event: dict[str, Any], channel: str) -> bool:
    """Whether the event is in a DM: its `channel_type`, or a DM's channel id (`D…`) where Slack left it out."""
    return (event.get("channel_type") or ("im" if channel.startswith("D") else "")) == "im"
