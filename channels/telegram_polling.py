"""Telegram long polling: getUpdates read as plain JSON, each update stored before the offset passes it.

Why not aiogram's `Dispatcher.start_polling`:
- It validates every update against aiogram's models. Telegram adds fields and shapes faster than any
  SDK follows (aiogram issue 1587: `external_reply.story: {}` fails validation), and one update the
  models reject makes it fetch the same batch again forever: the whole bot goes silent.
- It moves the offset past an update whether or not we could store it, so a database outage lost the
  messages fetched meanwhile.

Here updates stay dicts, read by `UpdateParser` exactly as a webhook body is. An update that cannot be
read is logged and skipped. The offset moves past an update only once its messages are stored, so a
storage outage holds polling up (Telegram keeps unconfirmed updates for 24 hours) and the inbox's
dedupe on the update's key (`delivery_key`) absorbs what is fetched twice. Only an outage does: an update whose storing fails
for another reason (a bug, a value the database refuses) is tried `MAX_DELIVER_ATTEMPTS` times, then
logged with its id and skipped, so it cannot hold up every later message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from aiogram import Bot
from aiogram.exceptions import AiogramError, TelegramConflictError, TelegramRetryAfter, TelegramUnauthorizedError
from aiogram.methods.base import TelegramMethod
from sqlalchemy.exc import DBAPIError

from channels.base import Deliver
from channels.telegram_updates import ALLOWED_UPDATES, UpdateParser, UsernameUnknown
from gateway.backoff import doubling

log = structlog.get_logger("channels.telegram")

MAX_BACKOFF = 30.0
"""Seconds, at most, between two attempts while Telegram or our storage keeps failing."""
MAX_DELIVER_ATTEMPTS = 3
"""Attempts at storing an update that fails for a reason other than an outage, before it is skipped."""
OUTAGE_ERRORS = (DBAPIError, OSError, asyncio.TimeoutError)
"""Storage failures that pass: polling waits them out instead of skipping the update. (`deliver` is the
inbox's, so its outage is the database driver's error; only the exception type is imported here.)"""


class GetRawUpdates(TelegramMethod[list[dict[str, Any]]]):
    """getUpdates, with each update left as the JSON object Telegram sent."""

    __returning__ = list[dict[str, Any]]
    __api_method__ = "getUpdates"

    offset: int | None = None
    limit: int | None = None
    timeout: int | None = None
    allowed_updates: list[str] | None = None


class TelegramPoller:
    """One bot's long-polling loop. Run `run()` as a task; cancel the task to stop."""

    def __init__(self, bot: Bot, parser: UpdateParser, deliver: Deliver, *, bot_name: str, timeout: int) -> None:
        self.bot = bot
        self.parser = parser
        self.deliver = deliver
        self.bot_name = bot_name
        self.timeout = timeout
        self.offset: int | None = None  # the next update_id wanted; None until the first batch
        self._failed: tuple[int, int] = (0, 0)  # (update_id, attempts) of an update whose storing keeps failing
        self.polled = False  # Telegram answered a getUpdates
        self.problem: str | None = None  # why getUpdates keeps failing, for /readyz; None once it answers

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                updates = await self.bot(
                    GetRawUpdates(offset=self.offset, timeout=self.timeout, allowed_updates=list(ALLOWED_UPDATES)),
                    request_timeout=self.timeout + 10,
                )
            except TelegramRetryAfter as exc:
                log.warning("telegram.poll_rate_limited", bot=self.bot_name, retry_after=exc.retry_after)
                await asyncio.sleep(exc.retry_after)
                continue
            except AiogramError as exc:  # an outage, an HTML error page, a revoked token, a webhook set elsewhere
                failures += 1
                self._log_poll_failure(exc, failures)
                self.problem = f"polling again after {failures} failed getUpdates: {type(exc).__name__}: {exc}"[:200]
                await asyncio.sleep(_backoff(failures))
                continue
            self.polled, self.problem = True, None
            before = self.offset
            stored_all = True
            for update in updates:
                if not await self._handle(update):
                    stored_all = False
                    break
            if stored_all and (not updates or self.offset != before):
                failures = 0
            else:  # storing failed, or a batch moved the offset nowhere: never ask again at once
                failures += 1
                await asyncio.sleep(_backoff(failures))

    async def _handle(self, update: dict[str, Any]) -> bool:
        """Store one update's messages and move the offset past it; False when storing failed."""
        update_id = update.get("update_id")
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            log.warning("telegram.update_without_id", bot=self.bot_name, keys=sorted(update)[:10])
            return True
        try:
            result = self.parser.parse(update)
        except UsernameUnknown as exc:  # fetched again (the offset stays), by when getMe may have answered
            log.info("telegram.update_deferred", bot=self.bot_name, update_id=update_id, reason=str(exc))
            return False
        except Exception:  # noqa: BLE001 - one unreadable update must not stop the bot
            log.exception("telegram.update_unreadable", bot=self.bot_name, update_id=update_id)
            self.offset = update_id + 1
            return True
        for reason in result.ignored:
            log.info("telegram.ignored", bot=self.bot_name, update_id=update_id, reason=reason)
        for message in result.messages:
            try:
                await self.deliver(message)
            except OUTAGE_ERRORS:  # storage is away: keep the update on Telegram's side
                log.exception("telegram.deliver_failed", bot=self.bot_name, update_id=update_id,
                              action="polling paused; this update is fetched again")
                return False
            except Exception:  # noqa: BLE001 - not an outage: a few tries, then skip it, loudly
                attempts = self._failed[1] + 1 if self._failed[0] == update_id else 1
                self._failed = (update_id, attempts)
                if attempts < MAX_DELIVER_ATTEMPTS:
                    log.exception("telegram.deliver_failed", bot=self.bot_name, update_id=update_id, attempt=attempts)
                    return False
                # Its length, not its text: logs hold ids, never what a customer wrote (docs/data.md).
                log.exception("telegram.update_dropped", bot=self.bot_name, update_id=update_id,
                              chars=len(message.text), attempts=attempts)
        self.offset = update_id + 1
        return True

    def _log_poll_failure(self, exc: AiogramError, failures: int) -> None:
        error = f"{type(exc).__name__}: {exc}"[:300]
        if isinstance(exc, TelegramUnauthorizedError):
            log.error("telegram.poll_failed", bot=self.bot_name, error=error, hint="the bot token was revoked or is wrong")
        elif isinstance(exc, TelegramConflictError):
            log.error("telegram.poll_failed", bot=self.bot_name, error=error,
                      hint="another process polls this bot, or a webhook was set for it")
        else:
            log.warning("telegram.poll_failed", bot=self.bot_name, error=error, failures=failures)


def _backoff(failures: int) -> float:
    return doubling(failures, first=0.5, cap=MAX_BACKOFF)
