"""Discord gateway messages and HTTP interactions → normalized InboundMessages, or a reason to ignore them.

Pure: no network. Works on plain MESSAGE_CREATE / interaction dicts; `payload_of` rebuilds that dict
from a discord.Message so the gateway path and the fixtures share one classifier.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime, timezone
from typing import Any

import discord

from channels.base import ImmediateResponse, WebhookResult
from gateway.models import (
    USE_ASK,
    Attachment,
    ConversationRef,
    InboundMessage,
    Sender,
    may_still_come,
    member_thread,
    utcnow,
)

# Channel types whose id is a thread's (public, private, announcement): a thread is one conversation.
_THREAD_TYPES = {10, 11, 12}
_ANSWERED_TYPES = {0: "default", 19: "reply"}  # every other message type is a system notice
_CROSSPOST_FLAG = 1 << 1
_ATTACHMENT_KINDS = {"image": "image", "audio": "audio", "video": "video"}
_UNREAD_CONTENT = ("poll", "message_snapshots")
"""What a message may carry besides text, attachments and stickers: a poll, and the copy of a forwarded message
(read for its text and files; only one of neither, a forwarded poll, say, is unread)."""
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)  # Discord's code: a mention in it shows as typed


def classify_gateway_message(
    payload: dict[str, Any], *, bot_user_id: str, respond_in_groups: str = "mention", in_thread: bool = False,
    bot_role_ids: tuple[str, ...] = (),
) -> InboundMessage | str:
    """A MESSAGE_CREATE message object → an InboundMessage, or the reason it is ignored. `bot_role_ids`: the
    bot's own integration role in this server, which Discord's @-completion often offers before the bot."""
    author = payload.get("author") or {}
    author_id = str(author.get("id", ""))
    kind = payload.get("type", 0)
    if author_id and author_id == bot_user_id:
        return "own message"
    if author.get("bot") or author.get("system"):
        return f"message from another bot ({author_id})"
    if payload.get("webhook_id"):
        return "message posted by a webhook"
    if kind not in _ANSWERED_TYPES:
        return f"system message type {kind}"
    if int(payload.get("flags") or 0) & _CROSSPOST_FLAG:
        return "crossposted announcement from another server"

    guild_id = str(payload.get("guild_id") or "")
    content = payload.get("content") or ""
    mentioned = _mentions_bot(payload, content, bot_user_id) or bool(
        set(map(str, payload.get("mention_roles") or ())) & set(bot_role_ids))
    reference = payload.get("message_reference") or {}
    replied = str(((payload.get("referenced_message") or {}).get("author") or {}).get("id", "")) == bot_user_id
    # Neither mentions nor replies to the bot: ignored, unless an operator is talking with this member
    # here (the inbox decides: `only_while_held`), whose answers would otherwise never reach them.
    unaddressed = bool(guild_id) and respond_in_groups == "mention" and not (mentioned or replied)

    text = _without_mentions(content, bot_user_id, bot_role_ids)
    # A forward's content is empty: what it forwards (text, files) is in its snapshots. Not read for a mention.
    forwarded = [snapshot.get("message") or {} for snapshot in payload.get("message_snapshots") or ()]
    text = "\n\n".join(part for part in (text.strip(), *(str(f.get("content") or "").strip() for f in forwarded))
                        if part)
    files = [*(payload.get("attachments") or ()), *(a for f in forwarded for a in f.get("attachments") or ())]
    attachments = tuple(_attachment(a, caption=text or None) for a in files)
    attachments += tuple(
        Attachment(kind="sticker", file_id=str(s.get("id")), caption=s.get("name"))
        for s in payload.get("sticker_items") or ()
    )
    if not text and not attachments and (unread := next((k for k in _UNREAD_CONTENT if payload.get(k)), None)):
        # Content of a kind not read here (a poll, a forwarded message): the customer sent something, so it gets
        # the text-only reply, as on Telegram, rather than the greeting an empty message gets.
        attachments = (Attachment(kind="other", caption=unread),)
    channel_id = str(payload.get("channel_id", ""))
    return InboundMessage(
        channel="discord",
        external_id=str(payload["id"]),
        conversation=conversation_ref(guild_id, channel_id, author_id, in_thread=in_thread),
        sender=Sender(
            external_id=author_id,
            display_name=author.get("global_name") or author.get("username") or "",
            is_bot=False,
        ),
        text=text,
        attachments=attachments,
        reply_to=str(reference["message_id"]) if kind == 19 and reference.get("message_id") else None,
        sent_at=_timestamp(payload.get("timestamp")),
        sequence=int(payload["id"]) if str(payload["id"]).isdigit() else None,  # a snowflake counts up
        raw=payload,
        only_while_held=unaddressed,
    )


def revision_of(message_id: int, channel_id: int, data: dict[str, Any] | None, *, event: str,
                bot_user_id: str, bot_role_ids: tuple[str, ...] = (), in_thread: bool = False) -> InboundMessage | str:
    """MESSAGE_UPDATE (`data`: the message as edited) or a deletion (`data` None) → a revision of the
    message it names (`InboundMessage.revises`), applied while that message waits for its answer; one
    already answered is not answered again, or every typo fix would be. A server message that now addresses
    the bot and was never stored (ignored for want of its @mention) is the question asked now, in the
    conversation it would have had (`in_thread`: its channel is a thread), and so is a recent DM never stored
    (its store failed). Or the reason it is ignored."""
    where = ConversationRef(channel="discord", chat=str(channel_id))
    if data is None:
        return InboundMessage(channel="discord", external_id=f"{event}:{message_id}", conversation=where,
                              sender=Sender(external_id=""), text="", revises=str(message_id), deleted=True)
    if "content" not in data or "author" not in data:
        return f"{event}: no content (an embed was added)"
    edited = classify_gateway_message(data, bot_user_id=bot_user_id, respond_in_groups="mention",
                                      bot_role_ids=bot_role_ids, in_thread=in_thread)
    if isinstance(edited, str):
        return f"{event}: {edited}"
    addressed = bool(data.get("guild_id")) and not edited.only_while_held
    # A DM's edit of a message never stored (every DM is) and sent recently, by its snowflake's date: its store failed
    # and the member edited it since. The edit is the question, as in a Telegram private chat or a Slack DM (its own
    # id, date and reply kept); an older DM's edit (sent before the bot had the chat, or purged) stays ignored.
    asked_in_dm = not data.get("guild_id") and may_still_come(discord.utils.snowflake_time(message_id))
    # Its id, which a message stored from it keeps (`meta.platform_message_id`), not its delivery key ("edit-of:…"):
    # the answer replies to it, and the member's later edits and deletion find it.
    # Ordered by its `edited_timestamp`, as Slack's and Telegram's edits by theirs: an older edit handled late (two
    # replicas' connections, a resumed session) does not put back the text the member replaced (`Inbox._revise`).
    return dataclasses.replace(edited, conversation=edited.conversation if addressed else where,
                               revises=str(message_id), only_while_held=False,
                               new_if_never_stored=addressed or asked_in_dm,
                               raw={**edited.raw, "message_id": str(message_id)},
                               revision=_edit_order(data.get("edited_timestamp")))


def _edit_order(edited_timestamp: Any) -> tuple[int, ...] | None:
    """An edit's place among its message's edits: the microseconds of its `edited_timestamp` (None when malformed)."""
    try:
        edited = datetime.fromisoformat(edited_timestamp) if isinstance(edited_timestamp, str) else None
    except ValueError:
        return None
    if edited is None or edited.tzinfo is None:
        return None
    since = edited - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (since.days * 86400 + since.seconds, since.microseconds)


def conversation_ref(guild_id: str, channel_id: str, author_id: str, *, in_thread: bool) -> ConversationRef:
    """Which conversation a message belongs to: a DM, a thread, or one member's questions in a server channel.

    A thread is a discussion people join, so it stays one conversation, as on Slack. In a shared channel
    each member has their own (`member_thread`); replies still go to the channel (`chat`)."""
    if not guild_id:
        return ConversationRef(channel="discord", chat=channel_id)
    if in_thread:
        return ConversationRef(channel="discord", workspace=guild_id, chat=channel_id, thread=channel_id)
    return ConversationRef(channel="discord", workspace=guild_id, chat=channel_id, thread=member_thread(author_id))


def parse_interaction(body: dict[str, Any], *, use_ask: str = USE_ASK) -> WebhookResult:
    """A verified HTTP interaction → PING pong, an `/ask` question (deferred), or a polite refusal
    (`use_ask`, the bot's `replies.use_ask`)."""
    kind = body.get("type")
    if kind == 1:
        return WebhookResult(response=_interaction_response({"type": 1}), ignored=("PING",))
    data = body.get("data") or {}
    if kind == 2 and data.get("name") == "ask" and data.get("type", 1) == 1:
        # `question` is a string option; any other value (an object, a number) is no question, not its repr.
        question = next((o["value"] for o in data.get("options") or ()
                         if o.get("name") == "question" and isinstance(o.get("value"), str)), "")
        user = (body.get("member") or {}).get("user") or body.get("user") or {}
        channel = body.get("channel") or {}
        message = InboundMessage(
            channel="discord",
            external_id=str(body["id"]),
            conversation=conversation_ref(
                str(body.get("guild_id") or ""), str(body.get("channel_id") or channel.get("id") or ""),
                str(user.get("id", "")), in_thread=channel.get("type") in _THREAD_TYPES,
            ),
            sender=Sender(
                external_id=str(user.get("id", "")), display_name=user.get("global_name") or user.get("username") or ""
            ),
            text=question.strip(),
            raw=body,
            needs_reply=True,  # "thinking…" until a follow-up comes, and an error after 15 minutes
        )
        return WebhookResult(messages=(message,), response=_interaction_response({"type": 5}))
    if kind == 4:  # autocomplete must be answered synchronously; we offer no suggestions
        return WebhookResult(
            response=_interaction_response({"type": 8, "data": {"choices": []}}), ignored=("autocomplete",)
        )
    name = data.get("name") or data.get("custom_id") or "?"
    refusal = {"type": 4, "data": {"content": use_ask, "flags": 64, "allowed_mentions": {"parse": []}}}
    return WebhookResult(
        response=_interaction_response(refusal), ignored=(f"interaction type {kind} ({name}) is not /ask",)
    )


def _interaction_response(body: dict[str, Any]) -> ImmediateResponse:
    return ImmediateResponse(body=json.dumps(body).encode())


def _mentions_bot(payload: dict[str, Any], content: str, bot_user_id: str) -> bool:
    if not bot_user_id:
        return False
    if any(str(m.get("id")) == bot_user_id for m in payload.get("mentions") or ()):
        return True
    return f"<@{bot_user_id}>" in content or f"<@!{bot_user_id}>" in content


def _without_mentions(content: str, bot_user_id: str, bot_role_ids: tuple[str, ...]) -> str:
    """`content` without the bot's mentions: one space where one stood between words ("hey <@bot> what" was
    "hey  what"), none at a line's edge; code (which shows a mention as typed) and the rest as written."""
    marks = [rf"<@!?{re.escape(bot_user_id)}>"] if bot_user_id else []
    marks += [re.escape(f"<@&{role_id}>") for role_id in bot_role_ids]
    if not marks:
        return content
    mention = "(?:" + "|".join(marks) + ")"
    pattern = re.compile(rf"{_CODE.pattern}|(?P<mention>[^\S\n]*{mention}(?:[^\S\n]*{mention})*[^\S\n]*)", re.DOTALL)

    def drop(match: re.Match[str]) -> str:
        if match.group("mention") is None:
            return match.group(0)
        before, after = content[match.start() - 1:match.start()], content[match.end():match.end() + 1]
        return " " if before not in ("", "\n") and after not in ("", "\n") else ""

    return pattern.sub(drop, content)


def _attachment(item: dict[str, Any], *, caption: str | None) -> Attachment:
    mime = item.get("content_type")
    kind = _ATTACHMENT_KINDS.get((mime or "").split("/")[0], "document")
    return Attachment(kind=kind, url=item.get("url"), file_id=str(item.get("id")), mime_type=mime, caption=caption)


def _timestamp(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(value) if value else utcnow()
    except ValueError:
        return utcnow()


def payload_of(message: discord.Message) -> dict[str, Any]:
    """The MESSAGE_CREATE fields `classify_gateway_message` reads, rebuilt from a discord.Message."""
    guild_id = message.guild.id if message.guild else getattr(message.channel, "guild_id", None)
    reference = message.reference
    resolved = reference.resolved if reference else None
    payload: dict[str, Any] = {
        "id": str(message.id),
        "type": message.type.value,
        "flags": message.flags.value,
        "channel_id": str(message.channel.id),
        "content": message.content,
        "timestamp": message.created_at.isoformat(),
        "webhook_id": str(message.webhook_id) if message.webhook_id else None,
        "author": {
            "id": str(message.author.id),
            "username": message.author.name,
            "global_name": message.author.global_name,
            "bot": message.author.bot,
            "system": message.author.system,
        },
        "mentions": [{"id": str(user.id)} for user in message.mentions],
        "mention_roles": [str(role_id) for role_id in message.raw_role_mentions],
        "attachments": _attachments_of(message.attachments),
        "message_snapshots": [{"message": {"content": shot.content, "attachments": _attachments_of(shot.attachments)}}
                              for shot in message.message_snapshots],
        "sticker_items": [{"id": str(s.id), "name": s.name} for s in message.stickers],
    }
    if message.poll is not None:
        payload["poll"] = {"question": {"text": message.poll.question}}
    if guild_id:
        payload["guild_id"] = str(guild_id)
    if reference and reference.message_id:
        payload["message_reference"] = {"message_id": str(reference.message_id)}
    if isinstance(resolved, discord.Message):
        payload["referenced_message"] = {"author": {"id": str(resolved.author.id)}}
    return payload


def _attachments_of(attachments: list[discord.Attachment]) -> list[dict[str, Any]]:
    return [{"id": str(a.id), "url": a.url, "content_type": a.content_type, "filename": a.filename} for a in attachments]


def without_token(message: InboundMessage) -> InboundMessage:
    """A copy of `message` whose raw payload no longer holds the interaction token."""
    return dataclasses.replace(message, raw={k: v for k, v in message.raw.items() if k != "token"})
