"""A WhatsApp channel's Twilio credentials, checked at start as Telegram's (getMe) and Slack's (auth.test) are.

Twilio only calls the gateway's webhook, so nothing proved the `account_sid` and `auth_token` until the first
reply's send failed with them. The channel now fetches its Account resource
(`GET /2010-04-01/Accounts/{AccountSid}.json`, the cheapest authenticated call) as it starts: refused (401, 403:
a wrong token, another account's SID, a closed account), the channel does not start (`channel.start_failed`);
failed otherwise (a 5xx, a 429, no route to Twilio, a timeout), it starts, and asks again in the background
(`whatsapp.account_check_failed` each time, `whatsapp.account_checked` once Twilio answers). A 404 is an
`api_base` that does not serve the Account resource (a stand-in that speaks only Messages.json): the channel
starts, warned once, and is not asked again; Twilio itself answers a wrong SID with 401.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import structlog
from twilio.base.exceptions import TwilioRestException
from twilio.rest import Client

from gateway.backoff import doubling
from gateway.errors import ChannelSendError
from gateway.observability.logs import redact

log = structlog.get_logger("channels.whatsapp")

REFUSED = frozenset({401, 403})  # the credentials or the account: no retry changes the answer
NOT_SERVED = 404  # the api_base has no Account resource: nothing to check, and asking again changes nothing
CHECK_TIMEOUT_S = 10.0  # an unreachable Twilio cannot hold up the start longer
RETRY_CAP_S = 300.0


async def check_account(client: Client, *, bot: str, account_sid: str, api_base: str, failures: int) -> bool:
    """Fetch the account with the channel's credentials. True: Twilio took them. Refused at start (`failures` 0):
    `ChannelSendError` (permanent), no secret in it. Else False, logged as `whatsapp.account_check_failed`."""
    try:
        await asyncio.wait_for(client.api.v2010.accounts(account_sid).fetch_async(), CHECK_TIMEOUT_S)
    except TwilioRestException as exc:
        if exc.status in REFUSED and not failures:
            raise ChannelSendError(f"Twilio refused the account_sid and auth_token ({exc.status}, error {exc.code}: "
                                   f"{exc.msg}) when the Account {account_sid} was fetched"[:200],
                                   permanent=True) from exc
        why = f"Twilio answered {exc.status} (error {exc.code}: {exc.msg})"
        if exc.status == NOT_SERVED:
            log.warning("whatsapp.account_check_failed", bot=bot, error=redact(why)[:200], failures=failures + 1,
                        next=f"not asked again: {api_base} does not serve the Account resource")
            return True
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        why = f"cannot reach Twilio at {api_base}: {type(exc).__name__}: {exc}" if str(exc) else \
            f"cannot reach Twilio at {api_base}: {type(exc).__name__}"
    else:
        if failures:
            log.info("whatsapp.account_checked", bot=bot, failures=failures)
        return True
    log.warning("whatsapp.account_check_failed", bot=bot, error=redact(why)[:200], failures=failures + 1,
                next="asked again in the background")
    return False


async def check_account_later(client: Callable[[], Client], *, bot: str, account_sid: str, api_base: str,
                              first_s: float) -> None:
    """Ask again after `first_s`, then twice as long each time up to every 5 minutes, until Twilio answers."""
    failures = 1
    while True:
        await asyncio.sleep(doubling(failures, first=first_s, cap=RETRY_CAP_S))
        if await check_account(client(), bot=bot, account_sid=account_sid, api_base=api_base, failures=failures):
            return
        failures += 1
