"""Whether Twilio created a message whose create call ended without a clear answer.

A 500, 502 or 504, or a connection lost after the request went out, leaves the outcome unknown: Twilio
may have created the message. Resending could send it twice; giving up could lose it. Twilio's
Messages list is newest first and filters by `To` and `From`, so the sender looks for its own: the
same Body, created since the attempt began. Found: the send succeeded, with that SID. Not found after
Twilio answered: the request is finished and created nothing, so it is safe to send again.

A template (`ContentSid`) is not looked up: its Body is rendered by Twilio, so there is nothing to match.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

import aiohttp
import structlog
from twilio.base.exceptions import TwilioException
from twilio.rest import Client

log = structlog.get_logger(__name__)

CLOCK_SLACK = timedelta(seconds=60)
"""Twilio dates messages by its clock, to the second. A message with the same text to the same person
created this long before the attempt began counts as this one, unless Twilio gave its SID to another send of
this process (`GIVEN_SIDS_KEPT`); one another replica sent, or this one before a restart, still does."""
PAGE_SIZE = 20
"""Messages read, newest first. More than this many sent to one person in seconds is not a reply."""
GIVEN_SIDS_KEPT = 1000
"""SIDs Twilio gave this process's sends, the latest kept: a message among them is another send's, not one an
attempt left unknown (a reply repeating the text of one just sent, "Thanks!", was taken for it and lost)."""


async def created_sid(client: Client, *, to: str, sender: str, body: str, since: datetime,
                      given: Collection[str] = ()) -> str | None:
    """The SID of a message with this Body from `sender` to `to` created since `since`, if Twilio has one
    that is not among the SIDs it `given` other sends.

    Raises `TwilioException` (or the HTTP client's error) when the list itself fails: the outcome stays
    unknown, and the caller decides what that means.
    """
    page = await client.messages.page_async(to=to, from_=sender, page_size=PAGE_SIZE)
    for message in page:
        created = message.date_created
        if message.body == body and created is not None and created >= since - CLOCK_SLACK \
                and str(message.sid) not in given:
            return str(message.sid)
    return None


async def lookup(client: Client, fields: dict[str, str], since: datetime, *, bot: str,
                 given: Collection[str] = ()) -> str | None:
    """`created_sid` for a create call's fields, or None when they cannot be matched or the list failed."""
    if "body" not in fields or "content_sid" in fields:
        return None
    try:
        sid = await created_sid(client, to=fields["to"], sender=fields["from_"], body=fields["body"], since=since,
                                given=given)
    except (TwilioException, aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("whatsapp.reconcile_failed", bot=bot, chat=fields["to"], error=repr(exc))
        return None
    log.info("whatsapp.reconciled", bot=bot, chat=fields["to"], found=sid is not None, sid=sid)
    return sid
