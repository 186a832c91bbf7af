"""The aiogram `Bot` of a Telegram channel's settings, the webhook's registration with Telegram, and where a
conversation's messages go (its chat id and forum topic)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.base import BaseSession, Response
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import ClientDecodeError, TelegramAPIError
from aiogram.methods import (
    DeleteMessage,
    DeleteWebhook,
    EditMessageText,
    GetMe,
    GetUpdates,
    SendChatAction,
    SendMessage,
    SetWebhook,
)
from aiogram.utils.token import TokenValidationError

from channels.telegram_errors import is_error_page
from channels.telegram_updates import ALLOWED_UPDATES
from gateway.errors import ChannelSendError, ConfigError
from gateway.models import ConversationRef
from gateway.settings import TelegramChannel

# aiogram reads each answer as `Response[<the method's result type>]`, a generic model that pydantic caches
# only weakly: once garbage-collected it was built again, 15–25 ms of the event loop for every send and
# typing action. Held here, the ones this adapter calls are built once.
_RESPONSE_MODELS = tuple({Response[method.__returning__] for method in (
    SendMessage, EditMessageText, DeleteMessage, SendChatAction, GetMe, DeleteWebhook, SetWebhook, GetUpdates)})


def make_bot(settings: TelegramChannel, *, session: BaseSession | None = None) -> Bot:
    """An aiogram Bot for these settings, pointed at `api_base` when it is set."""
    if session is None:
        session = AiohttpSession(api=TelegramAPIServer.from_base(settings.api_base)) if settings.api_base else AiohttpSession()
    try:
        return Bot(settings.token, session=session)
    except TokenValidationError:
        raise ConfigError("telegram.token", "not a Telegram bot token (expected <bot id>:<secret>)") from None


def webhook_url(base: str, bot: str) -> str:
    """`<base>/webhooks/{bot}/telegram` from the gateway's public base URL, or from the whole webhook URL already
    (as docs/channels/telegram.md shows it first). ValueError: no http(s) URL with a host, or one with a query."""
    parts = urlsplit(base.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"--url {base!r} is not the gateway's public base URL: give an http(s) URL with a host and no "
                         f"query, as https://bots.example.com (the command adds /webhooks/{bot}/telegram)")
    route = f"/webhooks/{bot}/telegram"
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path if path.endswith(route) else path + route, "", ""))


async def set_webhook(settings: TelegramChannel, url: str) -> None:
    """Register `url` (<public base>/webhooks/{bot}/telegram) with Telegram, with our secret token."""
    secret = settings.webhook_secret
    if not secret:  # its characters were checked when the config loaded (`TelegramChannel`)
        raise ConfigError("telegram.webhook_secret", "1-256 characters of A-Z, a-z, 0-9, _ and - are required")
    bot = make_bot(settings)
    try:
        await bot.set_webhook(url=url, secret_token=secret, allowed_updates=list(ALLOWED_UPDATES))
    except TelegramAPIError as exc:
        raise ChannelSendError(f"setWebhook failed: {exc.message}", permanent=True) from exc
    except ClientDecodeError as exc:  # a proxy's 502 page in an outage: one line, not aiogram's traceback
        what = "an error page, not JSON; try again shortly" if is_error_page(exc) else "an answer it could not read"
        raise ChannelSendError(f"setWebhook failed: Telegram answered with {what}", permanent=True) from exc
    finally:
        await bot.session.close()


def chat_id_of(chat: str) -> int | str:
    """A stored chat id as the Bot API takes it: a number, or a channel's @username."""
    return int(chat) if chat.lstrip("-").isdigit() else chat


def topic_id(conversation: ConversationRef) -> int | None:
    """The forum topic to post in (`message_thread_id`), or None: a group member's conversation
    (`ConversationRef.member`) is posted in the group itself."""
    return int(conversation.thread) if conversation.thread.isdigit() else None
