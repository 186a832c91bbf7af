"""What a Bot API refusal says: the recipient gone for good, the bot removed from the chat, an error page."""

from __future__ import annotations

from aiogram.exceptions import ClientDecodeError, TelegramRetryAfter

from gateway.errors import ChannelSendError

UNREACHABLE = ("chat not found", "user is deactivated", "bot was kicked", "have no rights to send",
               "not enough rights", "need administrator rights", "chat_write_forbidden")
"""Refusals of this conversation only (not of the bot's token): the reply fails as unreachable, not retried."""
REMOVED = ("bot was kicked", "bot was blocked", "user is deactivated", "bot is not a member")
"""403s that say the bot was removed from the chat, as `my_chat_member` tells it: until that update adds it back,
replies there fail at once instead of each collecting a 403 of its own."""


def says(markers: tuple[str, ...], message: str) -> bool:
    """Whether Telegram's error `message` holds one of `markers` (its descriptions vary in case and detail)."""
    reason = message.lower()
    return any(marker in reason for marker in markers)


def is_error_page(exc: ClientDecodeError) -> bool:
    """Whether the answer was not JSON at all (an HTML error page), rather than JSON of another shape."""
    return isinstance(exc.data, (str, bytes))


def rate_limited(exc: TelegramRetryAfter) -> ChannelSendError:
    """A 429 as the outbox reads it: refused, not sent, to be sent again after Telegram's `retry_after`."""
    return ChannelSendError(f"telegram rate limit: {exc.message}", retry_after=float(exc.retry_after), rate_limited=True)
