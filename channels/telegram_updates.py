"""Telegram Update dicts → normalized InboundMessages, or a reason to ignore them. Pure: no network.

Works on plain dicts (the webhook body, or an aiogram Update dumped by alias) rather than aiogram's
models, because real updates from older Bot API versions (no `file_unique_id`) fail aiogram's
validation yet are perfectly answerable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

import structlog

from channels.base import ImmediateResponse, WebhookResult
from channels.shared_content import contact, contact_line, location_line, place, with_shared
from gateway.errors import BadRequest
from gateway.models import Attachment, ConversationRef, InboundMessage, Sender, may_still_come, member_thread

log = structlog.get_logger("channels.telegram")

CHANNEL = "telegram"
ALLOWED_UPDATES = ("message", "edited_message", "channel_post", "edited_channel_post", "my_chat_member")
"""What we ask Telegram for (setWebhook / getUpdates); anything else is ignored if it arrives. Telegram sends
`my_chat_member` only when asked: without it, a bot removed from a group learned it from each reply's 403."""
_GONE, _PRESENT = frozenset({"left", "kicked"}), frozenset({"member", "administrator"})
"""The bot's own status in a chat (`ChatMember.status`): replies cannot reach it, or can again."""

GREETING_COMMANDS = frozenset({"start", "help"})
START_PAYLOAD_MAX = 64
"""Telegram's limit on a deep link's `start` parameter; longer text after /start was typed, and is cut."""
QUESTION_COMMANDS = frozenset({"ask"})
_MEDIA = (  # (field, kind); order matters: an animation also carries a `document` copy, a venue a `location`
    ("photo", "image"), ("animation", "video"), ("video", "video"), ("video_note", "video"),
    ("voice", "audio"), ("audio", "audio"), ("document", "document"), ("sticker", "sticker"),
    ("venue", "location"), ("location", "location"), ("contact", "contact"), ("poll", "other"),
    ("dice", "other"), ("game", "other"), ("invoice", "other"), ("story", "other"),
)


_SERVICE_FIELDS = frozenset({
    "new_chat_members", "left_chat_member", "new_chat_title", "new_chat_photo", "delete_chat_photo",
    "group_chat_created", "supergroup_chat_created", "channel_chat_created", "message_auto_delete_timer_changed",
    "migrate_to_chat_id", "migrate_from_chat_id", "pinned_message", "successful_payment", "refunded_payment",
    "users_shared", "chat_shared", "connected_website", "write_access_allowed", "passport_data",
    "proximity_alert_triggered", "boost_added", "chat_background_set", "forum_topic_created", "forum_topic_edited",
    "forum_topic_closed", "forum_topic_reopened", "general_forum_topic_hidden", "general_forum_topic_unhidden",
    "giveaway_created", "giveaway_winners", "giveaway_completed", "video_chat_scheduled", "video_chat_started",
    "video_chat_ended", "video_chat_participants_invited", "web_app_data", "gift", "unique_gift",
    "paid_message_price_changed", "checklist_tasks_done", "checklist_tasks_added", "direct_message_price_changed",
})
"""Message fields of Bot API service messages: events in the chat, nothing a customer asked."""
_ABOUT_FIELDS = frozenset({
    "message_id", "message_thread_id", "from", "sender_chat", "sender_boost_count", "sender_business_bot",
    "date", "business_connection_id", "chat", "forward_origin", "forward_from", "forward_from_chat",
    "forward_from_message_id", "forward_signature", "forward_sender_name", "forward_date", "is_topic_message",
    "is_automatic_forward", "reply_to_message", "external_reply", "quote", "reply_to_story", "via_bot",
    "edit_date", "has_protected_content", "is_from_offline", "media_group_id", "author_signature",
    "paid_star_count", "text", "entities", "link_preview_options", "effect_id", "caption", "caption_entities",
    "show_caption_above_media", "has_media_spoiler", "reply_markup", "direct_messages_topic", "reply_to_checklist_task_id",
    "is_paid_post", "suggested_post_info",
})
"""Message fields that describe a message rather than carry its content."""


class UsernameUnknown(Exception):
    """A command naming a bot (`/ask@name`), or a group message with an @mention (a `mention` entity) and nothing
    else addressing the bot (no reply to it, no bare /command, no `text_mention` of its id, no `respond_in_groups:
    always`), read before getMe told us our own username: whether it names us cannot be told yet. Read again later (the webhook answers
    503, which Telegram retries; polling fetches it again): ignored, it was lost for good, Telegram never sending it
    again; read at once, a mention of us was taken for one of someone else, and never answered."""

    def webhook_result(self) -> WebhookResult:
        """The webhook's answer: 503, so Telegram sends the update again."""
        body = json.dumps({"ok": False, "description": str(self)}).encode()
        return WebhookResult(ignored=(str(self),), response=ImmediateResponse(status=503, body=body))


def decode_update(body: bytes) -> dict[str, Any]:
    """The JSON object of a webhook body; BadRequest when it is not one."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"telegram webhook body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("telegram webhook body is not a JSON object")
    return data


def delivery_key(update_id: int, chat: Any, item: Any) -> str:
    """An update's `external_id`: its update id with its chat and message id (a membership change's date).
    The update id alone is no key: after a week without updates Telegram restarts the ids at a random
    number, and a new message under an id an old stored one had was dropped as its redelivery. A redelivery
    is the same update, so the same key; a chat's message ids never repeat."""
    return f"{update_id}:{chat}:{item}"


def _utf16_slice(text: str, offset: int, length: int) -> str:
    """Entity offsets are in UTF-16 units; slice accordingly."""
    raw = text.encode("utf-16-le")
    return raw[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def _strip_utf16(text: str, spans: list[tuple[int, int]]) -> str:
    raw = text.encode("utf-16-le")
    for offset, length in sorted(spans, reverse=True):
        raw = raw[: offset * 2] + raw[(offset + length) * 2 :]
    # The spaces a mention leaves go; the line breaks stay (the steps a customer listed were joined in one line).
    lines = raw.decode("utf-16-le", errors="replace").split("\n")
    return "\n".join(" ".join(line.split()) for line in lines).strip()


@dataclass
class _Addressing:
    """How a message addresses the bot: a command, @mentions of us, or a refusal reason."""

    text: str
    command: str | None = None
    mention_spans: list[tuple[int, int]] = field(default_factory=list)
    addressed: bool = False
    refusal: str | None = None
    unjudged_mention: str | None = None  # an @mention read before our username was known: maybe us


def _display_name(user: dict[str, Any]) -> str:
    name = " ".join(p for p in (user.get("first_name"), user.get("last_name")) if p)
    return name or user.get("title") or user.get("username") or str(user.get("id", ""))


def _replied_to(msg: dict[str, Any]) -> dict[str, Any]:
    """The message `msg` replies to, or {}. Telegram sends each message of a forum topic as a reply to the topic's
    creation (a service message, whose id is the topic's): that is no reply, and in a topic the bot opened it made
    every member's message one to the bot, answered without a mention."""
    reply = msg.get("reply_to_message")
    if not isinstance(reply, dict):
        return {}
    topic_root = "forum_topic_created" in reply or (
        bool(msg.get("is_topic_message")) and reply.get("message_id") == msg.get("message_thread_id"))
    return {} if topic_root else reply


def _shared(msg: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The lines and `meta.shared` values of a shared location, venue (a named place; it carries its
    `location` too) or contact (the person's name and number, which the customer chose to give us)."""
    venue = msg.get("venue") if isinstance(msg.get("venue"), dict) else None
    spot = (venue or {}).get("location") or msg.get("location")
    if isinstance(spot, dict):
        where = place(spot.get("latitude"), spot.get("longitude"),
                      label=(venue or {}).get("title"), address=(venue or {}).get("address"))
        if where is not None:
            return [location_line(where)], {"location": where}
    card = msg.get("contact")
    if isinstance(card, dict):
        who = contact(first_name=card.get("first_name"), last_name=card.get("last_name"),
                      phone=card.get("phone_number"), user_id=card.get("user_id"), vcard=card.get("vcard"))
        if who is not None:
            return [contact_line(who)], {"contact": who}
    return [], {}


class UpdateParser:
    """Parses updates for one bot. `username` is learned by the adapter's start() (getMe)."""

    def __init__(self, *, bot_id: int, username: str | None = None, respond_in_groups: str = "mention",
                 bot_name: str = "") -> None:
        self.bot_id = bot_id
        self.username = username
        self.respond_in_groups = respond_in_groups
        self.bot_name = bot_name

    def parse(self, update: dict[str, Any]) -> WebhookResult:
        """One update → at most one message, else the reason it is ignored."""
        update_id = update.get("update_id")
        if not isinstance(update_id, int):
            return WebhookResult(ignored=("not a Telegram update: no integer update_id",))
        kinds = [k for k in update if k != "update_id"]
        kind = kinds[0] if kinds else "empty"
        if kind in ("message", "channel_post"):
            return self._message(update_id, update[kind], update)
        if kind in ("edited_message", "edited_channel_post"):
            # Applied to the message while it waits for its answer (a typo fixed), else ignored by the inbox:
            # answering an edit would double-reply to a question already answered. In a group, an edit that
            # addresses the bot of a message never stored (ignored: no @mention) is the question asked now; in a
            # private chat, every message is stored, so one never stored and recent (by its `date`) is one whose
            # delivery failed, edited before Telegram resent it: the edit is the question, and the resend its
            # duplicate (never answered on the text the customer replaced). An older one's edit stays ignored.
            # A location is edited only as a live location moves (a message of its own holds no text to edit).
            # Edits are ordered by their `edit_date`, then update id: Telegram restarts update ids at random after
            # a week without updates, so a later edit may come under a lower one.
            edited = self._message(update_id, update[kind], update)
            moved = isinstance(update[kind].get("location"), dict)
            edit_date = update[kind].get("edit_date")
            revision = (edit_date if isinstance(edit_date, int) else 0, update_id)
            return replace(edited, messages=tuple(
                replace(m, external_id=f"{m.external_id}:{revision[0]}", revises=str(update[kind]["message_id"]),
                        only_while_held=False, revision=revision,
                        live_location=moved, new_if_never_stored=not moved and (
                            may_still_come(m.sent_at) if m.raw.get("chat_type") == "private" else not m.only_while_held))
                for m in edited.messages))
        if kind == "my_chat_member" and isinstance(update[kind], dict):
            return self._membership(update_id, update[kind])
        if kind == "callback_query":
            return WebhookResult(ignored=(f"update {update_id}: callback_query ignored (this bot sends no inline keyboards)",))
        return WebhookResult(ignored=(f"update {update_id}: unsupported update type {kind}",))

    def _message(self, update_id: int, msg: dict[str, Any], update: dict[str, Any]) -> WebhookResult:
        def ignore(reason: str) -> WebhookResult:
            return WebhookResult(ignored=(f"update {update_id}: {reason}",))

        chat = msg.get("chat") or {}
        if "id" not in chat or "message_id" not in msg:
            return ignore("message without chat or message_id")
        if msg.get("migrate_to_chat_id") or msg.get("migrate_from_chat_id"):
            return self._chat_move(update_id, msg)
        # A message sent on behalf of a chat (an anonymous group admin, a member posting as their channel)
        # carries a stand-in bot in `from` (@GroupAnonymousBot, @Channel_Bot): the person is `sender_chat`.
        user = msg.get("sender_chat") or msg.get("from") or chat
        if user.get("is_bot"):
            return ignore("our own message" if user.get("id") == self.bot_id else "message from another bot")

        text = msg.get("text") or msg.get("caption") or ""
        entities = msg.get("entities") or msg.get("caption_entities") or []
        attachments = self._attachments(msg)
        shared_lines, shared = _shared(msg)
        if not text and not attachments and not shared:
            content = [k for k in msg if k not in _ABOUT_FIELDS]
            service = next((k for k in content if k in _SERVICE_FIELDS), None)
            if service is not None or not content:
                return ignore(f"service message ({service or 'empty'}) ignored")
            # Content of a kind newer than this parser (paid media, a checklist...): the customer sent
            # something, so it gets the text-only reply rather than silence.
            attachments = (Attachment(kind="other", caption=content[0]),)

        raw: dict[str, Any] = {"update_id": update_id, "message_id": msg["message_id"], "chat_type": chat.get("type")}
        addr = self._addressing(text, entities)
        if addr.refusal:
            return ignore(addr.refusal)
        is_group = chat.get("type") != "private"
        reply = _replied_to(msg)
        replied_to_us = (reply.get("from") or {}).get("id") == self.bot_id
        # Not addressed to the bot: ignored, unless an operator is talking with this member here (the
        # inbox decides: `only_while_held`), whose answers would otherwise never reach them.
        # A channel is a broadcast, its posts the admins' news, not questions: `always` does not reach them,
        # or the bot answered every post in public (and two such bots in one channel answered each other).
        # Nor their automatic copies in the channel's discussion group (`is_automatic_forward`): a member
        # posting as their own channel there is a customer, so `sender_chat` alone does not tell.
        news = chat.get("type") == "channel" or bool(msg.get("is_automatic_forward"))
        everything = self.respond_in_groups == "always" and not news
        unaddressed = is_group and not everything and not (addr.addressed or replied_to_us)
        if unaddressed and addr.unjudged_mention:  # addressed anyway (a reply to us, a bare /command, a text_mention
            # of our id, `always`), or a private chat: the @mention, maybe of us, is left in its words unstripped
            raise UsernameUnknown(f"message mentions {addr.unjudged_mention}: our username is not known yet")
        text = addr.text
        if addr.command:
            raw["command"] = addr.command
            if addr.command == "start" and text:
                # A deep link (t.me/<bot>?start=order123): where the customer came from, for an operator or
                # a tool to see; the greeting answers it, and it is no question for search or the model.
                raw["start_payload"], text = text[:START_PAYLOAD_MAX], ""
        elif is_group and addr.mention_spans:
            text = _strip_utf16(text, addr.mention_spans)
        if msg.get("forward_origin") or msg.get("forward_from") or msg.get("forward_date"):
            raw["forwarded"] = True
        if shared:
            # A location, a venue or a contact is something said: a line the pipeline answers and operators
            # read ("I can only read text" answered it), its values in `meta.shared`, as on WhatsApp.
            text, raw["shared"] = with_shared(text, after=shared_lines), shared

        if msg.get("is_topic_message") and msg.get("message_thread_id"):
            thread = str(msg["message_thread_id"])  # a forum topic is one conversation, for all in it
        else:
            thread = member_thread(str(user.get("id", ""))) if is_group else ""
        sent_at = datetime.fromtimestamp(int(msg.get("date") or 0), tz=timezone.utc)
        inbound = InboundMessage(
            channel=CHANNEL,
            external_id=delivery_key(update_id, chat["id"], msg["message_id"]),
            conversation=ConversationRef(channel=CHANNEL, chat=str(chat["id"]), thread=thread),
            sender=Sender(external_id=str(user.get("id", "")), display_name=_display_name(user), is_bot=False),
            text=text,
            attachments=attachments,
            reply_to=str(reply["message_id"]) if reply.get("message_id") else None,
            sent_at=sent_at,
            sequence=msg["message_id"] if isinstance(msg["message_id"], int) else None,
            raw={**raw, "update": update},
            only_while_held=unaddressed,
            live_location=isinstance(msg.get("location"), dict) and "live_period" in msg["location"],
        )
        return WebhookResult(messages=(inbound,))

    def _membership(self, update_id: int, change: dict[str, Any]) -> WebhookResult:
        """The bot's own membership changed. Removed (kicked, left, blocked in private) or back: a notice the
        inbox stores (`bot_removed`), so every replica fails replies there at once meanwhile, not this process
        alone. Any other change (restricted, say) is only logged."""
        chat = str((change.get("chat") or {}).get("id", ""))
        status = (change.get("new_chat_member") or {}).get("status")
        if not chat or status not in _GONE | _PRESENT:
            return WebhookResult(ignored=(f"update {update_id}: the bot's membership in chat {chat} is now {status}",))
        if status in _GONE:
            log.warning("telegram.removed_from_chat", bot=self.bot_name, chat=chat, status=status, update_id=update_id)
        else:
            log.info("telegram.added_to_chat", bot=self.bot_name, chat=chat, status=status, update_id=update_id)
        who = change.get("from") or {}
        when = {"sent_at": datetime.fromtimestamp(change["date"], tz=timezone.utc)} if isinstance(change.get("date"), int) else {}
        notice = InboundMessage(
            channel=CHANNEL, external_id=delivery_key(update_id, chat, change.get("date")),
            conversation=ConversationRef(channel=CHANNEL, chat=chat),
            sender=Sender(external_id=str(who.get("id", "")), display_name=_display_name(who)), text="",
            raw={"update_id": update_id, "status": status}, bot_removed=status in _GONE, **when)
        return WebhookResult(messages=(notice,))

    @staticmethod
    def _chat_move(update_id: int, msg: dict[str, Any]) -> WebhookResult:
        """A group upgraded to a supergroup: its conversations follow it to the new chat id. Told in the
        old chat (`migrate_to_chat_id`) and in the new one (`migrate_from_chat_id`); either moves them."""
        here = str(msg["chat"]["id"])
        old, new = (here, str(msg["migrate_to_chat_id"])) if msg.get("migrate_to_chat_id") else \
            (str(msg["migrate_from_chat_id"]), here)
        sender = msg.get("from") or {}
        move = InboundMessage(
            channel=CHANNEL, external_id=delivery_key(update_id, here, msg.get("message_id")),
            conversation=ConversationRef(channel=CHANNEL, chat=old),
            sender=Sender(external_id=str(sender.get("id", "")), display_name=_display_name(sender)),
            text="", raw={"update_id": update_id, "message_id": msg.get("message_id")}, moves_to=new)
        return WebhookResult(messages=(move,))

    def _addressing(self, text: str, entities: list[dict[str, Any]]) -> _Addressing:
        """Find our @mentions and a leading /command; refuse commands that are not ours."""
        me = (self.username or "").lower()
        found = _Addressing(text=text)
        command: tuple[str, int] | None = None  # ours: its name, and where its words start (UTF-16)
        for entity in entities:
            kind, offset, length = entity.get("type"), int(entity.get("offset", 0)), int(entity.get("length", 0))
            if kind == "mention" and me and _utf16_slice(text, offset, length).lower() == f"@{me}":
                found.mention_spans.append((offset, length))
                found.addressed = True
            elif kind == "mention" and not me:
                found.unjudged_mention = _utf16_slice(text, offset, length)
            elif kind == "text_mention" and (entity.get("user") or {}).get("id") == self.bot_id:
                found.mention_spans.append((offset, length))
                found.addressed = True
            elif kind == "bot_command" and offset == 0:
                name, _, target = _utf16_slice(text, offset, length)[1:].partition("@")
                name = name.lower()
                if target and not me:
                    raise UsernameUnknown(f"command /{name} addressed to @{target}: our username is not known yet")
                if target and target.lower() != me:
                    found.refusal = f"command /{name} addressed to another bot @{target}"
                elif name not in GREETING_COMMANDS | QUESTION_COMMANDS:
                    found.refusal = f"unsupported command /{name}"
                else:
                    command = (name, offset + length)
        if command is not None and found.refusal is None:
            # Its words, without our @mentions after it ("/ask @bot what…"): their offsets are the whole text's.
            name, start = command
            after = [(offset - start, length) for offset, length in found.mention_spans if offset >= start]
            words = _utf16_slice(text, start, 1 << 30)
            found.text, found.mention_spans = (_strip_utf16(words, after) if after else words).strip(), []
            # "/help my order never arrived" is that question, answered as /ask's: greeted instead,
            # its words went unread. A bare /help, and /start (a deep link's payload), greet.
            greets = name in GREETING_COMMANDS and not (name == "help" and found.text)
            found.command = name if greets else None
            found.addressed = True  # in groups, a command is how users address a bot
        return found

    @staticmethod
    def _attachments(msg: dict[str, Any]) -> tuple[Attachment, ...]:
        caption = msg.get("caption")
        for key, kind in _MEDIA:
            item = msg.get(key)
            if not item:
                continue
            if key == "photo":
                item = max(item, key=lambda p: (p.get("width", 0) * p.get("height", 0), p.get("file_size", 0)))
            if key in ("location", "venue"):
                loc = item.get("location", item)
                url = f"geo:{loc.get('latitude')},{loc.get('longitude')}"
                return (Attachment(kind="location", url=url, caption=caption or item.get("title")),)
            file_id = item.get("file_id") if isinstance(item, dict) else None
            if key == "game":
                file_id = ((item.get("animation") or {}).get("file_id")) or None
            label = caption or (item.get("title") if key in ("game", "invoice") else None) or (item.get("emoji") if key == "sticker" else None)
            return (Attachment(kind=kind, file_id=file_id, mime_type=item.get("mime_type"), caption=label),)
        return ()
